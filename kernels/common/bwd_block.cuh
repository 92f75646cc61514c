// The work of one dK/dV thread block, shared by the dK/dV kernels of both families:
// block index → (column slice, key block, kv head, batch), the query tiles whose rows
// can see some of its keys (for every query head of the GQA group), the dQ atomics
// and the dK/dV epilogue.
#pragma once

#include <stdint.h>

#include "common/params.h"
#include "common/mask.cuh"
#include "common/ptx.cuh"
#include "common/seqinfo.cuh"
#include "common/warp_gemm.cuh"

namespace fa2 {

struct KeyBlock {
    Sequence seq;
    int kv_head, group, slice;
    int key_first, key_last;  // key_last clamped to seqlen_k - 1
    int m_first, m_count;     // query tiles [m_first, m_first + m_count) of each head
    int steps;                // (query head, query tile) pairs: m_count * group
    KeyWindow win;

    // Without GQA (group 1) no division: it cost a few percent of a step at d = 128.
    __device__ __forceinline__ int head(int step) const
    {
        return group == 1 ? kv_head : kv_head * group + step / m_count;
    }
    __device__ __forceinline__ int tile(int step) const
    {
        return m_first + (group == 1 ? step : step % m_count);
    }
};

// Blocks are numbered slice fastest, then key block, kv head, batch: the blocks of one
// (batch, kv head) are neighbours, and the heaviest causal key blocks (the first)
// start first. The key blocks cover the longest sequence (p.seqlen_k).
template <int kBlockN, int kBlockM, int kSlices>
__device__ __forceinline__ KeyBlock key_block(const fa2_params_t &p)
{
    KeyBlock b;
    const int n_blocks = (p.seqlen_k + kBlockN - 1) / kBlockN;
    int idx = blockIdx.x;
    b.slice = idx % kSlices;
    idx /= kSlices;
    const int n_block = idx % n_blocks;
    idx /= n_blocks;
    b.kv_head = idx % p.heads_kv;
    b.seq = sequence<kAnySeq>(p, idx / p.heads_kv);
    b.group = p.heads_q / p.heads_kv;
    b.key_first = n_block * kBlockN;
    b.key_last = min(b.key_first + kBlockN, b.seq.seqlen_k) - 1;
    b.win = KeyWindow{b.seq.seqlen_k - b.seq.seqlen_q, p.window_left, p.window_right,
                      b.seq.seqlen_k};
    b.m_first = b.m_count = 0;  // past a packed sequence's keys: no step, nothing stored
    if (b.key_first < b.seq.seqlen_k)
        block_query_tiles<kBlockM>(b.win, b.seq.seqlen_q, b.key_first, b.key_last, b.m_first,
                                   b.m_count);
    b.steps = b.m_count * b.group;
    return b;
}

// Adds a dQ fragment (m16n8 accumulator layout; row row0 + 16m + lane/4 (+8), column
// col0 + 8n + 2 (lane % 4)) to the fp32 accumulator of (sequence, head) with float2
// atomics; rows past seqlen_q and columns past head_dim are skipped.
template <int kM, int kN>
__device__ __forceinline__ void add_dq(const fa2_params_t &p, const Sequence &seq, int head,
                                       int row0, int col0, const float (&dq)[kM][kN][4],
                                       int lane)
{
    float *acc = p.dq_accum + stats_row(p, seq, head) * p.head_dim;
#pragma unroll
    for (int m = 0; m < kM; ++m)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = row0 + m * 16 + (lane >> 2) + 8 * h;
            if (row >= seq.seqlen_q) continue;
#pragma unroll
            for (int n = 0; n < kN; ++n) {
                const int col = col0 + n * 8 + 2 * (lane & 3);
                if (col < p.head_dim)
                    atomic_add2(acc + static_cast<int64_t>(row) * p.head_dim + col, dq[m][n][2 * h],
                                dq[m][n][2 * h + 1]);
            }
        }
}

// dK = scale · Σ dSᵀ Q and dV = Σ Pᵀ dO of a warp's key rows (from key0) and columns
// (from col0), to Elem; rows past seqlen_k are not written.
template <typename Elem, int kM, int kN>
__device__ __forceinline__ void store_dkdv(const fa2_params_t &p, const KeyBlock &b,
                                           const float (&dk)[kM][kN][4],
                                           const float (&dv)[kM][kN][4], int key0, int col0,
                                           int lane)
{
    float scale[kM][2], one[kM][2];
    fill_scale(scale, p.softmax_scale);
    fill_scale(one, 1.f);
    store_acc<Elem>(dk, scale, dk_row<Elem>(p, b.seq, b.kv_head, 0), p.k_seq_stride, key0,
                    b.seq.seqlen_k, col0, p.head_dim, lane);
    store_acc<Elem>(dv, one, dv_row<Elem>(p, b.seq, b.kv_head, 0), p.v_seq_stride, key0,
                    b.seq.seqlen_k, col0, p.head_dim, lane);
}

}  // namespace fa2
