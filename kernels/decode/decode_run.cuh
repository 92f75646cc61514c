// Definition of fa2::decode_run: the decode kernel's grid and launch, then (split-KV)
// the combine kernel that merges the splits into O and the LSE, started while the
// decode kernel's last blocks run (programmatic dependent launch, sm_90).
#pragma once

#include <stdint.h>

#include "common/launch.cuh"
#include "common/grid_dependency.cuh"
#include "decode/decode_kernel.cuh"
#include "fwd_run.h"

namespace fa2 {

// One warp per (sequence, token, query head) merges the splits: lane i reads the LSEs
// of splits i, i + 32, ... (FA2_MAX_SPLITS at most), the warp reduces them to the
// merged LSE and each split's weight, then each lane sums 4 of every 128 columns of
// the splits' O. Every split block writes its rows (O = 0, LSE = -inf when it has no
// keys), so every O read is finite. Rows of a failed
// or missing sequence are not written. Launched after the decode kernel may start
// (after_previous): nothing is read before wait_for_previous_grid().
template <typename Elem, int kMode>
__global__ void __launch_bounds__(128) decode_combine_kernel(const fa2_params_t p)
{
    constexpr int kPerLane = (FA2_MAX_SPLITS + 31) / 32;
    constexpr unsigned kAll = 0xffffffffu;
    wait_for_previous_grid();
    const int lane = threadIdx.x % 32;
    const int64_t w = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
    if (w >= static_cast<int64_t>(p.batch) * p.seqlen_q * p.heads_q) return;
    const int head = static_cast<int>(w % p.heads_q);
    const int token = static_cast<int>(w / p.heads_q % p.seqlen_q);
    const int batch = static_cast<int>(w / p.heads_q / p.seqlen_q);
    const Sequence seq = sequence<kMode>(p, batch);
    if (kMode != kDenseSeq && p.varlen_check[batch] != FA2_VARLEN_OK) return;
    if (token >= seq.seqlen_q) return;
    const int64_t row = accum_row(p, seq, token);
    const int splits = p.splits;

    const float *lse_part = p.lse_accum + static_cast<int64_t>(head) * p.accum_rows + row;
    const int64_t lse_stride = static_cast<int64_t>(p.heads_q) * p.accum_rows;
    float lse[kPerLane], top = -INFINITY;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
        const int split = lane + 32 * i;
        lse[i] = split < splits ? lse_part[split * lse_stride] : -INFINITY;
        top = fmaxf(top, lse[i]);
    }
#pragma unroll
    for (int m = 16; m > 0; m /= 2) top = fmaxf(top, __shfl_xor_sync(kAll, top, m));
    float sum = 0.f;
    if (top != -INFINITY)
#pragma unroll
        for (int i = 0; i < kPerLane; ++i) sum += __expf(lse[i] - top);  // -inf: 0
#pragma unroll
    for (int m = 16; m > 0; m /= 2) sum += __shfl_xor_sync(kAll, sum, m);
    if (p.sinks) {  // a sink (include/fa2.h) joins the row's denominator once, here
        const float sink = __ldg(p.sinks + head);
        if (sink != -INFINITY) {
            const float new_top = fmaxf(top, sink);
            sum = (top == -INFINITY ? 0.f : sum * __expf(top - new_top)) + __expf(sink - new_top);
            top = new_top;
        }
    }
    const float total = top == -INFINITY ? -INFINITY : top + __logf(sum);
    float weight[kPerLane];
#pragma unroll
    for (int i = 0; i < kPerLane; ++i)
        weight[i] = top == -INFINITY ? 0.f : __expf(lse[i] - total);

    const float *o_part = p.o_accum + (row * p.heads_q + head) * p.head_dim;
    const int64_t o_stride = p.accum_rows * p.heads_q * p.head_dim;
    Elem *dst = o_row<Elem>(p, seq, head, token);
    // Splits in groups of kGroup, every load of a group issued before the first use:
    // indices past the last split repeat it (a valid address) with weight 0.
    // Every lane runs every pass, its columns or not (d = 64 gives lanes 16..31 none):
    // the weights are shuffled from all 32 lanes.
    constexpr int kGroup = 16;
    static_assert(32 % kGroup == 0, "a group within one lane's weight slot");
    for (int pass = 0; pass < p.head_dim; pass += 128) {
        const int col = pass + 4 * lane;
        const bool mine = col < p.head_dim;
        float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
        for (int first = 0; first < splits; first += kGroup) {
            float4 x[kGroup];
#pragma unroll
            for (int j = 0; j < kGroup; ++j) {
                const int split = min(first + j, splits - 1);
                x[j] = mine ? *reinterpret_cast<const float4 *>(o_part + split * o_stride + col)
                            : make_float4(0.f, 0.f, 0.f, 0.f);
            }
            const float slot = weight[first / 32];  // lane j: split first / 32 * 32 + j
#pragma unroll
            for (int j = 0; j < kGroup; ++j) {
                const float shared = __shfl_sync(kAll, slot, (first + j) % 32);
                const float wt = first + j < splits ? shared : 0.f;
                acc.x += wt * x[j].x, acc.y += wt * x[j].y, acc.z += wt * x[j].z,
                    acc.w += wt * x[j].w;
            }
        }
        if (mine)
            *reinterpret_cast<uint2 *>(dst + col) =
                make_uint2(pack2<Elem>(acc.x, acc.y), pack2<Elem>(acc.z, acc.w));
    }
    if (p.lse && lane == 0) p.lse[stats_row(p, seq, head) + token] = total;
}

template <typename Elem, int kHeadDim, int kStages>
cudaError_t decode_run(const fa2_params_t &p, cudaStream_t stream)
{
    using Tr = DecodeTraits<Elem, kHeadDim, kStages>;
    const int64_t grid = static_cast<int64_t>(p.batch) * p.heads_kv * p.splits;
    const bool scored = p.scores != FA2_SCORES_PLAIN;
    const auto kernel = scored ? (p.page_table     ? decode_kernel<Tr, kPagedSeq, true>
                                  : p.cu_seqlens_q ? decode_kernel<Tr, kPackedSeq, true>
                                                   : decode_kernel<Tr, kDenseSeq, true>)
                               : (p.page_table     ? decode_kernel<Tr, kPagedSeq, false>
                                  : p.cu_seqlens_q ? decode_kernel<Tr, kPackedSeq, false>
                                                   : decode_kernel<Tr, kDenseSeq, false>);
    const cudaError_t err = launch_one(kernel, grid, Tr::kThreads, Tr::kSmemBytes, stream, p);
    if (err != cudaSuccess || p.splits == 1) return err;
    constexpr int kWarps = 4;
    const int64_t rows = static_cast<int64_t>(p.batch) * p.seqlen_q * p.heads_q;
    const auto combine = p.page_table     ? decode_combine_kernel<Elem, kPagedSeq>
                         : p.cu_seqlens_q ? decode_combine_kernel<Elem, kPackedSeq>
                                          : decode_combine_kernel<Elem, kDenseSeq>;
    return launch(combine, (rows + kWarps - 1) / kWarps, 32 * kWarps, 0, stream, p,
                  /*after_previous=*/p.kernel_family == 90);
}

}  // namespace fa2
