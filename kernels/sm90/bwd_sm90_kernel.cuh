// The Hopper dK/dV kernel (sm_90a), default mode (dQ by fp32 atomics): one thread
// block = block_n keys of one (batch, kv head), one warpgroup per 64 keys; it loops
// over the query heads of the GQA group and the query tiles (block_m rows) that
// see its keys (block_m = 64 or 64 per warpgroup). Per step, each warpgroup runs on wgmma:
//   Sᵀ = K Qᵀ, dPᵀ = V dOᵀ        (shared × shared, both K-major; keys are rows)
//   Pᵀ = exp(scale·Sᵀ − LSE), dSᵀ = Pᵀ ∘ (dPᵀ − D)   (registers)
//   dV += Pᵀ dO, dK += dSᵀ Q      (registers × shared, dO and Q MN-major)
//   dQ[its rows or columns] += dS K   (dSᵀ through shared memory, MN-major A)
// and stages its dQ part in shared memory (fp32). A third warpgroup, the dQ writer,
// adds each staged tile to the fp32 accumulator (vector reductions) while the two
// math warpgroups go on with the next step: the adds leave the SM at a few bytes per
// clock and stalled the math when the math warpgroups issued them (docs/history/performance-log.md).
// Two mbarriers hand the staging buffer back and forth; setmaxnreg gives the math
// warpgroups 240 registers and the writer 24. Q, dO, LSE and D are double buffered
// with cp.async; tiles use the panel layout of wgmma.cuh.
#pragma once

#include <stdint.h>

#include "common/bwd_block.cuh"
#include "common/bwd_rows.cuh"
#include "common/seqinfo.cuh"
#include "common/warp_gemm.cuh"
#include "sm90/bwd_sm90_tiles.h"
#include "common/exp_scores.cuh"
#include "sm90/wgmma.cuh"

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
    static constexpr int kMathThreads = 128 * kWarpgroups;
    static constexpr int kThreads = kMathThreads + 128;  // + the dQ writer warpgroup
    static constexpr int kMathRegs = 240, kWriterRegs = 24;
    static constexpr int kLoadChunks = kHeadDim / 8;
    // dQ = dS K per warpgroup: its own 64 query rows and every column when block_m has
    // 64 per warpgroup, else all (64) rows and d / warpgroups columns.
    static constexpr bool kDqSplitRows = kBlockM == 64 * kWarpgroups;
    static constexpr int kDqCols = kDqSplitRows ? kHeadDim : kHeadDim / kWarpgroups;
    static constexpr int kKVBytes = kBlockN * kHeadDim * 2;
    static constexpr int kQBytes = kBlockM * kHeadDim * 2;
    static constexpr int kDsBytes = kBlockN * kBlockM * 2;
    static constexpr int kStatsBytes = 4 * kBlockM * 4;
    static constexpr int kStagePitch = kHeadDim * 4 + 16;  // a staged dQ row, padded
    static constexpr int kStageBytes = kBlockM * kStagePitch;
    static constexpr int kBarrierBytes = 16;  // mbarriers staged, freed
    static constexpr int kSmemBytes =
        2 * kKVBytes + 4 * kQBytes + kDsBytes + kStatsBytes + kStageBytes + kBarrierBytes + 1024;
    static constexpr int kMathBarrier = 1;  // named barrier of the math warpgroups

    static_assert(kHeadDim % 64 == 0, "whole 128-byte panels");
    static_assert(kBlockM == 64 || kDqSplitRows, "dQ = dS K is one m64 wgmma tile per warpgroup");
    static_assert(kBlockM <= 256 && kBlockM % 64 == 0, "wgmma n; dSᵀ in whole panels");
    static_assert(kDqCols % 16 == 0, "wgmma n");
    static_assert(kMathRegs * kMathThreads + kWriterRegs * 128 <= 65536, "register file");
    static_assert(kSmemBytes == fa2_bwd_sm90_smem_bytes(kHeadDim, kBlockN, kBlockM, 0),
                  "the planner's shared-memory formula (bwd_sm90_tiles.h)");
};

