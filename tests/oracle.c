/* Naive attention in double, its same-precision twin, and the small helpers the tests
 * share. See oracle.h. */
#include "oracle.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- masking ------------------------------------------------------------------------ */

double oracle_softmax_scale(const fa2_problem_t *p)
{
    if (p->softmax_scale != 0.0f)
        return (double)p->softmax_scale;
    return 1.0 / sqrt((double)p->head_dim);
}

int oracle_key_range(const fa2_problem_t *p, int64_t i, int64_t *lo, int64_t *hi)
{
    const int64_t diag = i + p->seqlen_k - p->seqlen_q; /* bottom-right alignment */
    const int64_t right = p->causal ? 0 : p->window_right;
    int64_t a = 0, b = p->seqlen_k - 1;
    if (p->window_left >= 0 && diag - p->window_left > a)
        a = diag - p->window_left;
    if (right >= 0 && diag + right < b)
        b = diag + right;
    *lo = a;
    *hi = b;
    return a <= b;
}

/* ---- attention ---------------------------------------------------------------------- */

static const float *q_row(const fa2_problem_t *p, const float *q, int64_t b, int64_t i,
                          int64_t h)
{
    return q + b * p->q_batch_stride + i * p->q_seq_stride + h * p->q_head_stride;
}

static const float *k_row(const fa2_problem_t *p, const float *k, int64_t b, int64_t j,
                          int64_t h)
{
    return k + b * p->k_batch_stride + j * p->k_seq_stride + h * p->k_head_stride;
}

static const float *v_row(const fa2_problem_t *p, const float *v, int64_t b, int64_t j,
                          int64_t h)
{
    return v + b * p->v_batch_stride + j * p->v_seq_stride + h * p->v_head_stride;
}

static double dot(const float *x, const float *y, int64_t n)
{
    double s = 0.0;
    for (int64_t t = 0; t < n; ++t)
        s += (double)x[t] * (double)y[t];
    return s;
}

/* One (batch, head, row) of attention with the score variants `mod` (NULL: plain).
 * `rounded` selects the same-precision variant (scores, probabilities and output
 * rounded to p->dtype). `s` is scratch of seqlen_k. */
static void attend_row(const fa2_problem_t *p, const oracle_score_t *mod, const float *q,
                       const float *k, const float *v, int64_t b, int64_t h, int64_t i,
                       int rounded, double *s, double *o_row, double *lse)
{
    const int64_t d = p->head_dim;
    const int64_t hk = h / (p->heads_q / p->heads_kv);
    const double scale = oracle_softmax_scale(p), sink = oracle_sink(mod, h);
    int64_t lo, hi;

    for (int64_t t = 0; t < d; ++t)
        o_row[t] = 0.0;
    if (!oracle_key_range(p, i, &lo, &hi)) {
        if (lse)
            *lse = sink; /* -inf without sinks */
        return;
    }

    const float *qi = q_row(p, q, b, i, h);
    double m = sink;
    for (int64_t j = lo; j <= hi; ++j) {
        double sj = oracle_score(p, mod, h, i, j, scale * dot(qi, k_row(p, k, b, j, hk), d));
        if (rounded)
            sj = oracle_round((float)sj, p->dtype);
        s[j] = sj;
        if (sj > m)
            m = sj;
    }
    double l = sink == -INFINITY ? 0.0 : exp(sink - m);
    for (int64_t j = lo; j <= hi; ++j) {
        s[j] = exp(s[j] - m);
        l += s[j];
    }
    for (int64_t j = lo; j <= hi; ++j) {
        double pj = s[j] / l;
        if (rounded)
            pj = oracle_round((float)pj, p->dtype);
        const float *vj = v_row(p, v, b, j, hk);
        for (int64_t t = 0; t < d; ++t)
            o_row[t] += pj * (double)vj[t];
    }
    if (rounded)
        for (int64_t t = 0; t < d; ++t)
            o_row[t] = oracle_round((float)o_row[t], p->dtype);
    if (lse)
        *lse = m + log(l);
}

static int attend(const fa2_problem_t *p, const oracle_score_t *mod, const float *q,
                  const float *k, const float *v, int rounded, double *o, double *lse)
{
    const int64_t d = p->head_dim;
    double *s = malloc(sizeof(double) * (size_t)(p->seqlen_k > 0 ? p->seqlen_k : 1));
    if (!s)
        return -1;
    for (int64_t b = 0; b < p->batch; ++b)
        for (int64_t h = 0; h < p->heads_q; ++h)
            for (int64_t i = 0; i < p->seqlen_q; ++i) {
                double *o_row = o + ((b * p->seqlen_q + i) * p->heads_q + h) * d;
                double *l = lse ? lse + (b * p->heads_q + h) * p->seqlen_q + i : NULL;
                attend_row(p, mod, q, k, v, b, h, i, rounded, s, o_row, l);
            }
    free(s);
    return 0;
}

int oracle_forward(const fa2_problem_t *p, const float *q, const float *k,
                   const float *v, double *o, double *lse)
{
    return attend(p, NULL, q, k, v, 0, o, lse);
}

int oracle_forward_scored(const fa2_problem_t *p, const oracle_score_t *mod, const float *q,
                          const float *k, const float *v, double *o, double *lse)
{
    return attend(p, mod, q, k, v, 0, o, lse);
}

