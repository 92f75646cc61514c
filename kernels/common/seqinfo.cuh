// The addressing layer: the one place where (batch, head, row) becomes an address, for
// every tensor of a call (Q, K, V, O, dO, dQ, dK, dV) and for the per-row statistics
// (LSE, D, the fp32 dQ accumulator). Kernels take row pointers and row strides from
// here and do no batch or head arithmetic of their own.
//
// Today every sequence of the batch has the same lengths (p.seqlen_q, p.seqlen_k) and
// sits at batch * batch_stride. What comes next changes this file, and the tile loads
// that take a row pointer and a stride, but not the kernels' loops:
//   - packed variable-length batches: the batch term becomes the sequence's first row
//     (cu_seqlens[batch]) times the row stride, and seqlen_q / seqlen_k come per
//     sequence (the statistics then index by the packed row);
//   - a paged KV cache: k_row / v_row look the row's page up in a page table (a tile
//     then spans whole pages, so a tile keeps one base pointer and one stride);
//   - split-KV: a block's key range is a slice of the sequence's, set by the caller.
#pragma once

#include <stdint.h>

#include "common/params.h"

namespace fa2 {

// Row `row` of head `head` in sequence `batch`.
template <typename Elem>
__device__ __forceinline__ const Elem *q_row(const fa2_params_t &p, int batch, int head,
                                             int row)
{
    return static_cast<const Elem *>(p.q) + batch * p.q_batch_stride + head * p.q_head_stride +
           row * p.q_seq_stride;
}

template <typename Elem>
__device__ __forceinline__ const Elem *k_row(const fa2_params_t &p, int batch, int kv_head,
                                             int row)
{
    return static_cast<const Elem *>(p.k) + batch * p.k_batch_stride +
           kv_head * p.k_head_stride + row * p.k_seq_stride;
}

template <typename Elem>
__device__ __forceinline__ const Elem *v_row(const fa2_params_t &p, int batch, int kv_head,
                                             int row)
{
    return static_cast<const Elem *>(p.v) + batch * p.v_batch_stride +
           kv_head * p.v_head_stride + row * p.v_seq_stride;
}

template <typename Elem>
__device__ __forceinline__ Elem *o_row(const fa2_params_t &p, int batch, int head, int row)
{
    return static_cast<Elem *>(p.o) + batch * p.o_batch_stride + head * p.o_head_stride +
           row * p.o_seq_stride;
}

// dO has O's layout, dQ Q's, dK K's and dV V's.
template <typename Elem>
__device__ __forceinline__ const Elem *do_row(const fa2_params_t &p, int batch, int head,
                                              int row)
{
    return static_cast<const Elem *>(p.d_o) + batch * p.o_batch_stride + head * p.o_head_stride +
           row * p.o_seq_stride;
}

template <typename Elem>
__device__ __forceinline__ Elem *dq_row(const fa2_params_t &p, int batch, int head, int row)
{
    return static_cast<Elem *>(p.dq) + batch * p.q_batch_stride + head * p.q_head_stride +
           row * p.q_seq_stride;
}

template <typename Elem>
__device__ __forceinline__ Elem *dk_row(const fa2_params_t &p, int batch, int kv_head,
                                        int row)
{
    return static_cast<Elem *>(p.dk) + batch * p.k_batch_stride + kv_head * p.k_head_stride +
           row * p.k_seq_stride;
}

template <typename Elem>
__device__ __forceinline__ Elem *dv_row(const fa2_params_t &p, int batch, int kv_head,
                                        int row)
{
    return static_cast<Elem *>(p.dv) + batch * p.v_batch_stride + kv_head * p.v_head_stride +
           row * p.v_seq_stride;
}

// Index of query row 0 of (batch, head) in the per-row statistics: LSE and D (one float
// per row), the dQ accumulator (head_dim floats per row).
__device__ __forceinline__ int64_t stats_row(const fa2_params_t &p, int batch, int head)
{
    return (static_cast<int64_t>(batch) * p.heads_q + head) * p.seqlen_q;
}

// The row kernels number every query row of the call flat, statistics order: flat row
// r is row `row` of head `head` in sequence `batch`.
struct FlatRow {
    int batch, head, row;
};

__device__ __forceinline__ FlatRow flat_row(const fa2_params_t &p, int64_t r)
{
    FlatRow fr;
    fr.row = static_cast<int>(r % p.seqlen_q);
    fr.head = static_cast<int>((r / p.seqlen_q) % p.heads_q);
    fr.batch = static_cast<int>(r / (static_cast<int64_t>(p.seqlen_q) * p.heads_q));
    return fr;
}

}  // namespace fa2
