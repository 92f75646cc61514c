// The mma.sync backward (FlashAttention-2 Algorithm 2), after the row kernels'
// D = rowsum(dO ∘ O) (common/bwd_rows.cuh):
//   dkdv:      one block per (batch, kv head, key tile, column slice); loops over the
//              query heads of the GQA group and the query tiles that see the keys,
//              recomputes Sᵀ = K Qᵀ and Pᵀ = exp(scale·Sᵀ − LSE), dPᵀ = V dOᵀ,
//              dSᵀ = Pᵀ ∘ (dPᵀ − D), and accumulates dV += Pᵀ dO, dK += dSᵀ Q in
//              registers (keys as rows, so Pᵀ and dSᵀ are the A operand as computed);
//              in default mode it also adds dS K to the fp32 dQ accumulator with
//              atomics (then converted by dq_convert);
//   dq:        deterministic mode: one block per (batch, head, query tile); recomputes
//              S, P, dP, dS over the visible key tiles and accumulates dQ += dS K in
//              registers, with no atomics (7 GEMMs against 5, bit-identical runs).
#pragma once

#include <stdint.h>

#include "common/bwd_block.cuh"
#include "common/params.h"
#include "common/bwd_rows.cuh"
#include "sm80/bwd_tiles.h"
#include "sm80/bwd_traits.cuh"
#include "common/exp_scores.cuh"
#include "common/mask.cuh"
#include "common/ptx.cuh"
#include "common/seqinfo.cuh"
#include "common/warp_gemm.cuh"

