// The Hopper dK/dV kernel (sm_90a), default mode (dQ by fp32 atomics): one thread
// block = block_n keys of one (batch, kv head), one warpgroup per 64 keys; it loops
// over the query heads of the GQA group and the query tiles (block_m rows) that
// see its keys (block_m = 64 or 64 per warpgroup). Per step, each warpgroup runs on wgmma:
//   Sᵀ = K Qᵀ, dPᵀ = V dOᵀ        (shared × shared, both K-major; keys are rows)
//   Pᵀ = exp(scale·Sᵀ − LSE), dSᵀ = Pᵀ ∘ (dPᵀ − D)   (registers)
//   dV += Pᵀ dO, dK += dSᵀ Q      (registers × shared, dO and Q MN-major)
//   dQ[its rows or columns] += dS K   (dSᵀ through shared memory, MN-major A)
// and adds its dQ part to the fp32 accumulator with atomics. Q, dO, LSE and D are
// double buffered with cp.async; tiles use the panel layout of wgmma.cuh.
#pragma once

#include <stdint.h>

#include "bwd_kernels.cuh"
#include "bwd_sm90_tiles.h"
#include "wgmma.cuh"

namespace fa2 {

template <int kHeadDim>
struct BwdSm90Tile;

#define FA2_BWD_SM90_TILE_SPEC(d, wg, bm, split)    \
    template <>                                     \
    struct BwdSm90Tile<d> {                         \
        static constexpr int kWarpgroups = wg;      \
        static constexpr int kBlockM = bm;          \
        static constexpr bool kSplit = split;       \
    };
FA2_BWD_SM90_TILES(FA2_BWD_SM90_TILE_SPEC)
#undef FA2_BWD_SM90_TILE_SPEC

template <typename Elem_, int kHeadDim_>
struct BwdSm90Traits {
    using Elem = Elem_;
    static constexpr int kHeadDim = kHeadDim_;
    static constexpr int kWarpgroups = BwdSm90Tile<kHeadDim>::kWarpgroups;
    static constexpr int kBlockN = 64 * kWarpgroups;
    static constexpr int kBlockM = BwdSm90Tile<kHeadDim>::kBlockM;
    static constexpr int kThreads = 128 * kWarpgroups;
    static constexpr int kLoadChunks = kHeadDim / 8;
    // dQ = dS K per warpgroup: its own 64 query rows and every column when block_m has
    // 64 per warpgroup, else all (64) rows and d / warpgroups columns.
    static constexpr bool kDqSplitRows = kBlockM == 64 * kWarpgroups;
    static constexpr int kDqCols = kDqSplitRows ? kHeadDim : kHeadDim / kWarpgroups;
    static constexpr int kKVBytes = kBlockN * kHeadDim * 2;
    static constexpr int kQBytes = kBlockM * kHeadDim * 2;
    static constexpr int kDsBytes = kBlockN * kBlockM * 2;
    static constexpr int kStatsBytes = 4 * kBlockM * 4;
    static constexpr int kSmemBytes = 2 * kKVBytes + 4 * kQBytes + kDsBytes + kStatsBytes + 1024;

