// Definition of fa2::bwd_sm90_run, in stream order. Not split (d = 64, 128): D
// pre-pass (zeroing the dQ accumulator), the Hopper dK/dV kernel with atomic dQ, the
// dQ conversion. Split (d = 256): D pre-pass, the dK/dV kernel without dQ, the dQ
// kernel (no atomics, no accumulator).
#pragma once

#include <stdint.h>

#include "bwd_run.cuh"
#include "bwd_sm90_dq_kernel.cuh"
#include "bwd_sm90_kernel.cuh"
#include "bwd_sm90_split_kernel.cuh"

namespace fa2 {

template <typename Elem, int kHeadDim>
cudaError_t bwd_sm90_run(const fa2_bwd_params_t &p, cudaStream_t stream)
{
    const fa2_fwd_params_t &f = p.fwd;
    const int64_t rows = static_cast<int64_t>(f.batch) * f.heads_q * f.seqlen_q;
    if constexpr (BwdSm90Tile<kHeadDim>::kSplit) {
        fa2_bwd_params_t q = p;
        q.dq_accum = nullptr;  // nothing to zero
        cudaError_t err = launch(dot_do_o_kernel<Elem>, (rows + kDotWarps - 1) / kDotWarps,
                                 32 * kDotWarps, 0, stream, q);
        if (err != cudaSuccess) return err;
        using Tr = BwdSm90SplitTraits<Elem, kHeadDim>;
        const int64_t n_blocks = (f.seqlen_k + Tr::kBlockN - 1) / Tr::kBlockN;
        err = launch(dkdv_sm90_split_kernel<Tr, false>, n_blocks * f.heads_kv * f.batch,
                     Tr::kThreads, Tr::kSmemBytes, stream, q);
        if (err != cudaSuccess) return err;
        using Dq = DqSm90Traits<Elem, kHeadDim>;
        const int64_t m_blocks = (f.seqlen_q + Dq::kBlockM - 1) / Dq::kBlockM;
        return launch(dq_sm90_kernel<Dq>, m_blocks * f.heads_q * f.batch, Dq::kThreads,
                      Dq::kSmemBytes, stream, q);
    } else {
        if (!p.dq_accum) return cudaErrorInvalidValue;  // deterministic mode runs bwd_run
        cudaError_t err = launch(dot_do_o_kernel<Elem>, (rows + kDotWarps - 1) / kDotWarps,
                                 32 * kDotWarps, 0, stream, p);
        if (err != cudaSuccess) return err;
        using Tr = BwdSm90Traits<Elem, kHeadDim>;
        const int64_t n_blocks = (f.seqlen_k + Tr::kBlockN - 1) / Tr::kBlockN;
        err = launch(dkdv_sm90_kernel<Tr>, n_blocks * f.heads_kv * f.batch, Tr::kThreads,
                     Tr::kSmemBytes, stream, p);
        if (err != cudaSuccess) return err;
        return launch(dq_convert_kernel<Elem>, (rows + kDotWarps - 1) / kDotWarps,
                      32 * kDotWarps, 0, stream, p);
    }
}

}  // namespace fa2