// The dQ writer warpgroup's loop (wtid: 0..127): per step, waits until the math
// warpgroups have staged the step's dQ tile (kBlockM rows × d, fp32; mbarrier `staged`,
// one phase per step), adds it to the accumulator of (batch, head) with 16-byte
// reductions, and frees the buffer (mbarrier `freed`).
template <typename Tr>
__device__ __forceinline__ void write_dq_steps(const fa2_params_t &p, const KeyBlock &b,
                                               uint32_t stage_smem, uint32_t staged,
                                               uint32_t freed, int wtid)
{
    constexpr int kVecs = Tr::kHeadDim / 4;  // float4 per staged row
    for (int step = 0; step < b.steps; ++step) {
        mbarrier_wait(staged, step & 1);
        const int row0 = b.tile(step) * Tr::kBlockM;
        const int rows = min(Tr::kBlockM, b.seq.seqlen_q - row0);
        float *acc = p.dq_accum + (stats_row(p, b.seq, b.head(step)) + row0) * p.head_dim;
#pragma unroll 4
        for (int i = wtid; i < Tr::kBlockM * kVecs; i += 128) {
            const int r = i / kVecs, c = (i % kVecs) * 4;
            if (r < rows && c < p.head_dim)
                red_add_v4(acc + static_cast<int64_t>(r) * p.head_dim + c,
                           ld_shared_v4(stage_smem + r * Tr::kStagePitch + c * 4));
        }
        mbarrier_arrive(freed);
    }
}

// Loads step `step` of a Hopper dK/dV kernel (cp.async, not committed): the Q and dO
// tiles (kBlockM rows, panel layout) and the LSE and D values of those rows.
template <typename Elem, int kBlockM, int kLoadChunks, int kThreads>
__device__ __forceinline__ void load_step_sm90(const fa2_params_t &p, const KeyBlock &b,
                                               int step, uint32_t q_dst, uint32_t do_dst,
                                               uint32_t stats_dst, int tid)
{
    const int head = b.head(step);
    const int row0 = b.tile(step) * kBlockM;
    const int rows = b.seq.seqlen_q - row0;
    load_panels<Elem, kBlockM, kLoadChunks, kThreads>(
        q_dst, q_row<Elem>(p, b.seq, head, row0), p.q_seq_stride, rows, p.head_dim, tid);
    load_panels<Elem, kBlockM, kLoadChunks, kThreads>(
        do_dst, do_row<Elem>(p, b.seq, head, row0), p.o_seq_stride, rows, p.head_dim, tid);
    const int64_t stat0 = stats_row(p, b.seq, head) + row0;
    for (int c = tid; c < 2 * kBlockM; c += kThreads) {  // stats[{0: LSE, kBlockM: D} + row]
        const int col = c % kBlockM;
        const float *src = c < kBlockM ? p.lse + stat0 + col : p.d_sum + stat0 + col;
        cp_async_4(stats_dst + c * 4, col < rows ? src : p.lse, col < rows);
    }
}

// Loads the block's K and V tiles (panel layout, kBlockN rows from key_first).
template <typename Elem, int kBlockN, int kLoadChunks, int kThreads>
__device__ __forceinline__ void load_kv_sm90(const fa2_params_t &p, const KeyBlock &b,
                                             uint32_t k_dst, uint32_t v_dst, int tid)
{
    const int keys = b.seq.seqlen_k - b.key_first;
    load_panels<Elem, kBlockN, kLoadChunks, kThreads>(
        k_dst, k_row<Elem>(p, b.seq, b.kv_head, b.key_first), p.k_seq_stride, keys, p.head_dim,
        tid);
    load_panels<Elem, kBlockN, kLoadChunks, kThreads>(
        v_dst, v_row<Elem>(p, b.seq, b.kv_head, b.key_first), p.v_seq_stride, keys, p.head_dim,
        tid);
}