namespace fa2 {

// kAtomicDq: also adds dS K into p.dq_accum with fp32 atomics (the dq kernel is then
// not needed); else the dQ kernel computes dQ without atomics. kScored: the score
// variants (softcap, ALiBi) in the recomputed P and in dS.
template <typename Tr, bool kAtomicDq, bool kScored>
__global__ void __launch_bounds__(Tr::kThreads, 1) dkdv_kernel(const fa2_params_t p)
{
    using Elem = typename Tr::Elem;
    constexpr int kM = Tr::kMTiles;
    constexpr int kN = Tr::kBlockM / 8;      // n8 tiles of Sᵀ (queries)
    constexpr int kD = Tr::kSliceDim / 8;    // n8 tiles of the dK/dV slice
    extern __shared__ __align__(128) uint8_t smem[];

    const int tid = threadIdx.x;
    const int warp = tid / 32;
    const int lane = tid % 32;

    const KeyBlock b = key_block<Tr::kBlockN, Tr::kBlockM, Tr::kSlices>(p);
    const Sequence &seq = b.seq;
    const int kv_head = b.kv_head, slice = b.slice;
    const int key_first = b.key_first;
    const KeyWindow &win = b.win;

    const uint32_t k_smem = smem_addr(smem);
    const uint32_t v_smem = k_smem + Tr::kKVBytes;
    const uint32_t q_smem[2] = {v_smem + Tr::kKVBytes, v_smem + Tr::kKVBytes + Tr::kQBytes};
    const uint32_t do_smem[2] = {q_smem[1] + Tr::kQBytes, q_smem[1] + 2 * Tr::kQBytes};
    float *stats = reinterpret_cast<float *>(smem + 2 * Tr::kKVBytes + 4 * Tr::kQBytes);
    // stats[buf * 2 * kBlockM + {0: lse, kBlockM: D} + column]
    constexpr int ds_offset = Tr::kDkdvSmemBytes;  // atomic mode: dS [query][key]

    // Loads the Q, dO, LSE and D tiles of step `step` into buffer `buf`.
    auto load_step = [&](int step, int buf) {
        const int head = b.head(step);
        const int row0 = b.tile(step) * Tr::kBlockM;
        const int rows = seq.seqlen_q - row0;
        load_tile<Elem, Tr::kBlockM, Tr::kLoadChunks, Tr::kRowBytes, Tr::kThreads>(
            q_smem[buf], q_row<Elem>(p, seq, head, row0), p.q_seq_stride, rows, p.head_dim, tid);
        load_tile<Elem, Tr::kBlockM, Tr::kLoadChunks, Tr::kRowBytes, Tr::kThreads>(
            do_smem[buf], do_row<Elem>(p, seq, head, row0), p.o_seq_stride, rows, p.head_dim, tid);
        const int64_t stat0 = stats_row(p, seq, head) + row0;
        for (int c = tid; c < 2 * Tr::kBlockM; c += Tr::kThreads) {
            const int col = c % Tr::kBlockM;
            const float *src = c < Tr::kBlockM ? p.lse + stat0 + col : p.d_sum + stat0 + col;
            cp_async_4(smem_addr(stats + buf * 2 * Tr::kBlockM + c), col < rows ? src : p.lse,
                       col < rows);
        }
    };

    float dv[kM][kD][4], dk[kM][kD][4];
    zero(dv);
    zero(dk);

    if (b.steps > 0) {
        const Elem *k = k_row<Elem>(p, seq, kv_head, key_first);
        const Elem *v = v_row<Elem>(p, seq, kv_head, key_first);
        const int keys = seq.seqlen_k - key_first;
        load_tile<Elem, Tr::kBlockN, Tr::kLoadChunks, Tr::kRowBytes, Tr::kThreads>(
            k_smem, k, p.k_seq_stride, keys, p.head_dim, tid);
        load_tile<Elem, Tr::kBlockN, Tr::kLoadChunks, Tr::kRowBytes, Tr::kThreads>(
            v_smem, v, p.v_seq_stride, keys, p.head_dim, tid);
        load_step(0, 0);
        cp_async_commit();

        const uint32_t warp_rows = warp * kM * 16 * Tr::kRowBytes;
        const uint32_t slice_bytes = slice * Tr::kSliceDim * 2;
        for (int step = 0; step < b.steps; ++step) {
            const int buf = step & 1;
            cp_async_wait<0>();
            __syncthreads();  // tiles of `step` visible; everyone is done with buf ^ 1
            if (step + 1 < b.steps) {
                load_step(step + 1, buf ^ 1);
                cp_async_commit();
            }
            const int row0 = b.tile(step) * Tr::kBlockM;
            const float *lse = stats + buf * 2 * Tr::kBlockM;
            const float *dsum = lse + Tr::kBlockM;

            float pt[kM][kN][4], ds[kM][kN][4];
            if constexpr (kScored) {
                // dPᵀ first, so that each element's pg meets it as it is made.
                zero(ds);
                gemm_abt<Elem, Tr::kRowBytes, kM, kN, Tr::kHeadDim / 16>(ds, v_smem + warp_rows,
                                                                        do_smem[buf], lane);
                zero(pt);
                gemm_abt<Elem, Tr::kRowBytes, kM, kN, Tr::kHeadDim / 16>(pt, k_smem + warp_rows,
                                                                        q_smem[buf], lane);
                const bool masked = row0 + Tr::kBlockM > seq.seqlen_q ||
                                    win.block_needs_mask(row0, row0 + Tr::kBlockM - 1, key_first,
                                                         key_first + Tr::kBlockN - 1);
                const ScoreVariants v =
                    score_variants(p, seq.batch, b.head(step), seq.seqlen_q, seq.seqlen_k);
#pragma unroll
                for (int m = 0; m < kM; ++m) {
                    float pg[kN][4];
                    const int key_row = key_first + warp * kM * 16 + m * 16 + (lane >> 2);
                    exp_scores_keys_as_rows_variants(pt[m], pg_to(pg), v, seq.seqlen_q, win, lse,
                                                     masked, row0, key_row, lane);
                    ds_keys_as_rows(ds[m], pg, dsum, lane);
                }
            } else {
                // Pᵀ = exp(scale·Sᵀ − LSE): rows are keys, columns queries.
                zero(pt);
                gemm_abt<Elem, Tr::kRowBytes, kM, kN, Tr::kHeadDim / 16>(pt, k_smem + warp_rows,
                                                                        q_smem[buf], lane);
                const bool masked = row0 + Tr::kBlockM > seq.seqlen_q ||
                                    win.block_needs_mask(row0, row0 + Tr::kBlockM - 1, key_first,
                                                         key_first + Tr::kBlockN - 1);
#pragma unroll
                for (int m = 0; m < kM; ++m) {
                    const int key_row = key_first + warp * kM * 16 + m * 16 + (lane >> 2);
                    exp_scores_keys_as_rows(pt[m], p.scale_log2, seq.seqlen_q, win, lse, masked,
                                            row0, key_row, lane);
                }

                // dSᵀ = Pᵀ ∘ (dPᵀ − D), dPᵀ = V dOᵀ.
                zero(ds);
                gemm_abt<Elem, Tr::kRowBytes, kM, kN, Tr::kHeadDim / 16>(ds, v_smem + warp_rows,
                                                                        do_smem[buf], lane);
#pragma unroll
                for (int m = 0; m < kM; ++m)
                    ds_keys_as_rows(ds[m], pt[m], dsum, lane);
            }

            if constexpr (kAtomicDq) {
                // dS to shared memory as [query][key], rounded as the GEMMs see it.
#pragma unroll
                for (int m = 0; m < kM; ++m)
#pragma unroll
                    for (int n = 0; n < kN; ++n)
#pragma unroll
                        for (int e = 0; e < 4; ++e) {
                            const int key = warp * kM * 16 + m * 16 + (lane >> 2) + 8 * (e >> 1);
                            const int query = n * 8 + 2 * (lane & 3) + (e & 1);
                            *reinterpret_cast<Elem *>(smem + ds_offset +
                                                      swizzled<Tr::kDsRowBytes>(query, key / 8) +
                                                      (key % 8) * 2) = to_elem<Elem>(ds[m][n][e]);
                        }
            }
            gemm_pb<Elem, Tr::kRowBytes, kM, kD, Tr::kBlockM / 16>(dv, pt, do_smem[buf] + slice_bytes,
                                                                   lane);
            gemm_pb<Elem, Tr::kRowBytes, kM, kD, Tr::kBlockM / 16>(dk, ds, q_smem[buf] + slice_bytes,
                                                                   lane);
            if constexpr (kAtomicDq) {
                __syncthreads();  // dS complete
                constexpr int kWM = Tr::kAtomicMTiles, kWN = Tr::kAtomicNTiles;
                const int warp_m = warp % Tr::kAtomicWarpsM, warp_n = warp / Tr::kAtomicWarpsM;
                float dq[kWM][kWN][4];
                zero(dq);
                gemm_ab<Elem, Tr::kDsRowBytes, Tr::kRowBytes, kWM, kWN, Tr::kBlockN / 16>(
                    dq, smem_addr(smem + ds_offset) + warp_m * kWM * 16 * Tr::kDsRowBytes,
                    k_smem, (slice * Tr::kSliceDim) / 8 + warp_n * kWN, lane);
                add_dq(p, seq, b.head(step), row0 + warp_m * kWM * 16,
                       slice * Tr::kSliceDim + warp_n * kWN * 8, dq, lane);
            }
        }
    }

    store_dkdv<Elem>(p, b, dk, dv, key_first + warp * kM * 16, slice * Tr::kSliceDim, lane);
}

template <typename Tr, bool kScored>
__global__ void __launch_bounds__(Tr::kDqThreads, 1) dq_kernel(const fa2_params_t p)
{
    using Elem = typename Tr::Elem;
    constexpr int kM = Tr::kDqMTiles;
    constexpr int kN = Tr::kDqBlockN / 8;
    constexpr int kD = Tr::kHeadDim / 8;
    extern __shared__ __align__(128) uint8_t smem[];

    const int tid = threadIdx.x;
    const int warp = tid / 32;
    const int lane = tid % 32;

    const auto [seq, head, kv_head, row_first, row_last, n_first, n_end, win] =
        query_tile<Tr::kDqBlockM, Tr::kDqBlockN, false, kAnySeq>(p);

    const uint32_t q_smem = smem_addr(smem);
    const uint32_t do_smem = q_smem + Tr::kDqQBytes;
    const uint32_t k_smem[2] = {do_smem + Tr::kDqQBytes, do_smem + Tr::kDqQBytes + Tr::kDqKVBytes};
    const uint32_t v_smem[2] = {k_smem[1] + Tr::kDqKVBytes, k_smem[1] + 2 * Tr::kDqKVBytes};

    auto load_kv = [&, seq = seq, kv_head = kv_head](int n_block, int buf) {
        const int key0 = n_block * Tr::kDqBlockN;
        load_tile<Elem, Tr::kDqBlockN, Tr::kLoadChunks, Tr::kRowBytes, Tr::kDqThreads>(
            k_smem[buf], k_row<Elem>(p, seq, kv_head, key0), p.k_seq_stride, seq.seqlen_k - key0,
            p.head_dim, tid);
        load_tile<Elem, Tr::kDqBlockN, Tr::kLoadChunks, Tr::kRowBytes, Tr::kDqThreads>(
            v_smem[buf], v_row<Elem>(p, seq, kv_head, key0), p.v_seq_stride, seq.seqlen_k - key0,
            p.head_dim, tid);
    };

    // This thread's rows: LSE (as an exp2 offset) and D.
    const int warp_row0 = row_first + warp * kM * 16;
    const int64_t stat0 = stats_row(p, seq, head);
    float lse_log2[kM][2], dsum[kM][2];
#pragma unroll
    for (int m = 0; m < kM; ++m)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = warp_row0 + m * 16 + (lane >> 2) + 8 * h;
            const bool valid = row < seq.seqlen_q;
            lse_log2[m][h] = valid ? p.lse[stat0 + row] * kLog2e : 0.f;
            dsum[m][h] = valid ? p.d_sum[stat0 + row] : 0.f;
        }

