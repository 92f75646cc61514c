// The Hopper dQ kernel (sm_90a) of the dQ-kernel route (d = 256 in both modes, every
// Hopper head dim in deterministic mode; the dK/dV kernel then runs without its dQ
// part): one thread block = 128 query rows of one (batch, head), a warpgroup per 64
// rows, visiting the key blocks the rows see. Per block of 64 keys: S = Q Kᵀ and
// dP = dO Vᵀ (operands in shared memory), P = exp(scale·S − LSE), dS = P ∘ (dP − D) in
// registers, then dQ += dS K with dS as the register A operand. dQ stays in registers
// and is written once: no atomics, no fp32 accumulator, bit-identical run to run.
// K is double buffered; V single, reloaded once both warpgroups are done with dP.
#pragma once

#include <math.h>
#include <stdint.h>

#include "common/bwd_rows.cuh"
#include "common/seqinfo.cuh"
#include "common/warp_gemm.cuh"
#include "sm90/bwd_sm90_tiles.h"
#include "common/exp_scores.cuh"
#include "common/mask.cuh"
#include "sm90/wgmma.cuh"

namespace fa2 {

template <typename Elem_, int kHeadDim_>
struct DqSm90Traits {
    using Elem = Elem_;
    static constexpr int kHeadDim = kHeadDim_;
    static constexpr int kBlockM = FA2_BWD_SM90_DQ_BLOCK_M;  // two warpgroups of 64 rows
    static constexpr int kBlockN = FA2_BWD_SM90_DQ_BLOCK_N;
    static constexpr int kThreads = 256;
    static constexpr int kLoadChunks = kHeadDim / 8;
    static constexpr int kQBytes = kBlockM * kHeadDim * 2;
    static constexpr int kKVBytes = kBlockN * kHeadDim * 2;
    static constexpr int kSmemBytes = 2 * kQBytes + 3 * kKVBytes + 1024;  // Q, dO, K ×2, V

