/* FlashAttention-2 forward, tiled, on the CPU (seed §3.1). The seed lists the loops
 * K/V-outer and rescales O at every step (FlashAttention-1's order); FlashAttention-2
 * puts the query blocks outside (one GPU thread block each) and divides by l once at
 * the end. This file follows FlashAttention-2, in fp32, with the mask applied element
 * by element as the kernel does (written out here, not taken from the oracle, so the
 * two check each other). */
#include "tiled_cpu.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>

#include "common/params.h"

typedef struct tile_buffers_t {
    float *s;   /* Br x Bc scores, then probabilities */
    float *acc; /* Br x d unscaled output */
    float *m;   /* Br running max */
    float *l;   /* Br running sum */
} tile_buffers_t;

int tiled_cpu_lazy_rescale = 0;

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* Is key j visible from query i? The rule of include/fa2.h. */
static int visible(const fa2_problem_t *p, int64_t i, int64_t j)
{
    const int64_t diag = i + p->seqlen_k - p->seqlen_q;
    const int64_t right = p->causal ? 0 : p->window_right;
    if (p->window_left >= 0 && j < diag - p->window_left)
        return 0;
    if (right >= 0 && j > diag + right)
        return 0;
    return 1;
}

/* The key blocks a query block [i0, i1) can see: [*n0, *n1). Blocks wholly left of
 * the first row's window or right of the last row's diagonal are skipped, as the GPU
 * kernel skips them. */
static void key_blocks(const fa2_problem_t *p, int64_t i0, int64_t i1, int64_t bn,
                       int64_t *n0, int64_t *n1)
{
    const int64_t right = p->causal ? 0 : p->window_right;
    int64_t first = 0, last = p->seqlen_k - 1;
    if (p->window_left >= 0)
        first = max64(first, i0 + p->seqlen_k - p->seqlen_q - p->window_left);
    if (right >= 0)
        last = min64(last, (i1 - 1) + p->seqlen_k - p->seqlen_q + right);
    if (first > last) {
        *n0 = *n1 = 0;
        return;
    }
    *n0 = first / bn;
    *n1 = last / bn + 1;
}

/* x, or 0 when x is subnormal: the kernels' exponentials flush such results. */
static float flush_subnormal(float x) { return x < FLT_MIN ? 0.0f : x; }

/* The score of (head h, row i, key j) from the scaled product x, in fp32 as a kernel
 * computes it: softcap, then ALiBi (oracle_score.h; j < 0: without ALiBi); `mod` NULL:
 * x. */
static float score(const fa2_problem_t *p, const oracle_score_t *mod, int64_t h, int64_t i,
                   int64_t j, float x)
{
    if (!mod)
        return x;
    float s = mod->softcap > 0.0 ? (float)mod->softcap * tanhf(x / (float)mod->softcap) : x;
    if (mod->alibi_slopes && j >= 0) {
        const int64_t dist = i + p->seqlen_k - p->seqlen_q - j;
        s -= mod->alibi_slopes[h] * (float)(dist < 0 ? -dist : dist);
    }
    return s;
}

/* As the Hopper forward (kernels/common/score_variants.cuh, alibi_tile_side): +1 when
 * every key of [j0, j1] is at or before the diagonal key of every row of [i0, i1] (i +
 * seqlen_k - seqlen_q), -1 when at or after; 0 astride, without ALiBi, or with a slope
 * above FA2_MAX_ONE_SIDE_ALIBI_LOG2 / log2(e). On a one-sided tile -slope |dist| is split
 * into a column term on each score (the slope times the key's column in the tile) and a
 * row term. */
static int alibi_side(const fa2_problem_t *p, const oracle_score_t *mod, int64_t h, int64_t i0,
                      int64_t i1, int64_t j0, int64_t j1)
{
    if (!mod || !mod->alibi_slopes || mod->alibi_slopes[h] == 0.0f ||
        !(fabsf(mod->alibi_slopes[h]) * 1.4426950408889634f <= FA2_MAX_ONE_SIDE_ALIBI_LOG2))
        return 0;
    const int64_t off = p->seqlen_k - p->seqlen_q;
    return i0 + off >= j1 ? 1 : i1 + off <= j0 ? -1 : 0;
}

/* One-sided ALiBi's term left out of column c's score (alibi_side): -slope times the
 * row's distance to the tile's first key less c & 6, the column's lane offset in the
 * kernel's quad (0 with slope 0: no split). */
static float one_side_bias(float slope, int64_t dist0, int64_t c)
{
    return -slope * (float)(dist0 - (c & 6));
}

/* One query block [i0, i1) of one (batch, head) over key blocks [kb0, kb1) of the
 * ones it can see (a split, or all of them): O (normalized over those keys) and LSE
 * (-inf for a row that saw no key). */
