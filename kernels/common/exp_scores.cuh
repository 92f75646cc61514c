// The backward kernels' recomputed probabilities: acc = exp2(scale_log2 · acc + c) with
// c = −LSE·log2(e) of the element's query row, zero where the key is not visible. The
// per-element mask runs only in blocks that need one, and that test stays outside the
// element loop: written inside it, the compiler branched at every element and the
// exponentials no longer overlapped.
#pragma once

#include "common/mask.cuh"
#include "common/params.h"
#include "common/ptx.cuh"
#include "common/score_variants.cuh"

namespace fa2 {

// neg_lse_log2(n, e): c of element (n, e); visible(n, e): whether its key is visible.
template <int kN, typename NegLseLog2, typename Visible>
__device__ __forceinline__ void exp_scores(float (&acc)[kN][4], float scale_log2, bool masked,
                                           NegLseLog2 neg_lse_log2, Visible visible)
{
    if (masked) {
#pragma unroll
        for (int n = 0; n < kN; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const float x = exp2_approx(fmaf(acc[n][e], scale_log2, neg_lse_log2(n, e)));
                acc[n][e] = visible(n, e) ? x : 0.f;
            }
    } else {
#pragma unroll
        for (int n = 0; n < kN; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                acc[n][e] = exp2_approx(fmaf(acc[n][e], scale_log2, neg_lse_log2(n, e)));
    }
}

// The visible columns of a fragment row as an interval of offsets from the lane's first
// column: column offset 8n + e % 2 is visible when lo <= it <= hi. Taken once per row, an
// element then costs two compares with immediates (the forward's apply_mask does the same).
struct ColumnInterval {
    int lo, hi;
    __device__ __forceinline__ bool has(int n, int e) const
    {
        const int col = n * 8 + (e & 1);
        return (col >= lo) & (col <= hi);
    }
};

// Keys as rows: the queries that see key `key` (rows past seqlen_q and keys past
// seqlen_k see none), from query column col0.
__device__ __forceinline__ ColumnInterval query_columns(const KeyWindow &win, int seqlen_q,
                                                        int key, int col0)
{
    int lo, hi;
    query_range(win, seqlen_q, key, key, lo, hi);
    if (key >= win.seqlen_k) hi = lo - 1;
    return {lo - col0, hi - col0};
}

// Queries as rows: the keys query `row` sees, from key column col0.
__device__ __forceinline__ ColumnInterval key_columns(const KeyWindow &win, int row, int col0)
{
    int lo, hi;
    win.key_range(row, row, lo, hi);
    return {lo - col0, hi - 1 - col0};
}

// Pᵀ for the dK/dV kernels' fragments, keys as rows: element (n, e) has key
// key_row + 8 (e / 2) and query row0 + 8n + 2 (lane % 4) + e % 2, whose LSE is
// lse[that query − row0] (shared memory). Queries past the sequence's seqlen_q count
// as not visible.
template <int kN>
__device__ __forceinline__ void exp_scores_keys_as_rows(float (&acc)[kN][4], float scale_log2,
                                                        int seqlen_q, const KeyWindow &win,
                                                        const float *lse, bool masked, int row0,
                                                        int key_row, int lane)
{
    const int col0 = row0 + 2 * (lane & 3);
    const ColumnInterval cols[2] = {query_columns(win, seqlen_q, key_row, col0),
                                    query_columns(win, seqlen_q, key_row + 8, col0)};
    exp_scores(
        acc, scale_log2, masked,
        [&](int n, int e) { return -lse[n * 8 + 2 * (lane & 3) + (e & 1)] * kLog2e; },
        [&](int n, int e) { return cols[e >> 1].has(n, e); });
}

// P for the dQ kernels' fragments, queries as rows: element (n, e) has query
// row + 8 (e / 2), whose −LSE·log2(e) is -lse_log2[e / 2], and key
// key0 + 8n + 2 (lane % 4) + e % 2.
template <int kN>
__device__ __forceinline__ void exp_scores_queries_as_rows(float (&acc)[kN][4],
                                                           float scale_log2, KeyWindow win,
                                                           const float (&lse_log2)[2], bool masked,
                                                           int row, int key0, int lane)
{
    const int col0 = key0 + 2 * (lane & 3);
    const ColumnInterval cols[2] = {key_columns(win, row, col0), key_columns(win, row + 8, col0)};
    exp_scores(
        acc, scale_log2, masked, [&](int, int e) { return -lse_log2[e >> 1]; },
        [&](int n, int e) { return cols[e >> 1].has(n, e); });
}

// With the score variants (common/score_variants.cuh): P as above, from the score
// transformed as the forward did it (softcap's tanh, ALiBi's distance, in score units),
// and pg = P times the softcap's derivative 1 - tanh^2 (P without softcap), which dS
// takes in place of P: dS = pg (dP - D), scaled by softmax_scale as the plain one.
// dist(n, e): the element's query row + offset - key as a float (ALiBi's distance: a
// per-row float plus the column's constant, one add); neg_lse_log2 and visible as in
// exp_scores. kSoftcap: the block's variants include softcap (else pg is P and need not
// be read). kAlibi: the block's variants include ALiBi (else the distance is not formed).
// `masked` is tested once, outside the element loop, as exp_scores does: tested per
// element, ptxas branched around each element's visibility test even in blocks without a
// mask, and the backward's softcap cost 1.13-1.15x plain instead of 1.03-1.06x
// (docs/history/performance-log.md, "The scored backward's branches, measured").
template <bool kSoftcap, bool kAlibi, int kN, typename NegLseLog2, typename Dist, typename Visible,
          typename PgStore>
__device__ __forceinline__ void exp_scores_scored(float (&acc)[kN][4], PgStore pg,
                                                  const ScoreVariants &v, bool masked,
                                                  NegLseLog2 neg_lse_log2, Dist dist,
                                                  Visible visible)
{
    const auto loop = [&](bool mask_elements) {
#pragma unroll
        for (int n = 0; n < kN; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                float y = acc[n][e], slope = 1.f;
                if constexpr (kSoftcap) {
                    y = tanh_approx(y * v.tanh_scale);
                    slope = 1.f - y * y;
                }
                if constexpr (kAlibi) y = fmaf(-v.alibi, fabsf(dist(n, e)), y);
                float x = exp2_approx(fmaf(y, v.score_log2, neg_lse_log2(n, e)));
                if (mask_elements && !visible(n, e)) x = 0.f;
                acc[n][e] = x;
                pg(n, e, x * slope);
            }
    };
    if (masked)
        loop(true);
    else
        loop(false);
}

// pg's stores: an fp32 tile, or fp16 pairs (element e of n8 tile n in the e / 2-th
// register, e % 2 its high half): pg scales dS, which the products take as 16 bits
// anyway, and half a tile fewer registers can keep a kernel from spilling.
template <int kN>
__device__ __forceinline__ auto pg_to(float (&pg)[kN][4])
{
    return [&pg](int n, int e, float x) { pg[n][e] = x; };
}

template <int kN>
__device__ __forceinline__ auto pg_to_halves(uint32_t (&pg)[kN][2])
{
    return [&pg](int n, int e, float x) {
        const uint32_t h = __half_as_ushort(__float2half_rn(x));
        pg[n][e >> 1] = (e & 1) ? (pg[n][e >> 1] & 0xffffu) | (h << 16) : h;
    };
}

// exp_scores_keys_as_rows with the score variants, and pg (pg_to, pg_to_halves).
template <bool kSoftcap, bool kAlibi, int kN, typename PgStore>
__device__ __forceinline__ void exp_scores_keys_as_rows_scored(
    float (&acc)[kN][4], PgStore pg, const ScoreVariants &v, int seqlen_q,
    const KeyWindow &win, const float *lse, bool masked, int row0, int key_row, int lane)
{
    // visible_flat per element here: the intervals' registers made the mma.sync d = 128
    // dK/dV kernel spill.
    const auto query = [&](int n, int e) { return row0 + n * 8 + 2 * (lane & 3) + (e & 1); };
    const auto key = [&](int, int e) { return key_row + 8 * (e >> 1); };
    const int col0 = row0 + 2 * (lane & 3);  // queries are columns: + 8n + e % 2
    const float dist0[2] = {static_cast<float>(col0 - key_row) + v.offset,
                            static_cast<float>(col0 - key_row - 8) + v.offset};
    exp_scores_scored<kSoftcap, kAlibi>(
        acc, pg, v, masked,
        [&](int n, int e) { return -lse[n * 8 + 2 * (lane & 3) + (e & 1)] * kLog2e; },
        [&](int n, int e) { return dist0[e >> 1] + static_cast<float>(n * 8 + (e & 1)); },
        [&](int n, int e) {
            return (query(n, e) < seqlen_q) & win.visible_flat(query(n, e), key(n, e));
        });
}

// exp_scores_keys_as_rows_scored with softcap and ALiBi taken from v (block-uniform; the
// scored kernels run with at least one of them).
template <int kN, typename PgStore>
__device__ __forceinline__ void exp_scores_keys_as_rows_variants(
    float (&acc)[kN][4], PgStore pg, const ScoreVariants &v, int seqlen_q,
    const KeyWindow &win, const float *lse, bool masked, int row0, int key_row, int lane)
{
    if (v.tanh_scale == 0.f)
        exp_scores_keys_as_rows_scored<false, true>(acc, pg, v, seqlen_q, win, lse, masked,
                                                    row0, key_row, lane);
    else if (v.alibi != 0.f)
        exp_scores_keys_as_rows_scored<true, true>(acc, pg, v, seqlen_q, win, lse, masked,
                                                   row0, key_row, lane);
    else
        exp_scores_keys_as_rows_scored<true, false>(acc, pg, v, seqlen_q, win, lse, masked,
                                                    row0, key_row, lane);
}

// exp_scores_queries_as_rows with the score variants, and pg.
template <bool kSoftcap, bool kAlibi, int kN, typename PgStore>
__device__ __forceinline__ void exp_scores_queries_as_rows_scored(
    float (&acc)[kN][4], PgStore pg, const ScoreVariants &v, const KeyWindow &win,
    const float (&lse_log2)[2], bool masked, int row, int key0, int lane)
{
    const int col0 = key0 + 2 * (lane & 3);
    const ColumnInterval cols[2] = {key_columns(win, row, col0), key_columns(win, row + 8, col0)};
    const float dist0[2] = {static_cast<float>(row - col0) + v.offset,
                            static_cast<float>(row + 8 - col0) + v.offset};
    exp_scores_scored<kSoftcap, kAlibi>(
        acc, pg, v, masked, [&](int, int e) { return -lse_log2[e >> 1]; },
        [&](int n, int e) { return dist0[e >> 1] - static_cast<float>(n * 8 + (e & 1)); },
        [&](int n, int e) { return cols[e >> 1].has(n, e); });
}

// exp_scores_queries_as_rows_scored with softcap and ALiBi taken from v (as
// exp_scores_keys_as_rows_variants).
template <int kN, typename PgStore>
__device__ __forceinline__ void exp_scores_queries_as_rows_variants(
    float (&acc)[kN][4], PgStore pg, const ScoreVariants &v, const KeyWindow &win,
    const float (&lse_log2)[2], bool masked, int row, int key0, int lane)
{
    if (v.tanh_scale == 0.f)
        exp_scores_queries_as_rows_scored<false, true>(acc, pg, v, win, lse_log2, masked, row,
                                                       key0, lane);
    else if (v.alibi != 0.f)
        exp_scores_queries_as_rows_scored<true, true>(acc, pg, v, win, lse_log2, masked, row,
                                                      key0, lane);
    else
        exp_scores_queries_as_rows_scored<true, false>(acc, pg, v, win, lse_log2, masked, row,
                                                       key0, lane);
}

// dSᵀ = P ∘ (dPᵀ − D) in place on a keys-as-rows tile (columns are queries, D of this
// lane's column c is dsum[c]); `p` is P, or P times softcap's derivative.
template <int kN>
__device__ __forceinline__ void ds_keys_as_rows(float (&dp)[kN][4], const float (&p)[kN][4],
                                                const float *dsum, int lane)
{
#pragma unroll
    for (int n = 0; n < kN; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e)
            dp[n][e] = p[n][e] * (dp[n][e] - dsum[n * 8 + 2 * (lane & 3) + (e & 1)]);
}

}  // namespace fa2
