// Definition of fa2::bwd_run, in stream order: D pre-pass (zeroing the dQ
// accumulator in atomic mode), then either the dK/dV kernel with atomic dQ and the
// dQ conversion, or (deterministic) the dK/dV kernel and the dQ kernel. Every
// shared-memory attribute is set before the first launch.
#pragma once

#include <stdint.h>

#include "sm80/bwd_kernels.cuh"
#include "bwd_run.h"
#include "common/launch.cuh"
#include "common/score_variants.cuh"

namespace fa2 {

template <typename Elem, int kHeadDim, int kCompact, bool kScored>
cudaError_t bwd_run_kernels(const fa2_params_t &p, cudaStream_t stream, bool &outputs_queued)
{
    using Tr = BwdTraits<Elem, kHeadDim, kCompact>;
    const int64_t rows = static_cast<int64_t>(p.heads_q) *
                         (p.cu_seqlens_q ? p.total_q : static_cast<int64_t>(p.batch) * p.seqlen_q);
    const int64_t n_blocks = (p.seqlen_k + Tr::kBlockN - 1) / Tr::kBlockN;
    const int64_t dkdv_grid = n_blocks * Tr::kSlices * p.heads_kv * p.batch;
    const int64_t dq_grid = (p.seqlen_q + Tr::kDqBlockM - 1) / Tr::kDqBlockM * p.heads_q * p.batch;
    cudaError_t err;
    if (p.dq_accum) {
        // dQ accumulated by the dK/dV kernel with atomics, then scaled and converted.
        if ((err = allow_smem(dkdv_kernel<Tr, true, kScored>, Tr::kAtomicSmemBytes)) != cudaSuccess ||
            (err = launch(dot_do_o_kernel<Elem>, row_kernel_blocks(rows, p.head_dim),
                          32 * kDotWarps, 0, stream, p)) != cudaSuccess ||
            (err = launch(dkdv_kernel<Tr, true, kScored>, dkdv_grid, Tr::kThreads, Tr::kAtomicSmemBytes,
                          stream, p)) != cudaSuccess)
            return err;
        outputs_queued = true;
        return launch(dq_convert_kernel<Elem>, row_kernel_blocks(rows, p.head_dim),
                      32 * kDotWarps, 0, stream, p);
    }
    if ((err = allow_smem(dkdv_kernel<Tr, false, kScored>, Tr::kDkdvSmemBytes)) != cudaSuccess ||
        (err = allow_smem(dq_kernel<Tr, kScored>, Tr::kDqSmemBytes)) != cudaSuccess ||
        (err = launch(dot_do_o_kernel<Elem>, row_kernel_blocks(rows, p.head_dim),
                      32 * kDotWarps, 0, stream, p)) != cudaSuccess ||
        (err = launch(dkdv_kernel<Tr, false, kScored>, dkdv_grid, Tr::kThreads, Tr::kDkdvSmemBytes,
                      stream, p)) != cudaSuccess)
        return err;
    outputs_queued = true;
    return launch(dq_kernel<Tr, kScored>, dq_grid, Tr::kDqThreads, Tr::kDqSmemBytes, stream, p);
}

template <typename Elem, int kHeadDim, int kCompact>
cudaError_t bwd_run(const fa2_params_t &p, cudaStream_t stream, bool &outputs_queued)
{
    return p.scores != FA2_SCORES_PLAIN
               ? bwd_run_kernels<Elem, kHeadDim, kCompact, true>(p, stream, outputs_queued)
               : bwd_run_kernels<Elem, kHeadDim, kCompact, false>(p, stream, outputs_queued);
}

}  // namespace fa2