static void query_block(const fa2_problem_t *p, const oracle_score_t *mod, int64_t bn,
                        float scale, const float *q, const float *k, const float *v,
                        int64_t b, int64_t h, int64_t i0, int64_t i1, int64_t kb0, int64_t kb1,
                        tile_buffers_t *t, float *o, float *lse)
{
    const int64_t d = p->head_dim;
    const int64_t rows = i1 - i0;
    const int64_t hk = h / (p->heads_q / p->heads_kv);
    const float *qb = q + b * p->q_batch_stride + h * p->q_head_stride;
    const float *kb = k + b * p->k_batch_stride + hk * p->k_head_stride;
    const float *vb = v + b * p->v_batch_stride + hk * p->v_head_stride;

    /* A softcap of at most FA2_MAX_BOUNDED_SOFTCAP without ALiBi bounds every score by
     * the cap: as the Hopper forward does for bf16, take a fixed offset (the cap, or less
     * above 33: fa2_bounded_softcap_offset) as every row's instead of a running max
     * (nothing rescaled; each exp(s - offset) in [2^-95.25, 2^49]). */
    const int bounded = p->dtype == FA2_DTYPE_BF16 && mod && mod->softcap > 0.0 &&
                        mod->softcap <= (double)FA2_MAX_BOUNDED_SOFTCAP && !mod->alibi_slopes;
    for (int64_t r = 0; r < rows; ++r) {
        t->m[r] = bounded ? fa2_bounded_softcap_offset((float)mod->softcap) * (float)mod->softcap
                          : -INFINITY;
        t->l[r] = 0.0f;
        for (int64_t c = 0; c < d; ++c)
            t->acc[r * d + c] = 0.0f;
    }

    for (int64_t n = kb0; n < kb1; ++n) {
        const int64_t j0 = n * bn;
        const int64_t cols = min64(bn, p->seqlen_k - j0);
        const int side = alibi_side(p, mod, h, i0, i1 - 1, j0, j0 + bn - 1);
        for (int64_t r = 0; r < rows; ++r) {
            const int64_t i = i0 + r;
            const float *qi = qb + i * p->q_seq_stride;
            float *s = t->s + r * bn;
            /* one-sided ALiBi: the slope times column c's part c & ~6 on the score, the
             * rest (one_side_bias) taken by the max and the offset, as the kernel splits
             * it: its bias differs between the lanes of a quad */
            const float slope = side ? (float)side * mod->alibi_slopes[h] : 0.0f;
            const int64_t dist0 = i + p->seqlen_k - p->seqlen_q - j0;

            /* S = scale * Q_i K_j^T, masked to -inf; the block's row max */
            float m_blk = -INFINITY;
            for (int64_t c = 0; c < cols; ++c) {
                const float *kj = kb + (j0 + c) * p->k_seq_stride;
                float dot = 0.0f;
                for (int64_t x = 0; x < d; ++x)
                    dot += qi[x] * kj[x];
                s[c] = !visible(p, i, j0 + c) ? -INFINITY
                       : side ? fmaf(slope, (float)(c & ~(int64_t)6),
                                     score(p, mod, h, i, -1, scale * dot))
                              : score(p, mod, h, i, j0 + c, scale * dot);
                m_blk = fmaxf(m_blk, s[c] + one_side_bias(slope, dist0, c));
            }

            /* online softmax: new max, rescale factor for what is accumulated. A row
             * that has seen no visible key yet keeps m = -inf; exponentiate against 0
             * then, so that exp(-inf - -inf) never makes a NaN. */
            float m_new = bounded ? t->m[r] : fmaxf(t->m[r], m_blk);
            /* lazy: keep the offset while the max grows by at most the limit (a row that
             * saw nothing, -inf to -inf, compares false and moves) */
            if (tiled_cpu_lazy_rescale && !bounded &&
                m_new - t->m[r] <= FA2_LAZY_RESCALE_LOG2 * 0.69314718f)
                m_new = t->m[r];
            const float m_ref = m_new == -INFINITY ? 0.0f : m_new;
            const float alpha = expf(t->m[r] - m_ref);
            float l_blk = 0.0f;
            for (int64_t c = 0; c < cols; ++c) {
                s[c] = flush_subnormal(expf(s[c] - (m_ref - one_side_bias(slope, dist0, c))));
                l_blk += s[c];
            }
            t->l[r] = alpha * t->l[r] + l_blk;
            t->m[r] = m_new;

            /* O_i = alpha * O_i + P V_j, unnormalized */
            float *acc = t->acc + r * d;
            for (int64_t x = 0; x < d; ++x)
                acc[x] *= alpha;
            for (int64_t c = 0; c < cols; ++c) {
                const float *vj = vb + (j0 + c) * p->v_seq_stride;
                for (int64_t x = 0; x < d; ++x)
                    acc[x] += s[c] * vj[x];
            }
        }
    }

    /* one division by l at the end; LSE = m + log(l) */
    for (int64_t r = 0; r < rows; ++r) {
        const int64_t i = i0 + r;
        float *orow = o + ((b * p->seqlen_q + i) * p->heads_q + h) * d;
        const int empty = t->l[r] == 0.0f;
        const float inv_l = empty ? 0.0f : 1.0f / t->l[r];
        for (int64_t x = 0; x < d; ++x)
            orow[x] = t->acc[r * d + x] * inv_l;
        lse[(b * p->heads_q + h) * p->seqlen_q + i] = empty ? -INFINITY : t->m[r] + logf(t->l[r]);
    }
}

