// The merge kernel of a split decode's partial results (O_i, LSE_i over separate key
// ranges; decode/decode_run.cuh). LSE = log sum exp LSE_i, O = sum exp(LSE_i - LSE) O_i,
// in fp32; a part with LSE_i = -inf weighs nothing (its O_i is finite: every split block
// writes its rows); every part -inf: O = 0, LSE = -inf. An attention sink
// (include/fa2.h) joins the denominator once, as a part with no values. fa2_combine
// merges a 16-byte chunk per thread instead (kernels/combine.cu): with 2-4 parts that
// layout ran about twice as fast (docs/building.md, the instance budget).
//
// One warp per (row, head): lane i keeps the LSEs of parts i, i + 32, ... in registers,
// the warp reduces them to the merged LSE and each part's weight; then each lane sums
// 4 of every 128 columns over the parts, a group's loads issued before its weights are
// shuffled. Where the rows lie is a policy type, Rows:
//   using Out;                         element type of O (the O_i are fp32)
//   using Args;                        the kernel's argument
//   static constexpr int kMaxParts;    the most parts a row has
//   static constexpr bool kAfterPrevious;  wait for the previous grid (programmatic
//                                      dependent launch) before reading
//   static bool locate(const Args &, int64_t w, MergeRow<Out> &);  warp w's row,
//                                      false for none
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>

#include "common/grid_dependency.cuh"
#include "common/ptx.cuh"

namespace fa2 {

// Where one (row, head) of a merge lies. Part i's O at o_parts + i * o_part_stride,
// its LSE at lse_parts[i * lse_part_stride].
template <typename Out>
struct MergeRow {
    const float *o_parts;
    int64_t o_part_stride;
    const float *lse_parts;
    int64_t lse_part_stride;
    int parts;
    int head_dim;
    Out *o;
    float *lse;  // nullptr: not stored
    float sink;  // natural units; -inf: none
};

constexpr int kMergeWarps = 4;  // warps of a block

// 4 consecutive fp32 parts' elements, and 4 results to a 16-bit O.
__device__ __forceinline__ float4 load4(const float *src)
{
    return *reinterpret_cast<const float4 *>(src);
}

template <typename T>
__device__ __forceinline__ void store4(T *dst, float4 x)
{
    *reinterpret_cast<uint2 *>(dst) = make_uint2(pack2<T>(x.x, x.y), pack2<T>(x.z, x.w));
}

// Lane `lane`'s weights of parts lane, lane + 32, ... (0 past the last part) and the
// row's merged LSE (natural units; -inf when every part and the sink are).
template <int kPerLane, typename Out>
__device__ __forceinline__ float part_weights(const MergeRow<Out> &r, int lane,
                                              float (&weight)[kPerLane])
{
    constexpr unsigned kAll = 0xffffffffu;
    float lse[kPerLane], top = -INFINITY;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
        const int part = lane + 32 * i;
        lse[i] = part < r.parts ? r.lse_parts[part * r.lse_part_stride] : -INFINITY;
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
    if (r.sink != -INFINITY) {
        const float new_top = fmaxf(top, r.sink);
        sum = (top == -INFINITY ? 0.f : sum * __expf(top - new_top)) + __expf(r.sink - new_top);
        top = new_top;
    }
    const float total = top == -INFINITY ? -INFINITY : top + __logf(sum);
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) weight[i] = top == -INFINITY ? 0.f : __expf(lse[i] - total);
    return total;
}

template <typename Rows>
__global__ void __launch_bounds__(32 * kMergeWarps) merge_kernel(const typename Rows::Args args)
{
    using Out = typename Rows::Out;
    constexpr unsigned kAll = 0xffffffffu;
    constexpr int kPerLane = (Rows::kMaxParts + 31) / 32;
    constexpr int kGroup = 16;  // parts whose loads are in flight together
    static_assert(32 % kGroup == 0, "a group within one lane's weight slot");
    if constexpr (Rows::kAfterPrevious) wait_for_previous_grid();
    const int lane = threadIdx.x % 32;
    const int64_t w = static_cast<int64_t>(blockIdx.x) * kMergeWarps + threadIdx.x / 32;
    MergeRow<Out> r;
    if (!Rows::locate(args, w, r)) return;
    float weight[kPerLane];
    const float total = part_weights(r, lane, weight);

    // Every lane runs every pass, its columns or not (d = 64 gives lanes 16..31 none):
    // the weights are shuffled from all 32 lanes. Indices past the last part repeat it
    // (a valid address) with weight 0.
    for (int pass = 0; pass < r.head_dim; pass += 128) {
        const int col = pass + 4 * lane;
        const bool mine = col < r.head_dim;
        float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
        for (int first = 0; first < r.parts; first += kGroup) {
            float4 x[kGroup];
#pragma unroll
            for (int j = 0; j < kGroup; ++j) {
                const int part = min(first + j, r.parts - 1);
                x[j] = mine ? load4(r.o_parts + part * r.o_part_stride + col)
                            : make_float4(0.f, 0.f, 0.f, 0.f);
            }
            const float slot = weight[first / 32];  // lane j: part first / 32 * 32 + j
#pragma unroll
            for (int j = 0; j < kGroup; ++j) {
                const float shared = __shfl_sync(kAll, slot, (first + j) % 32);
                const float wt = first + j < r.parts ? shared : 0.f;
                acc.x += wt * x[j].x, acc.y += wt * x[j].y, acc.z += wt * x[j].z,
                    acc.w += wt * x[j].w;
            }
        }
        if (mine) store4(r.o + col, acc);
    }
    if (r.lse && lane == 0) *r.lse = total;
}

}  // namespace fa2
