// The metadata checks of a packed forward, done by the attention blocks themselves (no
// extra launch, nothing to reset between calls): each block knows its sequence's
// verdict before it writes anything, a failed sequence's blocks write no output, and
// one block per sequence records the verdict in the workspace (p.varlen_check[b],
// fa2_varlen_check_t), every call. The offset and length checks come with the
// sequence (sequence() in common/seqinfo.cuh); a paged cache's page ids are checked
// here, every id of the sequence's keys by every block of it, so that all its blocks
// agree.
#pragma once

#include "common/params.h"
#include "common/seqinfo.cuh"

namespace fa2 {

// 1 when this thread saw a page id of the sequence's keys outside [0, num_pages)
// (page-table entries tid, tid + kThreads, ...).
template <int kThreads>
__device__ __forceinline__ int bad_page_ids(const fa2_params_t &p, const Sequence &seq, int tid)
{
    const int32_t *pages = p.page_table + static_cast<int64_t>(seq.batch) * p.pages_per_seq;
    const int n = static_cast<int>((static_cast<int64_t>(seq.seqlen_k) + p.page_size - 1) /
                                   p.page_size);
    int bad = 0;
#pragma unroll 4
    for (int i = tid; i < n; i += kThreads)
        bad |= static_cast<unsigned>(__ldg(pages + i)) >= static_cast<unsigned>(p.num_pages);
    return bad;
}

// The block's sequence's verdict (block-uniform), recorded by the one block per
// sequence for which `recorder` is true; a dense batch's is FA2_VARLEN_OK, not
// recorded. Call with every thread; kDenseSeq kernels do not call it.
template <int kMode, int kThreads>
__device__ __forceinline__ int varlen_verdict(const fa2_params_t &p, const Sequence &seq,
                                              bool recorder, int tid)
{
    int check = seq.check;
    if constexpr (kMode == kPagedSeq)
        if (__syncthreads_or(check == FA2_VARLEN_OK && bad_page_ids<kThreads>(p, seq, tid)))
            check = FA2_VARLEN_PAGE_ID;
    if (tid == 0 && recorder && from_offsets<kMode>(p)) p.varlen_check[seq.batch] = check;
    return check;
}

// The prefill kernels' form: the recorder is the block of query tile 0 and head 0.
template <int kMode, int kBlockM, int kThreads>
__device__ __forceinline__ int varlen_verdict(const fa2_params_t &p, const Sequence &seq,
                                              int head, int tid)
{
    const int m_blocks = (p.seqlen_q + kBlockM - 1) / kBlockM;
    return varlen_verdict<kMode, kThreads>(p, seq, head == 0 && blockIdx.x % m_blocks == 0,
                                           tid);
}

}  // namespace fa2
