// Definition of fa2::fwd_run: grid, shared memory, launch.
#pragma once

#include <stdint.h>

#include "sm80/fwd_kernel.cuh"
#include "fwd_run.h"
#include "common/launch.cuh"

namespace fa2 {

template <typename Elem, int kHeadDim, int kCompact>
cudaError_t fwd_run(const fa2_params_t &p, cudaStream_t stream)
{
    using Tr = FwdTraits<Elem, kHeadDim, kCompact>;
    const int64_t m_blocks = (p.seqlen_q + Tr::kBlockM - 1) / Tr::kBlockM;
    const int64_t grid = m_blocks * p.heads_q * p.batch;

    const bool scored = p.scores != FA2_SCORES_PLAIN;
    const auto kernel = scored ? (p.page_table     ? fwd_kernel<Tr, kPagedSeq, true>
                                  : p.cu_seqlens_q ? fwd_kernel<Tr, kPackedSeq, true>
                                                   : fwd_kernel<Tr, kDenseSeq, true>)
                               : (p.page_table     ? fwd_kernel<Tr, kPagedSeq, false>
                                  : p.cu_seqlens_q ? fwd_kernel<Tr, kPackedSeq, false>
                                                   : fwd_kernel<Tr, kDenseSeq, false>);
    return launch_one(kernel, grid, Tr::kThreads, Tr::kSmemBytes, stream, p);
}

}  // namespace fa2