    static_assert(kHeadDim % 64 == 0 && kHeadDim <= 256, "whole panels; wgmma n");
    static_assert(kBlockM == 128 && kBlockN % 16 == 0, "a warpgroup per 64 rows; k16 steps");
    static_assert(kSmemBytes == fa2_bwd_sm90_dq_smem_bytes(kHeadDim),
                  "the planner's shared-memory formula (bwd_sm90_tiles.h)");
};

// kScored: the score variants (softcap, ALiBi) in the recomputed P and in dS.
template <typename Tr, bool kScored>
__global__ void __launch_bounds__(Tr::kThreads, 1) dq_sm90_kernel(const fa2_params_t p)
{
#if defined(FA2_SM90A)
    using Elem = typename Tr::Elem;
    constexpr int kN = Tr::kBlockN / 8;    // n8 tiles of S (keys)
    constexpr int kD = Tr::kHeadDim / 8;   // n8 tiles of dQ
    extern __shared__ __align__(1024) uint8_t smem[];

    const int tid = threadIdx.x;
    const int warp = tid / 32;
    const int lane = tid % 32;
    const int wg_row0 = (warp / 4) * 64;

    const auto [seq, head, kv_head, row_first, row_last, n_first, n_end, win] =
        query_tile<Tr::kBlockM, Tr::kBlockN, true, kAnySeq>(p);

    const uint32_t q_smem = (smem_addr(smem) + 1023u) & ~1023u;
    const uint32_t do_smem = q_smem + Tr::kQBytes;
    const uint32_t k_smem = do_smem + Tr::kQBytes;  // two buffers
    const uint32_t v_smem = k_smem + 2 * Tr::kKVBytes;

    auto load_k = [&, seq = seq, kv_head = kv_head](uint32_t dst, int n_block) {
        const int key0 = n_block * Tr::kBlockN;
        load_panels<Elem, Tr::kBlockN, Tr::kLoadChunks, Tr::kThreads>(
            dst, k_row<Elem>(p, seq, kv_head, key0), p.k_seq_stride, seq.seqlen_k - key0,
            p.head_dim, tid);
    };
    auto load_v = [&, seq = seq, kv_head = kv_head](uint32_t dst, int n_block) {
        const int key0 = n_block * Tr::kBlockN;
        load_panels<Elem, Tr::kBlockN, Tr::kLoadChunks, Tr::kThreads>(
            dst, v_row<Elem>(p, seq, kv_head, key0), p.v_seq_stride, seq.seqlen_k - key0,
            p.head_dim, tid);
    };

    // This thread's two rows: LSE (as an exp2 offset) and D.
    const int warp_row0 = row_first + warp * 16;
    const int64_t stat0 = stats_row(p, seq, head);
    float lse_log2[2], dsum[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int row = warp_row0 + (lane >> 2) + 8 * h;
        const bool valid = row < seq.seqlen_q;
        lse_log2[h] = valid ? p.lse[stat0 + row] * kLog2e : 0.f;
        dsum[h] = valid ? p.d_sum[stat0 + row] : 0.f;
    }

    [[maybe_unused]] ScoreVariants variants{};
    if constexpr (kScored) variants = score_variants(p, seq.batch, head, seq.seqlen_q, seq.seqlen_k);

    float dq[1][kD][4];
    zero(dq);
    if (n_end > n_first) {
        load_panels<Elem, Tr::kBlockM, Tr::kLoadChunks, Tr::kThreads>(
            q_smem, q_row<Elem>(p, seq, head, row_first), p.q_seq_stride,
            seq.seqlen_q - row_first, p.head_dim, tid);
        load_panels<Elem, Tr::kBlockM, Tr::kLoadChunks, Tr::kThreads>(
            do_smem, do_row<Elem>(p, seq, head, row_first), p.o_seq_stride,
            seq.seqlen_q - row_first, p.head_dim, tid);
        int n_block = n_end - 1;
        load_k(k_smem, n_block);
        load_v(v_smem, n_block);
        cp_async_commit();

        for (int it = 0; n_block >= n_first; ++it, --n_block) {
            const int key0 = n_block * Tr::kBlockN;
            const uint32_t k_buf = k_smem + (it & 1) * Tr::kKVBytes;
            cp_async_wait<0>();  // K and V of n_block (Q and dO on the first pass)
            fence_proxy_async();
            __syncthreads();     // ...visible to wgmma; everyone is done with the other K
            const bool prefetch = n_block > n_first;
            if (prefetch) {
                load_k(k_smem + ((it + 1) & 1) * Tr::kKVBytes, n_block - 1);
                cp_async_commit();
            }

            // Step-0 descriptors, rebuilt each block (opaque: not hoisted into registers
            // held across the loop), and the k steps added as constants.
            const uint64_t q_desc = desc_k_major<Tr::kBlockM>(opaque(q_smem), wg_row0, 0);
            const uint64_t do_desc = desc_k_major<Tr::kBlockM>(opaque(do_smem), wg_row0, 0);
            const uint64_t k_desc = desc_k_major<Tr::kBlockN>(k_buf, 0, 0);
            const uint64_t v_desc = desc_k_major<Tr::kBlockN>(opaque(v_smem), 0, 0);
            float s[kN][4], dp[kN][4];
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < Tr::kHeadDim / 16; ++kk)
                wgmma_ss<Elem, 0, 0>(s, q_desc + k_major_step<Tr::kBlockM>(kk),
                                     k_desc + k_major_step<Tr::kBlockN>(kk), kk > 0);
            wgmma_commit();
#pragma unroll
            for (int kk = 0; kk < Tr::kHeadDim / 16; ++kk)
                wgmma_ss<Elem, 0, 0>(dp, do_desc + k_major_step<Tr::kBlockM>(kk),
                                     v_desc + k_major_step<Tr::kBlockN>(kk), kk > 0);
            wgmma_commit();
            wgmma_wait<1>();
            reg_fence(s);

            const bool masked = win.block_needs_mask(row_first, row_last, key0, key0 + Tr::kBlockN - 1);
            if constexpr (!kScored) {
                exp_scores_queries_as_rows(s, p.scale_log2, win, lse_log2, masked,
                                           warp_row0 + (lane >> 2), key0, lane);
            } else {
                // dQ needs no P: pg (P times softcap's derivative) takes its place, made
                // while dP runs, as the plain kernel makes P
                exp_scores_queries_as_rows_variants(s, pg_to(s), variants, win, lse_log2, masked,
                                                    warp_row0 + (lane >> 2), key0, lane);
            }

            wgmma_wait<0>();
            reg_fence(dp);
            __syncthreads();  // both warpgroups are done with V
            if (prefetch) {
                load_v(v_smem, n_block - 1);
                cp_async_commit();
            }
#pragma unroll
            for (int n = 0; n < kN; ++n)
#pragma unroll
                for (int e = 0; e < 4; ++e) dp[n][e] = s[n][e] * (dp[n][e] - dsum[e >> 1]);
            uint32_t ds[Tr::kBlockN / 16][4];
#pragma unroll
            for (int kk = 0; kk < Tr::kBlockN / 16; ++kk) a_fragment<Elem>(ds[kk], dp, kk);

            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < Tr::kBlockN / 16; ++kk)
                wgmma_rs<Elem, 1>(dq[0], ds[kk], desc_mn_major<Tr::kBlockN>(k_buf, 0) + mn_major_step(kk), 1);
            wgmma_commit();
            wgmma_wait<0>();
            reg_fence(dq[0]);
        }
    }

    float scale[1][2];
    fill_scale(scale, p.softmax_scale);
    store_acc<Elem>(dq, scale, dq_row<Elem>(p, seq, head, 0), p.q_seq_stride, warp_row0,
                    seq.seqlen_q, 0, p.head_dim, lane);
#endif
}

}  // namespace fa2