// A warp's m16k16 A fragments (its rows r and r + 8, one per k16 step) to a panel tile
// of kRows rows as [key][query]: the A operand of a wgmma that reads it MN-major.
template <int kRows, int kSteps>
__device__ __forceinline__ void store_a_fragments(uint32_t tile,
                                                  const uint32_t (&frag)[kSteps][4], int r,
                                                  int lane)
{
#pragma unroll
    for (int kk = 0; kk < kSteps; ++kk)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int row = r + 8 * (i & 1);
            const int col = kk * 16 + 8 * (i >> 1) + 2 * (lane & 3);
            const uint32_t addr = tile + panel_offset<kRows>(row, col / 8) + (col % 8) * 2;
            asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(frag[kk][i]));
        }
}

// A step's dQ part = dS K (dq: this warpgroup's rows or columns of it): dSᵀ (dsa, as
// wgmma A fragments) to shared memory, [key][query] in the panel layout (the same
// rounding as the registers), then the product, A = dSᵀ and B = K both read MN-major.
template <typename Tr>
__device__ __forceinline__ void step_dq(float (&dq)[1][Tr::kDqCols / 8][4],
                                        const uint32_t (&dsa)[Tr::kBlockM / 16][4],
                                        uint32_t ds_smem, uint32_t k_smem, int dq_row0,
                                        int dq_col0, int warp, int lane)
{
#if defined(FA2_SM90A)
    using Elem = typename Tr::Elem;
    store_a_fragments<Tr::kBlockN>(ds_smem, dsa, warp * 16 + (lane >> 2), lane);
    fence_proxy_async();
    named_barrier_sync(Tr::kMathBarrier, Tr::kMathThreads);  // dSᵀ of every warpgroup written

    // dQ[:, dq_col0 ..] = dS K: A = dSᵀ read MN-major, B = K read MN-major.
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < Tr::kBlockN / 16; ++kk)
        wgmma_ss<Elem, 1, 1>(dq[0], desc_mn_major<Tr::kBlockN>(ds_smem, kk, dq_row0 / 64),
                             wgmma_desc(k_smem + (dq_col0 / 64) * Tr::kBlockN * 128 +
                                            (dq_col0 % 64) * 2 + kk * 16 * 128,
                                        Tr::kBlockN * 128, 1024),
                             kk > 0);
    wgmma_commit();
    wgmma_wait<0>();
    reg_fence(dq[0]);
#endif
}

// The step's dQ part to the staging buffer (fp32), for the writer warpgroup.
template <typename Tr>
__device__ __forceinline__ void stage_dq(const float (&dq)[1][Tr::kDqCols / 8][4],
                                         uint32_t stage_smem, int dq_row0, int dq_col0,
                                         int warp, int lane)
{
    const int r = dq_row0 + (warp % 4) * 16 + (lane >> 2);
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int n = 0; n < Tr::kDqCols / 8; ++n)
            st_shared_v2(stage_smem + (r + 8 * h) * Tr::kStagePitch +
                             (dq_col0 + n * 8 + 2 * (lane & 3)) * 4,
                         dq[0][n][2 * h], dq[0][n][2 * h + 1]);
}

