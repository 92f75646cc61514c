// The Hopper dK/dV kernel for large head dims (sm_90a, both modes; dQ comes from
// dq_sm90_kernel): one thread block = 64 keys of one (batch, kv head) and two
// warpgroups that split the work of each 64-query step instead of the keys, so that dK
// and dV (64 × d each) fit in registers:
//   warpgroup 0: Sᵀ = K Qᵀ, Pᵀ = exp(scale·Sᵀ − LSE), to shared memory in fp32 and Elem;
//   warpgroup 1: dPᵀ = V dOᵀ, then dSᵀ = Pᵀ ∘ (dPᵀ − D) to shared memory (Elem);
//   both, each for its half of the d columns (all operands in shared memory):
//     dV += Pᵀ dO as soon as Pᵀ is there (it runs while dSᵀ is computed), then
//     dK += dSᵀ Q.
// Both warpgroups hold identical accumulator layouts for Sᵀ and dPᵀ, so thread t of
// warpgroup 1 reads exactly the P values thread t of warpgroup 0 wrote.
#pragma once

#include <stdint.h>

#include "sm90/bwd_sm90_kernel.cuh"

namespace fa2 {

template <typename Elem_, int kHeadDim_>
struct BwdSm90SplitTraits {
    using Elem = Elem_;
    static constexpr int kHeadDim = kHeadDim_;
    static constexpr int kBlockN = 64;
    static constexpr int kBlockM = 64;
    static constexpr int kThreads = 256;
    static constexpr int kHalf = kHeadDim / 2;  // dK/dV/dQ columns per warpgroup
    static constexpr int kLoadChunks = kHeadDim / 8;
    static constexpr int kKVBytes = kBlockN * kHeadDim * 2;
    static constexpr int kQBytes = kBlockM * kHeadDim * 2;
    static constexpr int kTileBytes = kBlockN * kBlockM * 2;  // Pᵀ or dSᵀ, Elem
    static constexpr int kXchgBytes = kBlockN * kBlockM * 4;  // P, fp32
    static constexpr int kStatsBytes = 4 * kBlockM * 4;
    static constexpr int kSmemBytes =
        2 * kKVBytes + 4 * kQBytes + 2 * kTileBytes + kXchgBytes + kStatsBytes + 1024;

