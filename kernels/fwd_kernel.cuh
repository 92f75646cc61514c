// The fused forward kernel (sm_80 path): one thread block = Br query rows of one
// (batch, head). Q stays in shared memory; K/V tiles stream through it (K double
// buffered, V single), S = Q K^T and O += P V run on mma.sync m16n8k16 with fp32
// accumulators, P never leaves registers, and O is divided by the row sum once at
// the end.
#pragma once

#include <stdint.h>

#include "fwd_mask.cuh"
#include "fwd_params.h"
#include "fwd_traits.cuh"
#include "ptx.cuh"
#include "softmax.cuh"

namespace fa2 {

// Byte offset of 16-byte chunk `chunk` of row `row` in a swizzled tile.
template <typename Tr>
__device__ __forceinline__ uint32_t swizzled(int row, int chunk)
{
    return static_cast<uint32_t>((row * Tr::kRowChunks + (chunk ^ (row & 7))) * 16);
}

// ldmatrix addressing for one operand. Every ldmatrix row this lane addresses has
// row % 8 == lane % 8, and it reads chunk 2*step + hi (hi = 0 or 1 by lane). With
// 128-byte-aligned rows, chunk c of such a row sits at byte
// (c / 8) * 128 + ((c % 8) ^ (lane % 8)) * 16, so four per-lane offsets plus
// compile-time immediates address every step: no per-step address registers.
struct LaneChunks {
    uint32_t offset[4];  // byte offset within a 128-byte group for step % 4

    __device__ __forceinline__ LaneChunks(int lane, int hi)
    {
#pragma unroll
        for (int i = 0; i < 4; ++i) offset[i] = static_cast<uint32_t>(((2 * i + hi) ^ (lane & 7)) * 16);
    }

