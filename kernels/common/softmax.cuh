// Online softmax over the score tiles of one thread. In the m16n8 accumulator
// layout a thread holds, per 16-row mma tile, two rows (lane/4 and lane/4 + 8), and
// the four lanes of a quad share those rows; element e of an n8 tile belongs to row
// half e/2. Scores stay in natural units; scale_log2 = scale * log2(e) turns them into
// exp2 arguments with one FFMA.
#pragma once

#include <math.h>

#include "common/params.h"
#include "common/ptx.cuh"

namespace fa2 {

__device__ __forceinline__ float quad_max(float x)
{
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}

__device__ __forceinline__ float quad_sum(float x)
{
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

template <int kMTiles>
struct OnlineSoftmax {
    float row_max[kMTiles][2];  // running max of raw scores (-inf: nothing seen yet)
    float row_sum[kMTiles][2];  // this thread's part of the running sum of exp

    __device__ __forceinline__ void init()
    {
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                row_max[mt][h] = -INFINITY;
                row_sum[mt][h] = 0.f;
            }
        }
    }

    // Turns scores s into probabilities p = exp(scale*(s - max)) in place, updates
    // the statistics and rescales the output accumulator o by exp(scale*(old max −
    // new max)). kHalves = 1: only the first row half (rows 0-7 of each tile; the
    // other half's s, o and statistics are left as they are: rows nobody reads).
    template <int kNTiles, int kDTiles, int kHalves = 2>
    __device__ __forceinline__ void update(float (&s)[kMTiles][kNTiles][4],
                                           float (&o)[kMTiles][kDTiles][4], float scale_log2)
    {
        float alpha[kMTiles][2];
        update_deferred<kNTiles, kHalves>(s, scale_log2, alpha);
        rescale<kDTiles, kHalves>(o, alpha);
    }

    // update() without O's rescale: each row's factor goes to alpha, for a kernel whose
    // O is still being written by the tensor cores (rescale() once they are done).
    template <int kNTiles, int kHalves = 2>
    __device__ __forceinline__ void update_deferred(float (&s)[kMTiles][kNTiles][4],
                                                    float scale_log2, float (&alpha_out)[kMTiles][2])
    {
        const float no_bias[kMTiles][2] = {};
        update_rows<kNTiles, kHalves, false>(s, scale_log2, no_bias, alpha_out);
    }

    // update_deferred() for scores s + bias[mt][h], a term the caller left out of this
    // thread's scores of row (mt, h) (common/score_variants.cuh: apply_alibi_one_side;
    // the four lanes of a quad may have different ones): the row maxima are of s + bias,
    // each exponent's offset takes bias instead of every score.
    template <int kNTiles>
    __device__ __forceinline__ void update_deferred_biased(float (&s)[kMTiles][kNTiles][4],
                                                           float scale_log2,
                                                           const float (&bias)[kMTiles][2],
                                                           float (&alpha_out)[kMTiles][2])
    {
        update_rows<kNTiles, 2, true>(s, scale_log2, bias, alpha_out);
    }

    // update_deferred_biased() that keeps each row's offset while its maximum grows by at
    // most FA2_LAZY_RESCALE_LOG2 (log2 units): then p is at most 2^FA2_LAZY_RESCALE_LOG2
    // (fp32 sums, bf16 / fp16 P and fp32 O hold it), alpha is 1 and the return is false,
    // so that the caller skips O's rescale (a bias of 0: scores without one). Decided for
    // the whole warp (its rows either all keep or all move), so the skip is a uniform
    // branch. The row maxima are formed as trees (depth log2 of the row's values, not
    // their count).
    template <int kNTiles>
    __device__ __forceinline__ bool update_deferred_biased_lazy(
        float (&s)[kMTiles][kNTiles][4], float scale_log2, const float (&bias)[kMTiles][2],
        float (&alpha_out)[kMTiles][2])
    {
        bool underflows;
        return update_rows_lazy<kNTiles, false>(s, scale_log2, bias, alpha_out, underflows);
    }

    // update_deferred_biased_lazy() that first asks whether every exponent of the warp's
    // tile lies below kUnderflowLog2, where exp2_approx gives 0 (ALiBi's tiles far from
    // the diagonal): then `underflows` is true, no exponential is taken and s is left as
    // it is (not probabilities: the caller takes P as 0); the statistics are as the
    // update would have left them.
    template <int kNTiles>
    __device__ __forceinline__ bool update_deferred_biased_lazy_sparse(
        float (&s)[kMTiles][kNTiles][4], float scale_log2, const float (&bias)[kMTiles][2],
        float (&alpha_out)[kMTiles][2], bool &underflows)
    {
        return update_rows_lazy<kNTiles, true>(s, scale_log2, bias, alpha_out, underflows);
    }

    // Below this exponent (log2 units) exp2_approx's result is subnormal and flushed to 0.
    static constexpr float kUnderflowLog2 = -127.f;

