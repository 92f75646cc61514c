// The addressing layer: the one place where (sequence, head, row) becomes an address,
// for every tensor of a call (Q, K, V, O, dO, dQ, dK, dV) and for the per-row statistics
// (LSE, D, the fp32 dQ accumulator). Kernels take row pointers and row strides from
// here and do no batch or head arithmetic of their own.
//
// A sequence (Sequence, from sequence()) is where its rows start and how long it is:
//   - a dense batch: every sequence has the call's lengths and sits at
//     batch * batch_stride (its start rows are 0);
//   - a packed variable-length batch (p.cu_seqlens_q set): the batch strides are 0 and
//     sequence b's rows start at cu_seqlens_q[b] / cu_seqlens_k[b], its lengths from the
//     offsets (or seqused_k); p.seqlen_q / p.seqlen_k are then the planned maxima;
//   - a paged KV cache (kPagedSeq): common/paged_tile.cuh finds each key row in its
//     page and loads K/V tiles from there;
//   - split-KV: a block's key range is a slice of the sequence's, set by the caller.
#pragma once

#include <stdint.h>

#include "common/params.h"

namespace fa2 {

// One sequence of the call: its index, its first rows in Q/O and in K/V (0 for a dense
// batch), its lengths, and for a packed batch the first metadata check it failed
// (fa2_varlen_check_t; 0: passed).
struct Sequence {
    int batch;
    int q_start, k_start;
    int seqlen_q, seqlen_k;
    int check;
};

// How a kernel finds its sequences: compiled for dense, packed or paged batches (the
// compute-bound forward kernels: a dense batch's keep the call's lengths as constants,
// and ran 3-7 % slower at d = 32 and 256 as the packed kernel), or deciding at run time
// from p.cu_seqlens_q whether the batch is dense or packed: the decode kernel with
// every check (kDenseOrPackedSeq; it streams K and V at the memory's rate either way),
// the backward with bounds only (kAnySeq).
enum SeqMode { kDenseSeq, kPackedSeq, kPagedSeq, kAnySeq, kDenseOrPackedSeq };

// Whether the call's sequences come from offsets (a packed batch, a paged cache): their
// K/V rows past the last key then hold other data, and their checks are recorded.
template <int kMode>
__device__ __forceinline__ bool from_offsets(const fa2_params_t &p)
{
    return kMode == kPagedSeq || kMode == kPackedSeq ||
           (kMode != kDenseSeq && p.cu_seqlens_q != nullptr);
}

// Sequence `batch`. The forward's packed and paged batches: from the offsets, checked
// (fa2_varlen_check_t, in order; the page ids are checked by the kernels,
// common/varlen_check.cuh): a sequence that fails a check gets seqlen_q = seqlen_k = 0,
// so no block reads or writes anything for it. The backward (kAnySeq, also the dense
// backward's kernel): only the bounds that keep it inside the tensors, with no record
// to write and the dense path's code as it was.
template <int kMode>
__device__ __forceinline__ Sequence sequence(const fa2_params_t &p, int batch)
{
    Sequence s = {batch, 0, 0, p.seqlen_q, p.seqlen_k, FA2_VARLEN_OK};
    if constexpr (kMode == kAnySeq) {
        if (p.cu_seqlens_q) {
            s.q_start = p.cu_seqlens_q[batch];
            s.seqlen_q = p.cu_seqlens_q[batch + 1] - s.q_start;
            s.k_start = p.cu_seqlens_k[batch];
            s.seqlen_k =
                p.seqused_k ? p.seqused_k[batch] : p.cu_seqlens_k[batch + 1] - s.k_start;
            const bool k_in_bounds = s.k_start >= 0 && s.seqlen_k >= 0 &&
                                     s.seqlen_k <= p.seqlen_k &&
                                     s.k_start <= p.total_k - s.seqlen_k;
            const bool in_bounds = s.q_start >= 0 && s.seqlen_q >= 0 &&
                                   s.seqlen_q <= p.seqlen_q &&
                                   s.q_start <= p.total_q - s.seqlen_q && k_in_bounds;
            if (!in_bounds) s.seqlen_q = s.seqlen_k = 0;
        }
    } else if constexpr (kMode != kDenseSeq) {
        if (!from_offsets<kMode>(p)) return s;  // a dense batch
        s.q_start = p.cu_seqlens_q[batch];
        const int q_end = p.cu_seqlens_q[batch + 1];
        s.seqlen_q = q_end - s.q_start;
        int k_span = 0;  // the keys cu_seqlens_k gives the sequence
        if (kMode != kPagedSeq) {
            s.k_start = p.cu_seqlens_k[batch];
            k_span = p.cu_seqlens_k[batch + 1] - s.k_start;
        }
        s.seqlen_k = kMode == kPagedSeq || p.seqused_k ? p.seqused_k[batch] : k_span;
        if (s.q_start < 0 || (batch == 0 && s.q_start != 0) || s.seqlen_q < 0 ||
            q_end > p.total_q)
            s.check = FA2_VARLEN_CU_SEQLENS_Q;
        else if (s.seqlen_q > p.seqlen_q)
            s.check = FA2_VARLEN_SEQLEN_Q;
        else if (kMode != kPagedSeq &&
                 (s.k_start < 0 || (batch == 0 && s.k_start != 0) || k_span < 0 ||
                  s.k_start > p.total_k - k_span))
            s.check = FA2_VARLEN_CU_SEQLENS_K;
        else if (s.seqlen_k < 0 || s.seqlen_k > p.seqlen_k)
            s.check = FA2_VARLEN_SEQLEN_K;
        else if (kMode != kPagedSeq && s.seqlen_k > k_span)  // paged: the plan's pages
            s.check = FA2_VARLEN_SEQUSED_K;                    // hold p.seqlen_k keys
        if (s.check != FA2_VARLEN_OK) s.seqlen_q = s.seqlen_k = 0;
    }
    return s;
}

// Row `row` of head `head` in sequence `s`.
template <typename Elem>
__device__ __forceinline__ const Elem *q_row(const fa2_params_t &p, const Sequence &s,
    int head, int row)
{
    return static_cast<const Elem *>(p.q) + s.batch * p.q_batch_stride + head * p.q_head_stride +
           (s.q_start + row) * p.q_seq_stride;
}

template <typename Elem>
__device__ __forceinline__ const Elem *k_row(const fa2_params_t &p, const Sequence &s,
    int kv_head, int row)
{
    return static_cast<const Elem *>(p.k) + s.batch * p.k_batch_stride +
           kv_head * p.k_head_stride + (s.k_start + row) * p.k_seq_stride;
}

template <typename Elem>
__device__ __forceinline__ const Elem *v_row(const fa2_params_t &p, const Sequence &s,
    int kv_head, int row)
{
    return static_cast<const Elem *>(p.v) + s.batch * p.v_batch_stride +
           kv_head * p.v_head_stride + (s.k_start + row) * p.v_seq_stride;
}

template <typename Elem>
__device__ __forceinline__ Elem *o_row(const fa2_params_t &p, const Sequence &s,
    int head, int row)
{
    return static_cast<Elem *>(p.o) + s.batch * p.o_batch_stride + head * p.o_head_stride +
           (s.q_start + row) * p.o_seq_stride;
}

// dO has O's layout, dQ Q's, dK K's and dV V's.
template <typename Elem>
__device__ __forceinline__ const Elem *do_row(const fa2_params_t &p, const Sequence &s,
    int head, int row)
{
    return static_cast<const Elem *>(p.d_o) + s.batch * p.o_batch_stride + head * p.o_head_stride +
           (s.q_start + row) * p.o_seq_stride;
}

template <typename Elem>
__device__ __forceinline__ Elem *dq_row(const fa2_params_t &p, const Sequence &s,
    int head, int row)
{
    return static_cast<Elem *>(p.dq) + s.batch * p.q_batch_stride + head * p.q_head_stride +
           (s.q_start + row) * p.q_seq_stride;
}

template <typename Elem>
__device__ __forceinline__ Elem *dk_row(const fa2_params_t &p, const Sequence &s,
    int kv_head, int row)
{
    return static_cast<Elem *>(p.dk) + s.batch * p.k_batch_stride + kv_head * p.k_head_stride +
           (s.k_start + row) * p.k_seq_stride;
}

template <typename Elem>
__device__ __forceinline__ Elem *dv_row(const fa2_params_t &p, const Sequence &s,
    int kv_head, int row)
{
    return static_cast<Elem *>(p.dv) + s.batch * p.v_batch_stride + kv_head * p.v_head_stride +
           (s.k_start + row) * p.v_seq_stride;
}

// Index of query row 0 of (sequence, head) in the per-row statistics: LSE and D (one
// float per row), the dQ accumulator (head_dim floats per row). Dense: [batch, heads_q,
// seqlen_q]; packed: [heads_q, total_q].
__device__ __forceinline__ int64_t stats_row(const fa2_params_t &p, const Sequence &s, int head)
{
    return s.batch * p.stats_batch_stride + head * p.stats_head_stride + s.q_start;
}

// Rows of the per-row statistics: batch * heads_q * seqlen_q, or heads_q * total_q.
__device__ __forceinline__ int64_t stats_rows(const fa2_params_t &p)
{
    return p.cu_seqlens_q ? static_cast<int64_t>(p.heads_q) * p.total_q
                          : static_cast<int64_t>(p.batch) * p.heads_q * p.seqlen_q;
}

// The row kernels number every query row of the call flat, statistics order: flat row
// r is row `row` of head `head` in sequence `batch`. A packed batch counts as one
// sequence of total_q rows (batch 0; its batch strides are 0), spare rows included.
struct FlatRow {
    int batch, head, row;
};

__device__ __forceinline__ FlatRow flat_row(const fa2_params_t &p, int64_t r)
{
    FlatRow fr;
    fr.row = static_cast<int>(r % p.stats_head_stride);
    fr.head = static_cast<int>((r / p.stats_head_stride) % p.heads_q);
    fr.batch = p.stats_batch_stride ? static_cast<int>(r / p.stats_batch_stride) : 0;
    return fr;
}

}  // namespace fa2