    [[maybe_unused]] ScoreVariants variants{};
    if constexpr (kScored) variants = score_variants(p, seq.batch, head, seq.seqlen_q, seq.seqlen_k);

    float dq[kM][kD][4];
    zero(dq);
    if (n_end > n_first) {
        const Elem *q = q_row<Elem>(p, seq, head, row_first);
        const Elem *d_o = do_row<Elem>(p, seq, head, row_first);
        load_tile<Elem, Tr::kDqBlockM, Tr::kLoadChunks, Tr::kRowBytes, Tr::kDqThreads>(
            q_smem, q, p.q_seq_stride, seq.seqlen_q - row_first, p.head_dim, tid);
        load_tile<Elem, Tr::kDqBlockM, Tr::kLoadChunks, Tr::kRowBytes, Tr::kDqThreads>(
            do_smem, d_o, p.o_seq_stride, seq.seqlen_q - row_first, p.head_dim, tid);
        load_kv(n_first, 0);
        cp_async_commit();

        const uint32_t warp_rows = warp * kM * 16 * Tr::kRowBytes;
        for (int n_block = n_first; n_block < n_end; ++n_block) {
            const int buf = (n_block - n_first) & 1;
            cp_async_wait<0>();
            __syncthreads();
            if (n_block + 1 < n_end) {
                load_kv(n_block + 1, buf ^ 1);
                cp_async_commit();
            }
            const int key0 = n_block * Tr::kDqBlockN;

            float pr[kM][kN][4], ds[kM][kN][4];
            zero(pr);
            gemm_abt<Elem, Tr::kRowBytes, kM, kN, Tr::kHeadDim / 16>(pr, q_smem + warp_rows,
                                                                    k_smem[buf], lane);
            const bool masked = win.block_needs_mask(row_first, row_last, key0, key0 + Tr::kDqBlockN - 1);
#pragma unroll
            for (int m = 0; m < kM; ++m) {
                if constexpr (kScored) {
                    // dQ needs no P: pg (P times softcap's derivative) takes its place
                    exp_scores_queries_as_rows_variants(pr[m], pg_to(pr[m]), variants, win,
                                                        lse_log2[m], masked,
                                                        warp_row0 + m * 16 + (lane >> 2), key0,
                                                        lane);
                } else {
                    exp_scores_queries_as_rows(pr[m], p.scale_log2, win, lse_log2[m], masked,
                                               warp_row0 + m * 16 + (lane >> 2), key0, lane);
                }
            }

            zero(ds);
            gemm_abt<Elem, Tr::kRowBytes, kM, kN, Tr::kHeadDim / 16>(ds, do_smem + warp_rows,
                                                                    v_smem[buf], lane);
#pragma unroll
            for (int m = 0; m < kM; ++m)
#pragma unroll
                for (int n = 0; n < kN; ++n)
#pragma unroll
                    for (int e = 0; e < 4; ++e)
                        ds[m][n][e] = pr[m][n][e] * (ds[m][n][e] - dsum[m][e >> 1]);

            gemm_pb<Elem, Tr::kRowBytes, kM, kD, Tr::kDqBlockN / 16>(dq, ds, k_smem[buf], lane);
        }
    }

    float scale[kM][2];
    fill_scale(scale, p.softmax_scale);
    store_acc<Elem>(dq, scale, dq_row<Elem>(p, seq, head, 0), p.q_seq_stride, warp_row0,
                    seq.seqlen_q, 0, p.head_dim, lane);
}

}  // namespace fa2