    static_assert(kHeadDim % 64 == 0, "whole 128-byte panels");
    static_assert(kBlockM == 64 || kDqSplitRows, "dQ = dS K is one m64 wgmma tile per warpgroup");
    static_assert(kBlockM <= 256 && kBlockM % 64 == 0, "wgmma n; dSᵀ in whole panels");
    static_assert(kDqCols % 16 == 0, "wgmma n");
};

template <typename Tr>
__global__ void __launch_bounds__(Tr::kThreads, 1) dkdv_sm90_kernel(const fa2_bwd_params_t p)
{
#if defined(FA2_SM90A)
    using Elem = typename Tr::Elem;
    constexpr int kN = Tr::kBlockM / 8;   // n8 tiles of Sᵀ (queries)
    constexpr int kD = Tr::kHeadDim / 8;  // n8 tiles of dK / dV
    extern __shared__ __align__(1024) uint8_t smem[];
    const fa2_fwd_params_t &f = p.fwd;

    const int tid = threadIdx.x;
    const int warp = tid / 32;
    const int lane = tid % 32;
    const int wg = warp / 4;

    const int n_blocks = (f.seqlen_k + Tr::kBlockN - 1) / Tr::kBlockN;
    int idx = blockIdx.x;
    const int n_block = idx % n_blocks;
    idx /= n_blocks;
    const int kv_head = idx % f.heads_kv;
    const int batch = idx / f.heads_kv;
    const int group = f.heads_q / f.heads_kv;

    const int key_first = n_block * Tr::kBlockN;
    const int key_last = min(key_first + Tr::kBlockN, f.seqlen_k) - 1;
    const KeyWindow win{f.seqlen_k - f.seqlen_q, f.window_left, f.window_right, f.seqlen_k};
    int q_lo, q_hi;
    query_range(win, f.seqlen_q, key_first, key_last, q_lo, q_hi);
    const int m_first = q_lo / Tr::kBlockM;
    const int m_count = q_hi >= q_lo ? q_hi / Tr::kBlockM - m_first + 1 : 0;
    const int steps = m_count * group;  // (query head, query tile) pairs

    const uint32_t base = (smem_addr(smem) + 1023u) & ~1023u;
    const uint32_t k_smem = base;
    const uint32_t v_smem = k_smem + Tr::kKVBytes;
    const uint32_t q_smem0 = v_smem + Tr::kKVBytes;         // two buffers
    const uint32_t do_smem0 = q_smem0 + 2 * Tr::kQBytes;    // two buffers
    const uint32_t ds_smem = do_smem0 + 2 * Tr::kQBytes;    // dSᵀ [key][query]
    const uint32_t stats_smem = ds_smem + Tr::kDsBytes;
    // stats[buf * 2 * kBlockM + {0: lse, kBlockM: D} + column]
    const float *stats = reinterpret_cast<const float *>(smem + (stats_smem - smem_addr(smem)));

    const Elem *q_base = static_cast<const Elem *>(f.q) + batch * f.q_batch_stride;
    const Elem *do_base = static_cast<const Elem *>(p.d_o) + batch * f.o_batch_stride;

    auto load_step = [&](int step, int buf) {
        const int head = kv_head * group + step / m_count;
        const int row0 = (m_first + step % m_count) * Tr::kBlockM;
        const int rows = f.seqlen_q - row0;
        load_panels<Elem, Tr::kBlockM, Tr::kLoadChunks, Tr::kThreads>(
            q_smem0 + buf * Tr::kQBytes, q_base + head * f.q_head_stride + row0 * f.q_seq_stride,
            f.q_seq_stride, rows, f.head_dim, tid);
        load_panels<Elem, Tr::kBlockM, Tr::kLoadChunks, Tr::kThreads>(
            do_smem0 + buf * Tr::kQBytes, do_base + head * f.o_head_stride + row0 * f.o_seq_stride,
            f.o_seq_stride, rows, f.head_dim, tid);
        const int64_t stat0 = (static_cast<int64_t>(batch) * f.heads_q + head) * f.seqlen_q + row0;
        for (int c = tid; c < 2 * Tr::kBlockM; c += Tr::kThreads) {
            const int col = c % Tr::kBlockM;
            const float *src = c < Tr::kBlockM ? f.lse + stat0 + col : p.d_sum + stat0 + col;
            cp_async_4(stats_smem + (buf * 2 * Tr::kBlockM + c) * 4, col < rows ? src : f.lse,
                       col < rows);
        }
    };

    float dv[1][kD][4], dk[1][kD][4];  // [1]: one m64 tile per warpgroup (store_acc's view)
    zero(dv);
    zero(dk);
    const int key0 = wg * 64;  // this warpgroup's first key row in the block
    const int dq_col0 = Tr::kDqSplitRows ? 0 : wg * Tr::kDqCols;
    const int dq_row0 = Tr::kDqSplitRows ? wg * 64 : 0;  // in the query tile

    if (steps > 0) {
        const Elem *k = static_cast<const Elem *>(f.k) + batch * f.k_batch_stride +
                        kv_head * f.k_head_stride + key_first * f.k_seq_stride;
        const Elem *v = static_cast<const Elem *>(f.v) + batch * f.v_batch_stride +
                        kv_head * f.v_head_stride + key_first * f.v_seq_stride;
        const int keys = f.seqlen_k - key_first;
        load_panels<Elem, Tr::kBlockN, Tr::kLoadChunks, Tr::kThreads>(k_smem, k, f.k_seq_stride,
                                                                      keys, f.head_dim, tid);
        load_panels<Elem, Tr::kBlockN, Tr::kLoadChunks, Tr::kThreads>(v_smem, v, f.v_seq_stride,
                                                                      keys, f.head_dim, tid);
        load_step(0, 0);
        cp_async_commit();

        for (int step = 0; step < steps; ++step) {
            const int buf = step & 1;
            cp_async_wait<0>();
            fence_proxy_async();
            __syncthreads();  // tiles of `step` visible; everyone is done with buf ^ 1 and dSᵀ
            if (step + 1 < steps) {
                load_step(step + 1, buf ^ 1);
                cp_async_commit();
            }
            const int head = kv_head * group + step / m_count;
            const int row0 = (m_first + step % m_count) * Tr::kBlockM;
            const uint32_t q_smem = q_smem0 + buf * Tr::kQBytes;
            const uint32_t do_smem = do_smem0 + buf * Tr::kQBytes;
            const float *lse = stats + buf * 2 * Tr::kBlockM;
            const float *dsum = lse + Tr::kBlockM;

            // Sᵀ = K Qᵀ and dPᵀ = V dOᵀ, two groups so that P is computed while dPᵀ runs.
            float st[kN][4], dpt[kN][4];
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < Tr::kHeadDim / 16; ++kk)
                wgmma_ss<Elem, 0, 0>(st, desc_k_major<Tr::kBlockN>(k_smem, key0, kk),
                                     desc_k_major<Tr::kBlockM>(q_smem, 0, kk), kk > 0);
            wgmma_commit();
#pragma unroll
            for (int kk = 0; kk < Tr::kHeadDim / 16; ++kk)
                wgmma_ss<Elem, 0, 0>(dpt, desc_k_major<Tr::kBlockN>(v_smem, key0, kk),
                                     desc_k_major<Tr::kBlockM>(do_smem, 0, kk), kk > 0);
            wgmma_commit();
            wgmma_wait<1>();
            reg_fence(st);

            // Pᵀ: rows are keys, columns queries.
            const bool masked = row0 + Tr::kBlockM > f.seqlen_q ||
                                win.block_needs_mask(row0, row0 + Tr::kBlockM - 1, key_first,
                                                     key_first + Tr::kBlockN - 1);
            const int key_row = key_first + warp * 16 + (lane >> 2);
#pragma unroll
            for (int n = 0; n < kN; ++n)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int col = n * 8 + 2 * (lane & 3) + (e & 1);
                    const float x = exp2_approx(fmaf(st[n][e], f.scale_log2, -lse[col] * kLog2e));
                    const int key = key_row + 8 * (e >> 1);
                    st[n][e] = masked && !(row0 + col < f.seqlen_q && win.visible(row0 + col, key))
                                   ? 0.f : x;
                }
            wgmma_wait<0>();
            reg_fence(dpt);
#pragma unroll
            for (int n = 0; n < kN; ++n)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int col = n * 8 + 2 * (lane & 3) + (e & 1);
                    dpt[n][e] = st[n][e] * (dpt[n][e] - dsum[col]);  // dSᵀ
                }

