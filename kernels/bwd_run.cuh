// Definition of fa2::bwd_run, in stream order: D pre-pass (zeroing the dQ
// accumulator in atomic mode), then either the dK/dV kernel with atomic dQ and the
// dQ conversion, or (deterministic) the dK/dV kernel and the dQ kernel.
#pragma once

#include <stdint.h>

#include "bwd_kernels.cuh"
#include "bwd_run.h"
#include "launch.cuh"

namespace fa2 {

template <typename Elem, int kHeadDim>
cudaError_t bwd_run(const fa2_bwd_params_t &p, cudaStream_t stream)
{
    using Tr = BwdTraits<Elem, kHeadDim>;
    const fa2_fwd_params_t &f = p.fwd;
    const int64_t rows = static_cast<int64_t>(f.batch) * f.heads_q * f.seqlen_q;
    cudaError_t err = launch(dot_do_o_kernel<Elem>, row_kernel_blocks(rows, f.head_dim),
                             32 * kDotWarps, 0, stream, p);
    if (err != cudaSuccess) return err;

    const int64_t n_blocks = (f.seqlen_k + Tr::kBlockN - 1) / Tr::kBlockN;
    const int64_t dkdv_grid = n_blocks * Tr::kSlices * f.heads_kv * f.batch;
    if (p.dq_accum) {
        // dQ accumulated by the dK/dV kernel with atomics, then scaled and converted.
        err = launch(dkdv_kernel<Tr, true>, dkdv_grid, Tr::kThreads, Tr::kAtomicSmemBytes,
                     stream, p);
        if (err != cudaSuccess) return err;
        return launch(dq_convert_kernel<Elem>, row_kernel_blocks(rows, f.head_dim),
                      32 * kDotWarps, 0, stream, p);
    }
    err = launch(dkdv_kernel<Tr, false>, dkdv_grid, Tr::kThreads, Tr::kDkdvSmemBytes, stream, p);
    if (err != cudaSuccess) return err;

    const int64_t m_blocks = (f.seqlen_q + Tr::kDqBlockM - 1) / Tr::kDqBlockM;
    return launch(dq_kernel<Tr>, m_blocks * f.heads_q * f.batch, Tr::kDqThreads,
                  Tr::kDqSmemBytes, stream, p);
}

}  // namespace fa2
