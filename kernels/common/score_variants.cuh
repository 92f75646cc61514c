// The score variants of include/fa2.h on m16n8 accumulator tiles of raw q.k products
// (the layout apply_mask reads). The natural-unit logit x = scale s, softcapped
// x = cap tanh(scale s / cap), minus slope |row + seqlen_k - seqlen_q - key| for ALiBi,
// is kept in "score units" so that each variant costs the least per element:
//   no softcap: y = s - (slope / scale) |dist|,          x = scale y
//   softcap:    y = tanh(s scale / cap) - (slope / cap) |dist|,  x = cap y
// and the softmax takes score_log2 = (scale or cap) log2(e) as its factor, as the plain
// path takes scale log2(e). ALiBi's distance is formed in floats (exact below 2^24) from
// one conversion per row and column base. The sink joins each row once, at the end
// (OnlineSoftmax::finish_with_sink).
#pragma once

#include <math.h>

#include "common/params.h"
#include "common/ptx.cuh"

namespace fa2 {

struct ScoreVariants {
    float tanh_scale;  // scale / cap: what s is multiplied by inside tanh; 0 = no softcap
    float score_log2;  // score units to log2 units: (scale or cap) log2(e)
    float alibi;       // this head's slope in score units (slope / scale or / cap), 0 = off
    float offset;      // seqlen_k - seqlen_q: the query row's key position minus its row
};

// Score units' factor to log2 units for the problem's variants.
__device__ __forceinline__ float score_units_log2(const fa2_params_t &p)
{
    return p.softcap > 0.f ? p.softcap * kLog2e : p.scale_log2;
}

// A slope in score units, kept finite (a tiny cap could overflow it: inf * 0 would be NaN
// on the diagonal).
__device__ __forceinline__ float alibi_in_score_units(const fa2_params_t &p, float slope)
{
    const float a = slope / (p.softcap > 0.f ? p.softcap : p.softmax_scale);
    return fmaxf(fminf(a, 3.402823466e38f), -3.402823466e38f);
}

// Query head `head`'s ALiBi slope for sequence `batch` (one set for all, or per sequence).
__device__ __forceinline__ float alibi_slope(const fa2_params_t &p, int batch, int head)
{
    return __ldg(p.alibi_slopes + batch * p.alibi_batch_stride + head);
}

// Query head `head`'s variants for sequence `batch`, seqlen_q rows over seqlen_k keys.
__device__ __forceinline__ ScoreVariants score_variants(const fa2_params_t &p, int batch,
                                                        int head, int seqlen_q, int seqlen_k)
{
    return {p.softcap > 0.f ? p.softmax_scale / p.softcap : 0.f, score_units_log2(p),
            p.alibi_slopes ? alibi_in_score_units(p, alibi_slope(p, batch, head)) : 0.f,
            static_cast<float>(seqlen_k - seqlen_q)};
}

// FA2_MAX_BOUNDED_SOFTCAP (common/params.h) is the largest softcap at which a softcapped
// score y (in [-1, 1], score units) may be offset by a fixed offset c instead of its
// row's maximum (OnlineSoftmax::update_bounded; which calls: FA2_SCORES_BOUNDED_SOFTCAP,
// src/plan_forward.c). c = fa2_bounded_softcap_offset(cap): the bound 1 up to a cap of
// 33, so that every exp2((y - 1) cap log2(e)) is a normal float in [2^-95.3, 1] and a
// row's sum at most its number of keys, as with the maximum; above 33 c drops so that
// the smallest p stays 2^-95.3 and the largest grows to 2^49 at Gemma 2's 50, which fp32
// sums and O and bf16 P still hold: the result is the same up to rounding.

// Which scores a Hopper forward instance is compiled for, so that none carries another's
// code: plain, a softcap that bounds them (FA2_SCORES_BOUNDED_SOFTCAP, src/plan_forward.c),
// or any variants.
enum ScoreKind {
    kPlainScores = FA2_SCORES_PLAIN,
    kBoundedSoftcap = FA2_SCORES_BOUNDED_SOFTCAP,
    kGeneralScores = FA2_SCORES_GENERAL
};

// Head `head`'s sink in log2 units, -inf without sinks.
__device__ __forceinline__ float sink_log2(const fa2_params_t &p, int head)
{
    return p.sinks ? __ldg(p.sinks + head) * kLog2e : -INFINITY;
}

// s <- tanh(s tanh_scale) on every element.
template <int kMTiles, int kNTiles>
__device__ __forceinline__ void apply_softcap(float (&s)[kMTiles][kNTiles][4], float tanh_scale)
{
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
        for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) s[mt][nt][e] = tanh_approx(s[mt][nt][e] * tanh_scale);
}