            uint32_t pa[Tr::kBlockM / 16][4], dsa[Tr::kBlockM / 16][4];
#pragma unroll
            for (int kk = 0; kk < Tr::kBlockM / 16; ++kk) {
                a_fragment<Elem>(pa[kk], st, kk);
                a_fragment<Elem>(dsa[kk], dpt, kk);
            }
            // dSᵀ to shared memory, [key][query] in the panel layout: the A operand of
            // dQ = dS K read MN-major. Same rounding as the registers.
            {
                const int r = warp * 16 + (lane >> 2);
#pragma unroll
                for (int kk = 0; kk < Tr::kBlockM / 16; ++kk)
#pragma unroll
                    for (int i = 0; i < 4; ++i) {
                        const int row = r + 8 * (i & 1);
                        const int col = kk * 16 + 8 * (i >> 1) + 2 * (lane & 3);
                        const uint32_t addr = ds_smem + panel_offset<Tr::kBlockN>(row, col / 8) +
                                              (col % 8) * 2;
                        asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(dsa[kk][i]));
                    }
            }
            fence_proxy_async();

            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < Tr::kBlockM / 16; ++kk)
                wgmma_rs<Elem, 1>(dv[0], pa[kk], desc_mn_major<Tr::kBlockM>(do_smem, kk), 1);