int oracle_forward_rounded(const fa2_problem_t *p, const float *q, const float *k,
                           const float *v, double *o)
{
    return attend(p, NULL, q, k, v, 1, o, NULL);
}

int oracle_forward_scored_rounded(const fa2_problem_t *p, const oracle_score_t *mod,
                                  const float *q, const float *k, const float *v, double *o)
{
    return attend(p, mod, q, k, v, 1, o, NULL);
}

int64_t oracle_span(int64_t batch, int64_t seq, int64_t heads, int64_t head_dim,
                    int64_t batch_stride, int64_t seq_stride, int64_t head_stride)
{
    if (batch <= 0 || seq <= 0 || heads <= 0 || head_dim <= 0)
        return 0;
    return (batch - 1) * batch_stride + (seq - 1) * seq_stride + (heads - 1) * head_stride +
           head_dim;
}

/* ---- fp16 / bf16 -------------------------------------------------------------------- */

static uint32_t bits_of(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static float float_of(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* Rounds m >> shift to nearest, ties to even. */
static uint32_t shift_rne(uint32_t m, unsigned shift)
{
    uint32_t r = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (r & 1u)))
        ++r;
    return r;
}

uint16_t oracle_fp16_from_float(float x)
{
    const uint32_t u = bits_of(x);
    const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    const uint32_t a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u)
        return (uint16_t)(sign | 0x7E00u); /* NaN */
    if (a >= 0x477FF000u)
        return (uint16_t)(sign | 0x7C00u); /* >= 65520 rounds to inf */
    const uint32_t e = a >> 23;
    if (a < 0x38800000u) { /* below 2^-14: fp16 subnormal or zero */
        if (e < 102)       /* below 2^-25: rounds to zero */
            return sign;
        /* value = mant * 2^(e-150); in units of 2^-24 that is mant >> (126 - e) */
        return (uint16_t)(sign | shift_rne((a & 0x7FFFFFu) | 0x800000u, 126u - e));
    }
    /* normal: rebias the exponent, round 23 mantissa bits to 10; a carry moves into
     * the exponent, which is what rounding up to the next binade means */
    const uint32_t h = ((e - 112u) << 10) | ((a & 0x7FFFFFu) >> 13);
    const uint32_t rem = a & 0x1FFFu;
    return (uint16_t)(sign | (h + (rem > 0x1000u || (rem == 0x1000u && (h & 1u)))));
}

float oracle_float_from_fp16(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t e = (h >> 10) & 0x1Fu;
    const uint32_t m = h & 0x3FFu;
    if (e == 0) { /* zero or subnormal: m * 2^-24, exact in float */
        float f = (float)m * 0x1p-24f;
        return (h & 0x8000u) ? -f : f;
    }
    if (e == 31)
        return float_of(sign | 0x7F800000u | (m << 13));
    return float_of(sign | ((e + 112u) << 23) | (m << 13));
}

uint16_t oracle_bf16_from_float(float x)
{
    const uint32_t u = bits_of(x);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u)
        return (uint16_t)((u >> 16) | 0x40u); /* NaN, kept quiet */
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

float oracle_float_from_bf16(uint16_t h)
{
    return float_of((uint32_t)h << 16);
}

uint16_t oracle_bits_from_float(float x, fa2_dtype_t dtype)
{
    return dtype == FA2_DTYPE_BF16 ? oracle_bf16_from_float(x) : oracle_fp16_from_float(x);
}

float oracle_float_from_bits(uint16_t h, fa2_dtype_t dtype)
{
    return dtype == FA2_DTYPE_BF16 ? oracle_float_from_bf16(h) : oracle_float_from_fp16(h);
}

float oracle_round(float x, fa2_dtype_t dtype)
{
    return oracle_float_from_bits(oracle_bits_from_float(x, dtype), dtype);
}

/* ---- random numbers ----------------------------------------------------------------- */

oracle_rng_t oracle_rng(uint64_t seed)
{
    oracle_rng_t r = {seed};
    return r;
}

uint64_t oracle_rng_next(oracle_rng_t *rng)
{
    uint64_t z = (rng->state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

float oracle_rng_uniform(oracle_rng_t *rng, float lo, float hi)
{
    const float u = (float)(oracle_rng_next(rng) >> 40) * 0x1p-24f; /* [0, 1) */
    return lo + (hi - lo) * u;
}

float oracle_rng_normal(oracle_rng_t *rng)
{
    const double u1 = ((double)(oracle_rng_next(rng) >> 11) + 1.0) * 0x1p-53; /* (0, 1] */
    const double u2 = (double)(oracle_rng_next(rng) >> 11) * 0x1p-53;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

/* ---- error metrics ------------------------------------------------------------------ */

double oracle_rel_l2(const double *out, const double *ref, size_t n)
{
    double num = 0.0, den = 0.0;
    for (size_t t = 0; t < n; ++t) {
        const double e = out[t] - ref[t];
        num += e * e;
        den += ref[t] * ref[t];
    }
    return den > 0.0 ? sqrt(num / den) : sqrt(num);
}

double oracle_max_abs_err(const double *out, const double *ref, size_t n)
{
    double m = 0.0;
    for (size_t t = 0; t < n; ++t) {
        const double e = fabs(out[t] - ref[t]);
        if (e != e)
            return NAN;
        if (e > m)
            m = e;
    }
    return m;
}