// s <- s - alibi[mt][h] |dist0[mt][h] - (column offset)|: dist0 is this thread's row
// position (row + offset) minus its first key, the column offset nt 8 + (e & 1).
template <int kMTiles, int kNTiles>
__device__ __forceinline__ void apply_alibi(float (&s)[kMTiles][kNTiles][4],
                                            const float (&alibi)[kMTiles][2],
                                            const float (&dist0)[kMTiles][2])
{
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
        for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const float d = dist0[mt][e >> 1] - static_cast<float>(nt * 8 + (e & 1));
                s[mt][nt][e] = fmaf(-alibi[mt][e >> 1], fabsf(d), s[mt][nt][e]);
            }
}

// Which side of its rows' diagonals (key = row + seqlen_k - seqlen_q) a tile of keys
// [key_first, key_last] lies on for rows [row_first, row_last]: +1 every key at or before
// each row's diagonal (dist >= 0: causal tiles), -1 at or after it, 0 astride one, or
// ALiBi off for this head, or a slope too steep to split (FA2_MAX_ONE_SIDE_ALIBI_LOG2,
// common/params.h).
__device__ __forceinline__ int alibi_tile_side(const ScoreVariants &v, int64_t diag_offset,
                                               int row_first, int row_last, int key_first,
                                               int key_last)
{
    if (v.alibi == 0.f || !(fabsf(v.alibi * v.score_log2) <= FA2_MAX_ONE_SIDE_ALIBI_LOG2))
        return 0;
    if (row_first + diag_offset >= key_last) return 1;
    if (row_last + diag_offset <= key_first) return -1;
    return 0;
}

// ALiBi on a tile with one sign of dist = row + offset - key (side: alibi_tile_side),
// where -slope |dist| = side slope (column offset) - side slope dist0: s gets the column
// term, one FFMA per score with the column offset nt 8 + (e & 1) as a constant; bias
// the row term (dist0 as apply_score_variants forms it), for the softmax
// (OnlineSoftmax::update_deferred_biased).
template <typename Tr>
__device__ __forceinline__ void apply_alibi_one_side(float (&s)[Tr::kMTiles][Tr::kNTiles][4],
                                                     const ScoreVariants &v, int side, int row0,
                                                     int key0, int lane,
                                                     float (&bias)[Tr::kMTiles][2])
{
    const float a = side > 0 ? v.alibi : -v.alibi;
    const float key = static_cast<float>(key0 + 2 * (lane & 3)) - v.offset;
#pragma unroll
    for (int mt = 0; mt < Tr::kMTiles; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h)
            bias[mt][h] = -a * (static_cast<float>(row0 + mt * 16 + (lane >> 2) + 8 * h) - key);
#pragma unroll
    for (int mt = 0; mt < Tr::kMTiles; ++mt)
#pragma unroll
        for (int nt = 0; nt < Tr::kNTiles; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                s[mt][nt][e] = fmaf(a, static_cast<float>(nt * 8 + (e & 1)), s[mt][nt][e]);
}

// The variants on Tr's tile: rows row0 + (mt, lane, e), keys key0 + (nt, lane, e). The
// branches are uniform per block: a variant that is off costs a compare per tile.
// kSoftcap = false: the caller runs without softcap (v.tanh_scale == 0), no tanh code.
template <typename Tr, bool kSoftcap = true>
__device__ __forceinline__ void apply_score_variants(float (&s)[Tr::kMTiles][Tr::kNTiles][4],
                                                     const ScoreVariants &v, int row0, int key0,
                                                     int lane)
{
    if (kSoftcap && v.tanh_scale != 0.f) apply_softcap(s, v.tanh_scale);
    if (v.alibi != 0.f) {
        float alibi[Tr::kMTiles][2], dist0[Tr::kMTiles][2];
        const float key = static_cast<float>(key0 + 2 * (lane & 3)) - v.offset;
#pragma unroll
        for (int mt = 0; mt < Tr::kMTiles; ++mt)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                alibi[mt][h] = v.alibi;
                dist0[mt][h] = static_cast<float>(row0 + mt * 16 + (lane >> 2) + 8 * h) - key;
            }
        apply_alibi(s, alibi, dist0);
    }
}

}  // namespace fa2
