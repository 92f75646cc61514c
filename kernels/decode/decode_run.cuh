// Definition of fa2::decode_run: the decode kernel's grid and launch, then (split-KV)
// the combine kernel that merges the splits into O and the LSE.
#pragma once

#include <stdint.h>

#include "common/launch.cuh"
#include "common/merge.cuh"
#include "decode/decode_kernel.cuh"
#include "fwd_run.h"

namespace fa2 {

// One thread per 8 elements of a (sequence, token, query head): the splits merged
// (common/merge.cuh) into O and the LSE. Rows of no valid sequence are not written.
template <typename Elem, int kMode>
__global__ void decode_combine_kernel(const fa2_params_t p)
{
    const int chunks = p.head_dim / 8;
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= static_cast<int64_t>(p.batch) * p.seqlen_q * p.heads_q * chunks) return;
    const int chunk = static_cast<int>(i % chunks);
    const int head = static_cast<int>(i / chunks % p.heads_q);
    const int token = static_cast<int>(i / chunks / p.heads_q % p.seqlen_q);
    const int batch = static_cast<int>(i / chunks / p.heads_q / p.seqlen_q);
    const Sequence seq = sequence<kMode>(p, batch);
    if (kMode != kDenseSeq && p.varlen_check[batch] != FA2_VARLEN_OK) return;
    if (token >= seq.seqlen_q) return;
    const int64_t row = accum_row(p, seq, token);
    const float lse = merge_chunk(
        p.o_accum + (row * p.heads_q + head) * p.head_dim + chunk * 8,
        p.accum_rows * p.heads_q * p.head_dim, p.lse_accum + head * p.accum_rows + row,
        static_cast<int64_t>(p.heads_q) * p.accum_rows, p.decode_splits,
        o_row<Elem>(p, seq, head, token) + chunk * 8);
    if (p.lse && chunk == 0) p.lse[stats_row(p, seq, head) + token] = lse;
}

template <typename Elem, int kHeadDim>
cudaError_t decode_run(const fa2_params_t &p, cudaStream_t stream)
{
    using Tr = DecodeTraits<Elem, kHeadDim>;
    const int64_t grid = static_cast<int64_t>(p.batch) * p.heads_kv * p.decode_splits;
    const auto kernel = p.page_table    ? decode_kernel<Tr, kPagedSeq>
                        : p.cu_seqlens_q ? decode_kernel<Tr, kPackedSeq>
                                         : decode_kernel<Tr, kDenseSeq>;
    const cudaError_t err = launch_one(kernel, grid, Tr::kThreads, Tr::kSmemBytes, stream, p);
    if (err != cudaSuccess || p.decode_splits == 1) return err;
    constexpr int kThreads = 256;
    const int64_t work =
        static_cast<int64_t>(p.batch) * p.seqlen_q * p.heads_q * (p.head_dim / 8);
    const auto combine = p.page_table    ? decode_combine_kernel<Elem, kPagedSeq>
                         : p.cu_seqlens_q ? decode_combine_kernel<Elem, kPackedSeq>
                                          : decode_combine_kernel<Elem, kDenseSeq>;
    return launch(combine, (work + kThreads - 1) / kThreads, kThreads, 0, stream, p);
}

}  // namespace fa2
