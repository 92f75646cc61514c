// Definition of fa2::bwd_sm90_run, in stream order: D pre-pass (zeroing the dQ
// accumulator), the Hopper dK/dV kernel (split or not, by the tile table) with atomic
// dQ, the dQ conversion.
#pragma once

#include <stdint.h>

#include "bwd_run.cuh"
#include "bwd_sm90_kernel.cuh"
#include "bwd_sm90_split_kernel.cuh"

namespace fa2 {

template <typename Elem, int kHeadDim>
cudaError_t bwd_sm90_run(const fa2_bwd_params_t &p, cudaStream_t stream)
{
    const fa2_fwd_params_t &f = p.fwd;
    if (!p.dq_accum) return cudaErrorInvalidValue;  // deterministic mode runs bwd_run
    const int64_t rows = static_cast<int64_t>(f.batch) * f.heads_q * f.seqlen_q;
    cudaError_t err = launch(dot_do_o_kernel<Elem>, (rows + kDotWarps - 1) / kDotWarps,
                             32 * kDotWarps, 0, stream, p);
    if (err != cudaSuccess) return err;
    if constexpr (BwdSm90Tile<kHeadDim>::kSplit) {
        using Tr = BwdSm90SplitTraits<Elem, kHeadDim>;
        const int64_t n_blocks = (f.seqlen_k + Tr::kBlockN - 1) / Tr::kBlockN;
        err = launch(dkdv_sm90_split_kernel<Tr>, n_blocks * f.heads_kv * f.batch, Tr::kThreads,
                     Tr::kSmemBytes, stream, p);
    } else {
        using Tr = BwdSm90Traits<Elem, kHeadDim>;
        const int64_t n_blocks = (f.seqlen_k + Tr::kBlockN - 1) / Tr::kBlockN;
        err = launch(dkdv_sm90_kernel<Tr>, n_blocks * f.heads_kv * f.batch, Tr::kThreads,
                     Tr::kSmemBytes, stream, p);
    }
    if (err != cudaSuccess) return err;
    return launch(dq_convert_kernel<Elem>, (rows + kDotWarps - 1) / kDotWarps, 32 * kDotWarps,
                  0, stream, p);
}

}  // namespace fa2