#pragma unroll
            for (int kk = 0; kk < Tr::kBlockM / 16; ++kk)
                wgmma_rs<Elem, 1>(dk[0], dsa[kk], desc_mn_major<Tr::kBlockM>(q_smem, kk), 1);
            wgmma_commit();

            __syncthreads();  // dSᵀ of every warpgroup written

            // dQ[:, dq_col0 ..] = dS K: A = dSᵀ read MN-major, B = K read MN-major.
            float dq[Tr::kDqCols / 8][4];
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < Tr::kBlockN / 16; ++kk)
                wgmma_ss<Elem, 1, 1>(dq, desc_mn_major<Tr::kBlockN>(ds_smem, kk, dq_row0 / 64),
                                     wgmma_desc(k_smem + (dq_col0 / 64) * Tr::kBlockN * 128 +
                                                    (dq_col0 % 64) * 2 + kk * 16 * 128,
                                                Tr::kBlockN * 128, 1024),
                                     kk > 0);
            wgmma_commit();
            wgmma_wait<0>();
            reg_fence(dq);
            reg_fence(dv[0]);
            reg_fence(dk[0]);

            float *acc = p.dq_accum +
                         ((static_cast<int64_t>(batch) * f.heads_q + head) * f.seqlen_q) * f.head_dim;
            const int q_row = row0 + dq_row0 + (warp % 4) * 16 + (lane >> 2);
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int row = q_row + 8 * h;
                if (row >= f.seqlen_q) continue;
#pragma unroll
                for (int n = 0; n < Tr::kDqCols / 8; ++n) {
                    const int col = dq_col0 + n * 8 + 2 * (lane & 3);
                    if (col < f.head_dim)
                        atomic_add2(acc + static_cast<int64_t>(row) * f.head_dim + col,
                                    dq[n][2 * h], dq[n][2 * h + 1]);
                }
            }
        }
    }

    // dK = scale · Σ dSᵀ Q, dV = Σ Pᵀ dO; rows past seqlen_k are not written.
    float scale[1][2], one[1][2];
    fill_scale(scale, f.softmax_scale);
    fill_scale(one, 1.f);
    const int warp_key0 = key_first + warp * 16;
    store_acc<Elem>(dk, scale,
                    static_cast<Elem *>(p.dk) + batch * f.k_batch_stride + kv_head * f.k_head_stride,
                    f.k_seq_stride, warp_key0, f.seqlen_k, 0, f.head_dim, lane);
    store_acc<Elem>(dv, one,
                    static_cast<Elem *>(p.dv) + batch * f.v_batch_stride + kv_head * f.v_head_stride,
                    f.v_seq_stride, warp_key0, f.seqlen_k, 0, f.head_dim, lane);
#endif
}

}  // namespace fa2