/* Merges `parts` partial results (O_s [parts][batch, seqlen_q, heads_q, d], LSE_s
 * [parts][batch, heads_q, seqlen_q]) and each head's sink into O and LSE, as a split
 * decode's combine does: the sink joins the row's denominator once, here. */
static void combine(const fa2_problem_t *p, const oracle_score_t *mod, int64_t parts,
                    const float *o_parts, const float *lse_parts, float *o, float *lse)
{
    const int64_t d = p->head_dim, rows = p->batch * p->seqlen_q * p->heads_q;
    const int64_t n_lse = p->batch * p->heads_q * p->seqlen_q;
    for (int64_t b = 0; b < p->batch; ++b)
        for (int64_t h = 0; h < p->heads_q; ++h)
            for (int64_t i = 0; i < p->seqlen_q; ++i) {
                const int64_t at = (b * p->heads_q + h) * p->seqlen_q + i;
                const int64_t row = (b * p->seqlen_q + i) * p->heads_q + h;
                const float sink = mod && mod->sinks ? mod->sinks[h] : -INFINITY;
                float top = sink;
                for (int64_t s = 0; s < parts; ++s)
                    top = fmaxf(top, lse_parts[s * n_lse + at]);
                float total = -INFINITY;
                if (top != -INFINITY) {
                    float sum = expf(sink - top);
                    for (int64_t s = 0; s < parts; ++s)
                        sum += expf(lse_parts[s * n_lse + at] - top);
                    total = top + logf(sum);
                }
                for (int64_t x = 0; x < d; ++x) {
                    float acc = 0.0f;
                    for (int64_t s = 0; s < parts; ++s) {
                        const float w = expf(lse_parts[s * n_lse + at] - total);
                        if (w != 0.0f)
                            acc += w * o_parts[(s * rows + row) * d + x];
                    }
                    o[row * d + x] = top == -INFINITY ? 0.0f : acc;
                }
                if (lse)
                    lse[at] = total;
            }
}

int tiled_cpu_forward(const fa2_problem_t *p, int64_t block_m, int64_t block_n,
                      const float *q, const float *k, const float *v, float *o, float *lse)
{
    return tiled_cpu_forward_scored(p, NULL, block_m, block_n, 1, q, k, v, o, lse);
}

int tiled_cpu_forward_scored(const fa2_problem_t *p, const oracle_score_t *mod,
                             int64_t block_m, int64_t block_n, int64_t splits, const float *q,
                             const float *k, const float *v, float *o, float *lse)
{
    if (block_m < 1 || block_n < 1 || splits < 1)
        return -1;
    const int64_t d = p->head_dim;
    const float scale =
        p->softmax_scale != 0.0f ? p->softmax_scale : 1.0f / sqrtf((float)d);
    const int64_t rows = p->batch * p->seqlen_q * p->heads_q;
    const int64_t n_lse = p->batch * p->heads_q * p->seqlen_q;
    tile_buffers_t t;
    t.s = malloc(sizeof(float) * (size_t)(block_m * block_n));
    t.acc = malloc(sizeof(float) * (size_t)(block_m * d));
    t.m = malloc(sizeof(float) * (size_t)block_m);
    t.l = malloc(sizeof(float) * (size_t)block_m);
    float *o_parts = malloc(sizeof(float) * (size_t)(splits * rows * d + 1));
    float *lse_parts = malloc(sizeof(float) * (size_t)(splits * n_lse + 1));
    const int ok = t.s && t.acc && t.m && t.l && o_parts && lse_parts;
    /* Each query block's visible key blocks cut into `splits` ranges (some empty), each
     * computed on its own, then merged with the sink (combine). */
    for (int64_t b = 0; ok && b < p->batch; ++b)
        for (int64_t h = 0; h < p->heads_q; ++h)
            for (int64_t i0 = 0; i0 < p->seqlen_q; i0 += block_m) {
                const int64_t i1 = min64(i0 + block_m, p->seqlen_q);
                int64_t n0, n1;
                key_blocks(p, i0, i1, block_n, &n0, &n1);
                const int64_t per = (n1 - n0 + splits - 1) / splits;
                for (int64_t s = 0; s < splits; ++s)
                    query_block(p, mod, block_n, scale, q, k, v, b, h, i0, i1,
                                min64(n0 + s * per, n1), min64(n0 + (s + 1) * per, n1), &t,
                                o_parts + s * rows * d, lse_parts + s * n_lse);
            }
    if (ok)
        combine(p, mod, splits, o_parts, lse_parts, o, lse);
    free(t.s);
    free(t.acc);
    free(t.m);
    free(t.l);
    free(o_parts);
    free(lse_parts);
    return ok ? 0 : -1;
}