// kAtomicDq: also dQ += dS K, staged for the writer warpgroup; else only dK and dV
// (dq_sm90_kernel computes dQ; the writer has nothing to do). kScored: the score
// variants (softcap, ALiBi) in the recomputed P and in dS.
template <typename Tr, bool kAtomicDq, bool kScored>
__global__ void __launch_bounds__(Tr::kThreads, 1) dkdv_sm90_kernel(const fa2_params_t p)
{
#if defined(FA2_SM90A)
    using Elem = typename Tr::Elem;
    constexpr int kN = Tr::kBlockM / 8;   // n8 tiles of Sᵀ (queries)
    constexpr int kD = Tr::kHeadDim / 8;  // n8 tiles of dK / dV
    extern __shared__ __align__(1024) uint8_t smem[];

    const int tid = threadIdx.x;
    const int warp = tid / 32;
    const int lane = tid % 32;
    const int wg = warp / 4;

    const KeyBlock b = key_block<Tr::kBlockN, Tr::kBlockM, 1>(p);
    const int key_first = b.key_first;
    const KeyWindow &win = b.win;

    const uint32_t base = (smem_addr(smem) + 1023u) & ~1023u;
    const uint32_t k_smem = base;
    const uint32_t v_smem = k_smem + Tr::kKVBytes;
    const uint32_t q_smem0 = v_smem + Tr::kKVBytes;         // two buffers
    const uint32_t do_smem0 = q_smem0 + 2 * Tr::kQBytes;    // two buffers
    const uint32_t ds_smem = do_smem0 + 2 * Tr::kQBytes;    // dSᵀ [key][query]
    const uint32_t stats_smem = ds_smem + Tr::kDsBytes;
    const uint32_t stage_smem = stats_smem + Tr::kStatsBytes;  // dQ of a step, fp32
    const uint32_t staged = stage_smem + Tr::kStageBytes;       // mbarriers (8 bytes each)
    const uint32_t freed = staged + 8;
    // stats[buf * 2 * kBlockM + {0: lse, kBlockM: D} + column]
    const float *stats = reinterpret_cast<const float *>(smem + (stats_smem - smem_addr(smem)));

    if (tid == 0) {
        mbarrier_init(staged, Tr::kMathThreads);
        mbarrier_init(freed, 128);
    }
    __syncthreads();  // the mbarriers are initialized

    if (wg == Tr::kWarpgroups) {
        set_max_regs_dec<Tr::kWriterRegs>();
        if (kAtomicDq) write_dq_steps<Tr>(p, b, stage_smem, staged, freed, tid - Tr::kMathThreads);
        return;
    }
    set_max_regs_inc<Tr::kMathRegs>();

    auto load_step = [&](int step, int buf) {
        load_step_sm90<Elem, Tr::kBlockM, Tr::kLoadChunks, Tr::kMathThreads>(
            p, b, step, q_smem0 + buf * Tr::kQBytes, do_smem0 + buf * Tr::kQBytes,
            stats_smem + buf * 2 * Tr::kBlockM * 4, tid);
    };

    float dv[1][kD][4], dk[1][kD][4];  // [1]: one m64 tile per warpgroup (store_acc's view)
    zero(dv);
    zero(dk);
    const int key0 = wg * 64;  // this warpgroup's first key row in the block
    const int dq_col0 = Tr::kDqSplitRows ? 0 : wg * Tr::kDqCols;
    const int dq_row0 = Tr::kDqSplitRows ? wg * 64 : 0;  // in the query tile

    if (b.steps > 0) {
        load_kv_sm90<Elem, Tr::kBlockN, Tr::kLoadChunks, Tr::kMathThreads>(p, b, k_smem, v_smem, tid);
        load_step(0, 0);
        cp_async_commit();

        for (int step = 0; step < b.steps; ++step) {
            const int buf = step & 1;
            cp_async_wait<0>();
            fence_proxy_async();
            // tiles of `step` visible; every math thread is done with buf ^ 1 and dSᵀ
            named_barrier_sync(Tr::kMathBarrier, Tr::kMathThreads);
            if (step + 1 < b.steps) {
                load_step(step + 1, buf ^ 1);
                cp_async_commit();
            }
            const int row0 = b.tile(step) * Tr::kBlockM;
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
            const bool masked = row0 + Tr::kBlockM > b.seq.seqlen_q ||
                                win.block_needs_mask(row0, row0 + Tr::kBlockM - 1, key_first,
                                                     key_first + Tr::kBlockN - 1);
            uint32_t pa[Tr::kBlockM / 16][4], dsa[Tr::kBlockM / 16][4];
            if constexpr (kScored) {
                const ScoreVariants v =
                    score_variants(p, b.seq.batch, b.head(step), b.seq.seqlen_q,
                                   b.seq.seqlen_k);
                const int key_row = key_first + warp * 16 + (lane >> 2);
                if (v.tanh_scale != 0.f) {
                    // softcap: P and pg = P (1 - tanh^2) while dPᵀ runs; pg as fp16 pairs
                    // and P to its A operand at once, so that no third fp32 tile stays
                    // next to dPᵀ and the dK/dV accumulators
                    uint32_t pg_h[kN][2];
                    if (v.alibi != 0.f)
                        exp_scores_keys_as_rows_scored<true, true>(st, pg_to_halves(pg_h), v,
                                                                   b.seq.seqlen_q, win, lse,
                                                                   masked, row0, key_row, lane);
                    else
                        exp_scores_keys_as_rows_scored<true, false>(st, pg_to_halves(pg_h), v,
                                                                    b.seq.seqlen_q, win, lse,
                                                                    masked, row0, key_row, lane);
#pragma unroll
                    for (int kk = 0; kk < Tr::kBlockM / 16; ++kk) a_fragment<Elem>(pa[kk], st, kk);
                    wgmma_wait<0>();
                    reg_fence(dpt);
#pragma unroll
                    for (int n = 0; n < kN; ++n)
#pragma unroll
                        for (int e = 0; e < 4; ++e) {
                            const int col = n * 8 + 2 * (lane & 3) + (e & 1);
                            const float2 g = unpack2<__half>(pg_h[n][e >> 1]);
                            dpt[n][e] = ((e & 1) ? g.y : g.x) * (dpt[n][e] - dsum[col]);  // dSᵀ
                        }
                } else {
                    // pg is P: made while dPᵀ runs, as the plain kernel does
                    float pg[kN][4];
                    exp_scores_keys_as_rows_scored<false, true>(st, pg_to(pg), v,
                                                                b.seq.seqlen_q, win, lse, masked,
                                                                row0, key_row, lane);
                    wgmma_wait<0>();
                    reg_fence(dpt);
                    ds_keys_as_rows(dpt, pg, dsum, lane);  // dSᵀ
#pragma unroll
                    for (int kk = 0; kk < Tr::kBlockM / 16; ++kk) a_fragment<Elem>(pa[kk], st, kk);
                }
#pragma unroll
                for (int kk = 0; kk < Tr::kBlockM / 16; ++kk) a_fragment<Elem>(dsa[kk], dpt, kk);
            } else {
                exp_scores_keys_as_rows(st, p.scale_log2, b.seq.seqlen_q, win, lse, masked, row0,
                                        key_first + warp * 16 + (lane >> 2), lane);
                wgmma_wait<0>();
                reg_fence(dpt);
                ds_keys_as_rows(dpt, st, dsum, lane);  // dSᵀ

#pragma unroll
                for (int kk = 0; kk < Tr::kBlockM / 16; ++kk) {
                    a_fragment<Elem>(pa[kk], st, kk);
                    a_fragment<Elem>(dsa[kk], dpt, kk);
                }
            }
            float dq[1][Tr::kDqCols / 8][4];
            if constexpr (kAtomicDq)
                step_dq<Tr>(dq, dsa, ds_smem, k_smem, dq_row0, dq_col0, warp, lane);

            // dV += Pᵀ dO, dK += dSᵀ Q; dQ staged for the writer meanwhile.
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < Tr::kBlockM / 16; ++kk)
                wgmma_rs<Elem, 1>(dv[0], pa[kk], desc_mn_major<Tr::kBlockM>(do_smem, kk), 1);
#pragma unroll
            for (int kk = 0; kk < Tr::kBlockM / 16; ++kk)
                wgmma_rs<Elem, 1>(dk[0], dsa[kk], desc_mn_major<Tr::kBlockM>(q_smem, kk), 1);
            wgmma_commit();

            if constexpr (kAtomicDq) {
                if (step > 0) mbarrier_wait(freed, (step - 1) & 1);  // the writer is done with it
                stage_dq<Tr>(dq, stage_smem, dq_row0, dq_col0, warp, lane);
                mbarrier_arrive(staged);
            }
            wgmma_wait<0>();  // before the next step refills this step's Q and dO buffers
            reg_fence(dv[0]);
            reg_fence(dk[0]);
        }
    }

    store_dkdv<Elem>(p, b, dk, dv, key_first + warp * 16, 0, lane);
#endif
}

}  // namespace fa2
