// Definition of fa2::decode_run: the decode kernel's grid and launch, then (split-KV)
// the merge kernel over the splits into O and the LSE, started while the decode
// kernel's last blocks run (programmatic dependent launch, sm_90).
#pragma once

#include <stdint.h>

#include "common/launch.cuh"
#include "common/merge_kernel.cuh"
#include "decode/decode_kernel.cuh"
#include "fwd_run.h"

namespace fa2 {

// The splits' rows for the merge kernel (common/merge_kernel.cuh): warp w merges
// (sequence, token, query head) from the fp32 workspace into O and the LSE. Every split
// block writes its rows (O = 0, LSE = -inf when it has no keys). Rows of a failed or
// missing sequence are not written. Launched after the decode kernel may start
// (after_previous): nothing is read before wait_for_previous_grid().
template <typename Elem, int kMode>
struct DecodeSplitRows {
    using Out = Elem;
    using Args = fa2_params_t;
    static constexpr int kMaxParts = FA2_MAX_SPLITS;
    static constexpr bool kAfterPrevious = true;

    static __device__ __forceinline__ bool locate(const Args &p, int64_t w,
                                                  MergeRow<Out> &r)
    {
        if (w >= static_cast<int64_t>(p.batch) * p.seqlen_q * p.heads_q) return false;
        const int head = static_cast<int>(w % p.heads_q);
        const int token = static_cast<int>(w / p.heads_q % p.seqlen_q);
        const int batch = static_cast<int>(w / p.heads_q / p.seqlen_q);
        const Sequence seq = sequence<kMode>(p, batch);
        if (from_offsets<kMode>(p) && p.varlen_check[batch] != FA2_VARLEN_OK) return false;
        if (token >= seq.seqlen_q) return false;
        const int64_t row = accum_row(p, seq, token);
        r.o_parts = p.o_accum + (row * p.heads_q + head) * p.head_dim;
        r.o_part_stride = p.accum_rows * p.heads_q * p.head_dim;
        r.lse_parts = p.lse_accum + static_cast<int64_t>(head) * p.accum_rows + row;
        r.lse_part_stride = static_cast<int64_t>(p.heads_q) * p.accum_rows;
        r.parts = p.splits;
        r.head_dim = p.head_dim;
        r.o = o_row<Elem>(p, seq, head, token);
        r.lse = p.lse ? p.lse + stats_row(p, seq, head) + token : nullptr;
        r.sink = p.sinks ? __ldg(p.sinks + head) : -INFINITY;
        return true;
    }
};

template <typename Elem, int kHeadDim, int kStages>
cudaError_t decode_run(const fa2_params_t &p, cudaStream_t stream)
{
    using Tr = DecodeTraits<Elem, kHeadDim, kStages>;
    const int64_t grid =
        static_cast<int64_t>(p.batch) * p.heads_kv * p.splits * decode_row_tiles(p);
    const auto kernel = p.page_table ? decode_kernel<Tr, kPagedSeq>
                                     : decode_kernel<Tr, kDenseOrPackedSeq>;
    const cudaError_t err = launch_one(kernel, grid, Tr::kThreads, Tr::kSmemBytes, stream, p);
    if (err != cudaSuccess || p.splits == 1) return err;
    const int64_t rows = static_cast<int64_t>(p.batch) * p.seqlen_q * p.heads_q;
    const auto merge = p.page_table ? merge_kernel<DecodeSplitRows<Elem, kPagedSeq>>
                                    : merge_kernel<DecodeSplitRows<Elem, kDenseOrPackedSeq>>;
    return launch(merge, (rows + kMergeWarps - 1) / kMergeWarps, 32 * kMergeWarps, 0, stream, p,
                  /*after_previous=*/p.kernel_family == 90);
}

}  // namespace fa2