    static_assert(kHalf % 64 == 0 && kHalf <= 256, "whole panels; wgmma n");
    static_assert(kSmemBytes == fa2_bwd_sm90_smem_bytes(kHeadDim, kBlockN, kBlockM, 1),
                  "the planner's shared-memory formula (bwd_sm90_tiles.h)");
};

// kScored: the score variants (softcap, ALiBi) in the recomputed P and in dS (warpgroup
// 0 hands warpgroup 1 pg, P times softcap's derivative, in place of P).
template <typename Tr, bool kScored>
__global__ void __launch_bounds__(Tr::kThreads, 1) dkdv_sm90_split_kernel(const fa2_params_t p)
{
#if defined(FA2_SM90A)
    using Elem = typename Tr::Elem;
    constexpr int kN = Tr::kBlockM / 8;  // n8 tiles of Sᵀ (queries)
    constexpr int kD = Tr::kHalf / 8;    // n8 tiles of this warpgroup's dK / dV
    extern __shared__ __align__(1024) uint8_t smem[];

    const int tid = threadIdx.x;
    const int warp = tid / 32;
    const int lane = tid % 32;
    const int wg = warp / 4;
    const int wtid = tid % 128;

    const KeyBlock b = key_block<Tr::kBlockN, Tr::kBlockM, 1>(p);
    const int key_first = b.key_first, key_last = b.key_last;
    const KeyWindow &win = b.win;

    const uint32_t base = (smem_addr(smem) + 1023u) & ~1023u;
    const uint32_t k_smem = base;
    const uint32_t v_smem = k_smem + Tr::kKVBytes;
    const uint32_t q_smem0 = v_smem + Tr::kKVBytes;
    const uint32_t do_smem0 = q_smem0 + 2 * Tr::kQBytes;
    const uint32_t pt_smem = do_smem0 + 2 * Tr::kQBytes;  // Pᵀ [key][query]
    const uint32_t dst_smem = pt_smem + Tr::kTileBytes;   // dSᵀ [key][query]
    const uint32_t xchg_smem = dst_smem + Tr::kTileBytes; // P, fp32, [float4 i][thread]
    const uint32_t stats_smem = xchg_smem + Tr::kXchgBytes;
    const float *stats = reinterpret_cast<const float *>(smem + (stats_smem - smem_addr(smem)));

    auto load_step = [&](int step, int buf) {
        load_step_sm90<Elem, Tr::kBlockM, Tr::kLoadChunks, Tr::kThreads>(
            p, b, step, q_smem0 + buf * Tr::kQBytes, do_smem0 + buf * Tr::kQBytes,
            stats_smem + buf * 2 * Tr::kBlockM * 4, tid);
    };

    float dv[1][kD][4], dk[1][kD][4];
    zero(dv);
    zero(dk);
    const int col0 = wg * Tr::kHalf;  // this warpgroup's dK/dV/dQ columns

    if (b.steps > 0) {
        load_kv_sm90<Elem, Tr::kBlockN, Tr::kLoadChunks, Tr::kThreads>(p, b, k_smem, v_smem, tid);
        load_step(0, 0);
        cp_async_commit();

        const int key_row = key_first + (warp % 4) * 16 + (lane >> 2);
        for (int step = 0; step < b.steps; ++step) {
            const int buf = step & 1;
            cp_async_wait<0>();
            fence_proxy_async();
            __syncthreads();  // tiles of `step` visible; everyone is done with buf ^ 1, Pᵀ, dSᵀ
            if (step + 1 < b.steps) {
                load_step(step + 1, buf ^ 1);
                cp_async_commit();
            }
            const int row0 = b.tile(step) * Tr::kBlockM;
            const uint32_t q_smem = q_smem0 + buf * Tr::kQBytes;
            const uint32_t do_smem = do_smem0 + buf * Tr::kQBytes;
            const float *lse = stats + buf * 2 * Tr::kBlockM;
            const float *dsum = lse + Tr::kBlockM;

            // Sᵀ (warpgroup 0) or dPᵀ (warpgroup 1): 64 keys × 64 queries over all of d.
            float acc[kN][4];
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < Tr::kHeadDim / 16; ++kk)
                wgmma_ss<Elem, 0, 0>(acc, desc_k_major<Tr::kBlockN>(wg ? v_smem : k_smem, 0, kk),
                                     desc_k_major<Tr::kBlockM>(wg ? do_smem : q_smem, 0, kk),
                                     kk > 0);
            wgmma_commit();
            wgmma_wait<0>();
            reg_fence(acc);

            float4 *xchg = reinterpret_cast<float4 *>(smem + (xchg_smem - smem_addr(smem))) + wtid;
            const int r = (warp % 4) * 16 + (lane >> 2);
            uint32_t frag[Tr::kBlockM / 16][4];
            if (wg == 0) {
                const bool masked = row0 + Tr::kBlockM > b.seq.seqlen_q ||
                                    win.block_needs_mask(row0, row0 + Tr::kBlockM - 1, key_first,
                                                         key_last);
                if constexpr (kScored) {
                    const ScoreVariants v =
                        score_variants(p, b.seq.batch, b.head(step), b.seq.seqlen_q,
                                       b.seq.seqlen_k);
                    float pg[kN][4];
                    exp_scores_keys_as_rows_variants(acc, pg_to(pg), v, b.seq.seqlen_q, win, lse,
                                                     masked, row0, key_row, lane);
#pragma unroll
                    for (int n = 0; n < kN; ++n)
                        xchg[n * 128] = make_float4(pg[n][0], pg[n][1], pg[n][2], pg[n][3]);
                } else {
                    exp_scores_keys_as_rows(acc, p.scale_log2, b.seq.seqlen_q, win, lse, masked,
                                            row0, key_row, lane);
#pragma unroll
                    for (int n = 0; n < kN; ++n)
                        xchg[n * 128] = make_float4(acc[n][0], acc[n][1], acc[n][2], acc[n][3]);
                }
#pragma unroll
                for (int kk = 0; kk < Tr::kBlockM / 16; ++kk) a_fragment<Elem>(frag[kk], acc, kk);
                store_a_fragments<Tr::kBlockN>(pt_smem, frag, r, lane);
                fence_proxy_async();
                named_barrier_arrive(1, 256);  // P and Pᵀ written
                named_barrier_sync(2, 128);    // ...by all of warpgroup 0
            } else {
                named_barrier_sync(1, 256);
            }
            // dV += Pᵀ dO for this warpgroup's columns, while warpgroup 1 computes dSᵀ.
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < Tr::kBlockM / 16; ++kk)
                wgmma_ss<Elem, 0, 1>(dv[0], desc_k_major<Tr::kBlockN>(pt_smem, 0, kk),
                                     desc_mn_major<Tr::kBlockM>(do_smem, kk, col0 / 64), 1);
            wgmma_commit();
            if (wg == 1) {
#pragma unroll
                for (int n = 0; n < kN; ++n) {
                    const float4 x = xchg[n * 128];
                    const float pn[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const int col = n * 8 + 2 * (lane & 3) + (e & 1);
                        acc[n][e] = pn[e] * (acc[n][e] - dsum[col]);  // dSᵀ
                    }
                }
#pragma unroll
                for (int kk = 0; kk < Tr::kBlockM / 16; ++kk) a_fragment<Elem>(frag[kk], acc, kk);
                store_a_fragments<Tr::kBlockN>(dst_smem, frag, r, lane);
                fence_proxy_async();
            }
            __syncthreads();  // dSᵀ written

            // This warpgroup's columns: dK += dSᵀ Q (A: K-major tile).
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < Tr::kBlockM / 16; ++kk)
                wgmma_ss<Elem, 0, 1>(dk[0], desc_k_major<Tr::kBlockN>(dst_smem, 0, kk),
                                     desc_mn_major<Tr::kBlockM>(q_smem, kk, col0 / 64), 1);
            wgmma_commit();
            wgmma_wait<0>();
            reg_fence(dv[0]);
            reg_fence(dk[0]);
        }
    }

    store_dkdv<Elem>(p, b, dk, dv, key_first + (warp % 4) * 16, col0, lane);
#endif
}

}  // namespace fa2