    // update() for scores bounded above by 1 (softcapped, in score units, without ALiBi:
    // FA2_SCORES_BOUNDED_SOFTCAP, src/plan_forward.c): the exponent's offset is a fixed one
    // (fa2_bounded_softcap_offset: the bound, or lower at large caps) instead of the
    // running maximum, so no maximum is formed (no wait for the tile's scores before
    // the first exponential) and O is never rescaled. The caller set row_max to that
    // offset (bounded_init), which finish() and finish_with_sink() read; offset_log2 is
    // bounded_offset_log2(scale_log2).
    template <int kNTiles>
    __device__ __forceinline__ void update_bounded(float (&s)[kMTiles][kNTiles][4],
                                                   float scale_log2, float offset_log2)
    {
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                float sum = 0.f;
#pragma unroll
                for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
                    for (int e = 2 * h; e < 2 * h + 2; ++e) {
                        const float x = fmaf(s[mt][nt][e], scale_log2, -offset_log2);
                        s[mt][nt][e] = exp2_approx(x);
                        sum += s[mt][nt][e];
                    }
                }
                row_sum[mt][h] += sum;
            }
        }
    }

    // The state update_bounded() works from: the offset (score units), nothing summed.
    __device__ __forceinline__ void bounded_init(float offset)
    {
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                row_max[mt][h] = offset;
                row_sum[mt][h] = 0.f;
            }
        }
    }

    // update_bounded()'s offset in log2 units: the rounded product finish() forms.
    __device__ __forceinline__ float bounded_offset_log2(float scale_log2) const
    {
        return __fmul_rn(row_max[0][0], scale_log2);
    }

    // O's rows times update_deferred's factors.
    template <int kDTiles, int kHalves = 2>
    __device__ __forceinline__ void rescale(float (&o)[kMTiles][kDTiles][4],
                                            const float (&alpha)[kMTiles][2])
    {
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
            for (int h = 0; h < kHalves; ++h)
#pragma unroll
                for (int dt = 0; dt < kDTiles; ++dt) {
                    o[mt][dt][2 * h] *= alpha[mt][h];
                    o[mt][dt][2 * h + 1] *= alpha[mt][h];
                }
    }

    // After the last block: completes the row sums across the quad, returns 1/sum
    // per row (0 for rows that saw nothing) and the log-sum-exp in natural units
    // (-inf for those rows), from the same rounded offset max * scale_log2 the sums
    // were taken against.
    __device__ __forceinline__ void finish(float scale_log2, float (&inv_sum)[kMTiles][2],
                                           float (&lse)[kMTiles][2])
    {
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const float sum = quad_sum(row_sum[mt][h]);
                const bool empty = sum == 0.f || row_max[mt][h] == -INFINITY;
                inv_sum[mt][h] = empty ? 0.f : 1.f / sum;
                lse[mt][h] = empty ? -INFINITY
                                   : (__fmul_rn(row_max[mt][h], scale_log2) + log2f(sum)) *
                                         0.6931471805599453f; /* ln 2 */
            }
        }
    }

    // finish() with one more term in each row's denominator, a sink logit of
    // sink_log2 (log2 units, the scores' scale applied; -inf: none) that has no value:
    // inv_sum then also carries the rescale of O from the row's max to the new one.
    __device__ __forceinline__ void finish_with_sink(float scale_log2, float sink_log2,
                                                     float (&inv_sum)[kMTiles][2],
                                                     float (&lse)[kMTiles][2])
    {
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const float sum = quad_sum(row_sum[mt][h]);
                const float m = row_max[mt][h] == -INFINITY
                                    ? -INFINITY
                                    : __fmul_rn(row_max[mt][h], scale_log2);
                const float top = fmaxf(m, sink_log2);
                if (top == -INFINITY || (sum == 0.f && sink_log2 == -INFINITY)) {
                    inv_sum[mt][h] = 0.f;
                    lse[mt][h] = -INFINITY;
                    continue;
                }
                const float f = m == -INFINITY ? 0.f : exp2_approx(m - top);
                const float total = sum * f + exp2_approx(sink_log2 - top);
                inv_sum[mt][h] = f / total;
                lse[mt][h] = (top + log2f(total)) * 0.6931471805599453f; /* ln 2 */
            }
        }
    }

  private:
    // Row half h of one mma tile's scores s to p = 2^(s scale_log2 - offset) in place;
    // returns this thread's sum of them.
    template <int kNTiles>
    static __device__ __forceinline__ float exp_row_half(float (&s)[kNTiles][4], int h,
                                                         float scale_log2, float offset)
    {
        float sum = 0.f;
#pragma unroll
        for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
            for (int e = 2 * h; e < 2 * h + 2; ++e) {
                s[nt][e] = exp2_approx(fmaf(s[nt][e], scale_log2, -offset));
                sum += s[nt][e];
            }
        }
        return sum;
    }

    // update_deferred()'s body; kBiased: the scores are s + bias (update_deferred_biased).
    template <int kNTiles, int kHalves, bool kBiased>
    __device__ __forceinline__ void update_rows(float (&s)[kMTiles][kNTiles][4], float scale_log2,
                                                const float (&bias)[kMTiles][2],
                                                float (&alpha_out)[kMTiles][2])
    {
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
            for (int h = 0; h < kHalves; ++h) {
                float m = kBiased ? -INFINITY : row_max[mt][h];
#pragma unroll
                for (int nt = 0; nt < kNTiles; ++nt)
                    m = fmaxf(m, fmaxf(s[mt][nt][2 * h], s[mt][nt][2 * h + 1]));
                // biased: each lane's maximum with its own bias, then the row's
                m = kBiased ? fmaxf(row_max[mt][h], quad_max(m + bias[mt][h])) : quad_max(m);
                // A row with nothing visible yet keeps max = -inf: use 0 as the
                // exponent's offset so that exp2(-inf - 0) = 0 and never NaN. The
                // offsets are rounded products (__fmul_rn, never fused into the
                // subtraction), so that alpha = 1 exactly while the max holds and every
                // block's p carries the same rounding of max * scale_log2: at large
                // scales (|max * scale_log2| ~ 1e6) that rounding is a sizeable exponent.
                const float m_scaled = m == -INFINITY ? 0.f : __fmul_rn(m, scale_log2);
                const float alpha =
                    exp2_approx(__fmul_rn(row_max[mt][h], scale_log2) - m_scaled);
                row_max[mt][h] = m;
                // the exponent's offset for s: m_scaled less the row's bias in log2 units
                const float offset =
                    kBiased ? fmaf(-bias[mt][h], scale_log2, m_scaled) : m_scaled;
                const float sum = exp_row_half<kNTiles>(s[mt], h, scale_log2, offset);
                row_sum[mt][h] = row_sum[mt][h] * alpha + sum;
                alpha_out[mt][h] = alpha;
            }
        }
    }

    // update_deferred_biased_lazy()'s body (kSparse: ..._sparse(), which sets underflows).
    template <int kNTiles, bool kSparse>
    __device__ __forceinline__ bool update_rows_lazy(float (&s)[kMTiles][kNTiles][4],
                                                     float scale_log2,
                                                     const float (&bias)[kMTiles][2],
                                                     float (&alpha_out)[kMTiles][2],
                                                     bool &underflows)
    {
        float m_new[kMTiles][2], lane_max[kMTiles][2];
        bool grows = false;
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                float t[kNTiles];
#pragma unroll
                for (int nt = 0; nt < kNTiles; ++nt)
                    t[nt] = fmaxf(s[mt][nt][2 * h], s[mt][nt][2 * h + 1]);
#pragma unroll
                for (int stride = 1; stride < kNTiles; stride *= 2)
#pragma unroll
                    for (int i = 0; i + stride < kNTiles; i += 2 * stride)
                        t[i] = fmaxf(t[i], t[i + stride]);
                lane_max[mt][h] = t[0];
                const float m = fmaxf(row_max[mt][h], quad_max(t[0] + bias[mt][h]));
                m_new[mt][h] = m;
                // NaN (-inf to -inf, nothing seen yet) or a first finite max: moves
                grows |= !((m - row_max[mt][h]) * scale_log2 <= FA2_LAZY_RESCALE_LOG2);
            }
        }
        const bool moves = __any_sync(0xffffffffu, grows);
        float offset[kMTiles][2];
        bool low = true;  // every exponent of this thread's rows below kUnderflowLog2
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                // offsets as update_rows forms them (rounded products, 0 for -inf)
                const float m_old_scaled = __fmul_rn(row_max[mt][h], scale_log2);
                float alpha = 1.f;
                if (moves) {
                    const float m = m_new[mt][h];
                    const float m_scaled = m == -INFINITY ? 0.f : __fmul_rn(m, scale_log2);
                    alpha = exp2_approx(m_old_scaled - m_scaled);
                    row_max[mt][h] = m;
                }
                const float m = row_max[mt][h];
                const float m_scaled = m == -INFINITY ? 0.f : __fmul_rn(m, scale_log2);
                offset[mt][h] = fmaf(-bias[mt][h], scale_log2, m_scaled);
                if constexpr (kSparse)  // (-inf, a row with nothing visible, compares true)
                    low &= !(fmaf(lane_max[mt][h], scale_log2, -offset[mt][h]) >=
                             kUnderflowLog2);
                alpha_out[mt][h] = alpha;
            }
        }
        underflows = kSparse && __all_sync(0xffffffffu, low);
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const float sum =
                    underflows ? 0.f
                               : exp_row_half<kNTiles>(s[mt], h, scale_log2, offset[mt][h]);
                row_sum[mt][h] = moves ? row_sum[mt][h] * alpha_out[mt][h] + sum
                                       : row_sum[mt][h] + sum;
            }
        }
        return moves;
    }
};

}  // namespace fa2
