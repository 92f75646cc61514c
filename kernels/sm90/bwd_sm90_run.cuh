// Definition of fa2::bwd_sm90_run, in stream order. Atomic route (default mode, rows
// not split): D pre-pass (zeroing the dQ accumulator), the Hopper dK/dV kernel with
// atomic dQ, the dQ conversion. dQ-kernel route (deterministic mode, or split rows in
// either mode: p.dq_accum is then NULL): D pre-pass, the dK/dV kernel without dQ, the
// Hopper dQ kernel (no atomics, no accumulator). Every shared-memory attribute is set
// before the first launch.
#pragma once

#include <stdint.h>

#include "bwd_run.h"
#include "common/bwd_rows.cuh"
#include "common/launch.cuh"
#include "common/score_variants.cuh"
#include "sm90/bwd_sm90_dq_kernel.cuh"
#include "sm90/bwd_sm90_kernel.cuh"
#include "sm90/bwd_sm90_split_kernel.cuh"

namespace fa2 {

template <typename Elem, int kHeadDim, bool kScored>
cudaError_t bwd_sm90_run_kernels(const fa2_params_t &p, cudaStream_t stream,
                                 bool &outputs_queued)
{
    constexpr bool kSplit = BwdSm90Tile<kHeadDim>::kSplit;
    using Dq = DqSm90Traits<Elem, kHeadDim>;
    const bool atomic = p.dq_accum != nullptr;
    if (kSplit && atomic) return cudaErrorInvalidValue;  // the plan gives split rows none
    const int64_t rows = static_cast<int64_t>(p.heads_q) *
                         (p.cu_seqlens_q ? p.total_q : static_cast<int64_t>(p.batch) * p.seqlen_q);
    const int64_t dq_grid = (p.seqlen_q + Dq::kBlockM - 1) / Dq::kBlockM * p.heads_q * p.batch;
    cudaError_t err;
    if constexpr (kSplit) {
        using Tr = BwdSm90SplitTraits<Elem, kHeadDim>;
        const int64_t grid = (p.seqlen_k + Tr::kBlockN - 1) / Tr::kBlockN * p.heads_kv * p.batch;
        if ((err = allow_smem(dkdv_sm90_split_kernel<Tr, kScored>, Tr::kSmemBytes)) != cudaSuccess ||
            (err = allow_smem(dq_sm90_kernel<Dq, kScored>, Dq::kSmemBytes)) != cudaSuccess ||
            (err = launch(dot_do_o_kernel<Elem>, row_kernel_blocks(rows, p.head_dim),
                          32 * kDotWarps, 0, stream, p)) != cudaSuccess ||
            (err = launch(dkdv_sm90_split_kernel<Tr, kScored>, grid, Tr::kThreads, Tr::kSmemBytes, stream,
                          p)) != cudaSuccess)
            return err;
        outputs_queued = true;
    } else {
        using Tr = BwdSm90Traits<Elem, kHeadDim>;
        const int64_t grid = (p.seqlen_k + Tr::kBlockN - 1) / Tr::kBlockN * p.heads_kv * p.batch;
        const auto dkdv = atomic ? dkdv_sm90_kernel<Tr, true, kScored> : dkdv_sm90_kernel<Tr, false, kScored>;
        if ((err = allow_smem(dkdv, Tr::kSmemBytes)) != cudaSuccess ||
            (!atomic && (err = allow_smem(dq_sm90_kernel<Dq, kScored>, Dq::kSmemBytes)) != cudaSuccess) ||
            (err = launch(dot_do_o_kernel<Elem>, row_kernel_blocks(rows, p.head_dim),
                          32 * kDotWarps, 0, stream, p)) != cudaSuccess ||
            (err = launch(dkdv, grid, Tr::kThreads, Tr::kSmemBytes, stream, p)) != cudaSuccess)
            return err;
        outputs_queued = true;
        if (atomic)
            return launch(dq_convert_kernel<Elem>, row_kernel_blocks(rows, p.head_dim),
                          32 * kDotWarps, 0, stream, p);
    }
    return launch(dq_sm90_kernel<Dq, kScored>, dq_grid, Dq::kThreads, Dq::kSmemBytes, stream, p);
}

template <typename Elem, int kHeadDim>
cudaError_t bwd_sm90_run(const fa2_params_t &p, cudaStream_t stream, bool &outputs_queued)
{
    return p.scores != FA2_SCORES_PLAIN
               ? bwd_sm90_run_kernels<Elem, kHeadDim, true>(p, stream, outputs_queued)
               : bwd_sm90_run_kernels<Elem, kHeadDim, false>(p, stream, outputs_queued);
}

}  // namespace fa2