    // Address of chunk 2*step + hi in the row starting at `row_addr`.
    __device__ __forceinline__ uint32_t at(uint32_t row_addr, int step) const
    {
        return row_addr + (step / 4) * 128 + offset[step % 4];
    }
};

// Copies rows [0, kRows) of a tile starting at `gmem` (row stride `seq_stride`
// elements) into shared memory, zero-filling rows >= rows_valid and columns
// >= head_dim.
template <typename Tr, int kRows>
__device__ __forceinline__ void load_tile(uint32_t smem, const typename Tr::Elem *gmem,
                                          int64_t seq_stride, int rows_valid, int head_dim,
                                          int tid)
{
    constexpr int kPerThread = kRows * Tr::kLoadChunks / Tr::kThreads;
    if constexpr (Tr::kThreads % Tr::kLoadChunks == 0 &&
                  (Tr::kThreads / Tr::kLoadChunks) % 8 == 0) {
        // Each thread keeps one chunk column and steps down by a multiple of 8 rows:
        // the swizzle pattern repeats, so the shared address advances by a constant.
        constexpr int kRowStep = Tr::kThreads / Tr::kLoadChunks;
        const int row0 = tid / Tr::kLoadChunks;
        const int chunk = tid % Tr::kLoadChunks;
        const bool col_valid = chunk * 8 < head_dim;
        const typename Tr::Elem *src = gmem + row0 * seq_stride + chunk * 8;
        const uint32_t dst = smem + swizzled<Tr>(row0, chunk);
#pragma unroll
        for (int i = 0; i < kPerThread; ++i) {
            const bool valid = col_valid && row0 + i * kRowStep < rows_valid;
            cp_async_16(dst + i * kRowStep * Tr::kRowBytes, valid ? src : gmem, valid);
            src += kRowStep * seq_stride;
        }
    } else {
#pragma unroll
        for (int i = 0; i < kPerThread; ++i) {
            const int idx = tid + i * Tr::kThreads;
            const int row = idx / Tr::kLoadChunks;
            const int chunk = idx % Tr::kLoadChunks;
            const bool valid = row < rows_valid && chunk * 8 < head_dim;
            const typename Tr::Elem *src = valid ? gmem + row * seq_stride + chunk * 8 : gmem;
            cp_async_16(smem + swizzled<Tr>(row, chunk), src, valid);
        }
    }
}

// S = Q K^T for this warp's rows and one K tile.
template <typename Tr>
__device__ __forceinline__ void qk_scores(float (&s)[Tr::kMTiles][Tr::kNTiles][4],
                                          uint32_t q_smem, uint32_t k_smem, int warp, int lane)
{
#pragma unroll
    for (int mt = 0; mt < Tr::kMTiles; ++mt)
#pragma unroll
        for (int nt = 0; nt < Tr::kNTiles; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) s[mt][nt][e] = 0.f;

    // A (Q): lanes 0-15 address rows 0-15 at k 0-7, lanes 16-31 the same rows at k 8-15.
    const uint32_t q_row = q_smem + (warp * Tr::kRowsPerWarp + (lane & 15)) * Tr::kRowBytes;
    const LaneChunks q_chunks(lane, lane >> 4);
    // B (K, n-major): lanes address n 0-7 / 8-15 (bit 4) at k 0-7 / 8-15 (bit 3).
    const uint32_t k_row = k_smem + ((lane & 7) + ((lane >> 4) << 3)) * Tr::kRowBytes;
    const LaneChunks k_chunks(lane, (lane >> 3) & 1);
#pragma unroll
    for (int kk = 0; kk < Tr::kHeadDim / 16; ++kk) {
        uint32_t a[Tr::kMTiles][4];
#pragma unroll
        for (int mt = 0; mt < Tr::kMTiles; ++mt)
            ldmatrix_x4(a[mt], q_chunks.at(q_row + mt * 16 * Tr::kRowBytes, kk));
#pragma unroll
        for (int np = 0; np < Tr::kNTiles / 2; ++np) {
            uint32_t b[4];
            ldmatrix_x4(b, k_chunks.at(k_row + np * 16 * Tr::kRowBytes, kk));
#pragma unroll
            for (int mt = 0; mt < Tr::kMTiles; ++mt) {
                mma_16816<typename Tr::Elem>(s[mt][2 * np], a[mt], b[0], b[1]);
                mma_16816<typename Tr::Elem>(s[mt][2 * np + 1], a[mt], b[2], b[3]);
            }
        }
    }
}

// O += P V, with P (probabilities in the S accumulators) repacked in registers as
// the A operand: two adjacent n8 accumulator tiles are one m16k16 A tile.
template <typename Tr>
__device__ __forceinline__ void pv_accumulate(float (&o)[Tr::kMTiles][Tr::kDTiles][4],
                                              const float (&p)[Tr::kMTiles][Tr::kNTiles][4],
                                              uint32_t v_smem, int lane)
{
    using Elem = typename Tr::Elem;
    // B (V, k-major, transposed load): lanes address k 0-15 at n 0-7 / 8-15 (bit 4).
    const uint32_t v_row = v_smem + (lane & 15) * Tr::kRowBytes;
    const LaneChunks v_chunks(lane, lane >> 4);
#pragma unroll
    for (int kk = 0; kk < Tr::kBlockN / 16; ++kk) {
        uint32_t a[Tr::kMTiles][4];
#pragma unroll
        for (int mt = 0; mt < Tr::kMTiles; ++mt) {
            a[mt][0] = pack2<Elem>(p[mt][2 * kk][0], p[mt][2 * kk][1]);
            a[mt][1] = pack2<Elem>(p[mt][2 * kk][2], p[mt][2 * kk][3]);
            a[mt][2] = pack2<Elem>(p[mt][2 * kk + 1][0], p[mt][2 * kk + 1][1]);
            a[mt][3] = pack2<Elem>(p[mt][2 * kk + 1][2], p[mt][2 * kk + 1][3]);
        }
#pragma unroll
        for (int dp = 0; dp < Tr::kDTiles / 2; ++dp) {
            uint32_t b[4];
            ldmatrix_x4_trans(b, v_chunks.at(v_row + kk * 16 * Tr::kRowBytes, dp));
#pragma unroll
            for (int mt = 0; mt < Tr::kMTiles; ++mt) {
                mma_16816<Elem>(o[mt][2 * dp], a[mt], b[0], b[1]);
                mma_16816<Elem>(o[mt][2 * dp + 1], a[mt], b[2], b[3]);
            }
        }
    }
}

// Sets scores of invisible (row, key) pairs to -inf. row0/key0: the tile's first
// query row and key of this warp's fragment origin.
template <typename Tr>
__device__ __forceinline__ void apply_mask(float (&s)[Tr::kMTiles][Tr::kNTiles][4],
                                           const KeyWindow &win, int row0, int key0, int lane)
{
#pragma unroll
    for (int mt = 0; mt < Tr::kMTiles; ++mt)
#pragma unroll
        for (int nt = 0; nt < Tr::kNTiles; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int row = row0 + mt * 16 + (lane >> 2) + 8 * (e >> 1);
                const int key = key0 + nt * 8 + 2 * (lane & 3) + (e & 1);
                if (!win.visible(row, key)) s[mt][nt][e] = -INFINITY;
            }
}

template <typename Tr>
__global__ void __launch_bounds__(Tr::kThreads, 1) fwd_kernel(const fa2_fwd_params_t p)
{
    using Elem = typename Tr::Elem;
    extern __shared__ __align__(128) uint8_t smem[];

    const int tid = threadIdx.x;
    const int warp = tid / 32;
    const int lane = tid % 32;

    // Block → (batch, head, query block); within a (batch, head), query blocks go
    // last-first so the heaviest causal blocks start earliest.
    const int num_m_blocks = (p.seqlen_q + Tr::kBlockM - 1) / Tr::kBlockM;
    const int m_block = num_m_blocks - 1 - static_cast<int>(blockIdx.x % num_m_blocks);
    const int bh = static_cast<int>(blockIdx.x / num_m_blocks);
    const int head = bh % p.heads_q;
    const int batch = bh / p.heads_q;
    const int kv_head = head / (p.heads_q / p.heads_kv);

    const int row_first = m_block * Tr::kBlockM;
    const int row_last = min(row_first + Tr::kBlockM, p.seqlen_q) - 1;
    const KeyWindow win{p.seqlen_k - p.seqlen_q, p.window_left, p.window_right, p.seqlen_k};
    int key_lo, key_hi;
    win.key_range(row_first, row_last, key_lo, key_hi);
    const int n_block_min = key_lo / Tr::kBlockN;
    const int n_block_end = key_hi > key_lo ? (key_hi + Tr::kBlockN - 1) / Tr::kBlockN : n_block_min;

    const Elem *q = static_cast<const Elem *>(p.q) + batch * p.q_batch_stride +
                    head * p.q_head_stride + row_first * p.q_seq_stride;
    const Elem *k = static_cast<const Elem *>(p.k) + batch * p.k_batch_stride +
                    kv_head * p.k_head_stride;
    const Elem *v = static_cast<const Elem *>(p.v) + batch * p.v_batch_stride +
                    kv_head * p.v_head_stride;

    const uint32_t q_smem = smem_addr(smem);
    const uint32_t k_smem[2] = {q_smem + Tr::kQBytes, q_smem + Tr::kQBytes + Tr::kKVBytes};
    const uint32_t v_smem = q_smem + Tr::kQBytes + 2 * Tr::kKVBytes;

    float o[Tr::kMTiles][Tr::kDTiles][4];
#pragma unroll
    for (int mt = 0; mt < Tr::kMTiles; ++mt)
#pragma unroll
        for (int dt = 0; dt < Tr::kDTiles; ++dt)
#pragma unroll
            for (int e = 0; e < 4; ++e) o[mt][dt][e] = 0.f;
    OnlineSoftmax<Tr::kMTiles> softmax;
    softmax.init();

    if (n_block_end > n_block_min) {
        load_tile<Tr, Tr::kBlockM>(q_smem, q, p.q_seq_stride, p.seqlen_q - row_first, p.head_dim,
                                   tid);
        cp_async_commit();
        int n_block = n_block_end - 1;
        load_tile<Tr, Tr::kBlockN>(k_smem[0], k + n_block * Tr::kBlockN * p.k_seq_stride,
                                   p.k_seq_stride, p.seqlen_k - n_block * Tr::kBlockN,
                                   p.head_dim, tid);
        cp_async_commit();

        for (int it = 0; n_block >= n_block_min; ++it, --n_block) {
            const int key_first = n_block * Tr::kBlockN;
            cp_async_wait<0>();  // K(n_block), and Q on the first pass
            __syncthreads();     // ...visible to all; every warp is done with V and K(other)
            load_tile<Tr, Tr::kBlockN>(v_smem, v + key_first * p.v_seq_stride, p.v_seq_stride,
                                       p.seqlen_k - key_first, p.head_dim, tid);
            cp_async_commit();
            const bool prefetch = n_block > n_block_min;
            if (prefetch) {
                const int next_first = key_first - Tr::kBlockN;
                load_tile<Tr, Tr::kBlockN>(k_smem[(it + 1) & 1], k + next_first * p.k_seq_stride,
                                           p.k_seq_stride, p.seqlen_k - next_first, p.head_dim,
                                           tid);
                cp_async_commit();
            }

            float s[Tr::kMTiles][Tr::kNTiles][4];
            qk_scores<Tr>(s, q_smem, k_smem[it & 1], warp, lane);
            if (win.block_needs_mask(row_first, row_last, key_first, key_first + Tr::kBlockN - 1))
                apply_mask<Tr>(s, win, row_first + warp * Tr::kRowsPerWarp, key_first, lane);
            softmax.update(s, o, p.scale_log2);

            if (prefetch)
                cp_async_wait<1>();  // V(n_block); K(n_block - 1) may still fly
            else
                cp_async_wait<0>();
            __syncthreads();
            pv_accumulate<Tr>(o, s, v_smem, lane);
        }
    }

    float inv_sum[Tr::kMTiles][2], lse[Tr::kMTiles][2];
    softmax.finish(p.softmax_scale, inv_sum, lse);

    Elem *out = static_cast<Elem *>(p.o) + batch * p.o_batch_stride + head * p.o_head_stride;
    float *lse_out = p.lse ? p.lse + (static_cast<int64_t>(batch) * p.heads_q + head) * p.seqlen_q
                           : nullptr;
#pragma unroll
    for (int mt = 0; mt < Tr::kMTiles; ++mt) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = row_first + warp * Tr::kRowsPerWarp + mt * 16 + (lane >> 2) + 8 * h;
            if (row >= p.seqlen_q) continue;
            Elem *out_row = out + row * p.o_seq_stride;
#pragma unroll
            for (int dt = 0; dt < Tr::kDTiles; ++dt) {
                const int col = dt * 8 + 2 * (lane & 3);
                if (col < p.head_dim)
                    *reinterpret_cast<uint32_t *>(out_row + col) =
                        pack2<Elem>(o[mt][dt][2 * h] * inv_sum[mt][h],
                                    o[mt][dt][2 * h + 1] * inv_sum[mt][h]);
            }
            if (lse_out && (lane & 3) == 0) lse_out[row] = lse[mt][h];
        }
    }
}

}  // namespace fa2
