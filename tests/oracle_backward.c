/* The naive attention backward in double and its same-precision twin. See
 * oracle_backward.h. Written row by row from the math, sharing only the masking rule
 * (oracle_key_range) and the scale with the forward oracle. */
#include "oracle_backward.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "oracle.h"

static double dot(const float *x, const float *y, int64_t n)
{
    double s = 0.0;
    for (int64_t t = 0; t < n; ++t)
        s += (double)x[t] * (double)y[t];
    return s;
}

/* x, or x rounded to the dtype when `rounded`. */
static double maybe_round(double x, int rounded, fa2_dtype_t dtype)
{
    return rounded ? (double)oracle_round((float)x, dtype) : x;
}

typedef struct scratch_t {
    double *x;    /* seqlen_k: scaled scores x of one row (before the score variants) */
    double *p;    /* seqlen_k: probabilities of one row */
    double *dp;   /* seqlen_k: dP, then dS, of one row */
    double *o;    /* head_dim: O of one row */
    double *dk_h; /* seqlen_k x head_dim: dK of one query head */
    double *dv_h; /* seqlen_k x head_dim: dV of one query head */
} scratch_t;

/* One query row i of one (batch b, query head h) with the score variants `mod` (NULL:
 * plain): adds its part of dK and dV of head h to s->dk_h / s->dv_h, writes its dQ row
 * and adds its part of head h's sink gradient to *dsink. */
static void backward_row(const fa2_problem_t *p, const oracle_score_t *mod, const float *q,
                         const float *k, const float *v, const float *d_o, int64_t b,
                         int64_t h, int64_t i, int rounded, scratch_t *s, double *dq_row,
                         double *dsink)
{
    const int64_t d = p->head_dim;
    const int64_t hk = h / (p->heads_q / p->heads_kv);
    const double scale = oracle_softmax_scale(p), sink = oracle_sink(mod, h);
    const fa2_dtype_t dt = p->dtype;
    const float *qi = q + b * p->q_batch_stride + i * p->q_seq_stride + h * p->q_head_stride;
    const float *doi = d_o + b * p->o_batch_stride + i * p->o_seq_stride + h * p->o_head_stride;
    const float *kb = k + b * p->k_batch_stride + hk * p->k_head_stride;
    const float *vb = v + b * p->v_batch_stride + hk * p->v_head_stride;
    int64_t lo, hi;

    for (int64_t x = 0; x < d; ++x)
        dq_row[x] = 0.0;
    if (!oracle_key_range(p, i, &lo, &hi))
        return; /* P = 0: no gradient flows through this row */

    /* forward: S, P = softmax(S) (the sink in the denominator), O = P V */
    double m = sink;
    for (int64_t j = lo; j <= hi; ++j) {
        s->x[j] = scale * dot(qi, kb + j * p->k_seq_stride, d);
        s->p[j] = maybe_round(oracle_score(p, mod, h, i, j, s->x[j]), rounded, dt);
        if (s->p[j] > m)
            m = s->p[j];
    }
    double l = sink == -INFINITY ? 0.0 : exp(sink - m);
    for (int64_t j = lo; j <= hi; ++j) {
        s->p[j] = exp(s->p[j] - m);
        l += s->p[j];
    }
    for (int64_t x = 0; x < d; ++x)
        s->o[x] = 0.0;
    for (int64_t j = lo; j <= hi; ++j) {
        s->p[j] = maybe_round(s->p[j] / l, rounded, dt);
        const float *vj = vb + j * p->v_seq_stride;
        for (int64_t x = 0; x < d; ++x)
            s->o[x] += s->p[j] * (double)vj[x];
    }

    /* dP = dO Vᵀ and D: rowsum(dO ∘ O) exactly, rowsum(P ∘ dP) as a framework's
     * softmax backward does it */
    double dsum = 0.0;
    for (int64_t j = lo; j <= hi; ++j) {
        s->dp[j] = maybe_round(dot(doi, vb + j * p->v_seq_stride, d), rounded, dt);
        if (rounded)
            dsum += s->p[j] * s->dp[j];
    }
    if (!rounded)
        for (int64_t x = 0; x < d; ++x)
            dsum += (double)doi[x] * s->o[x];

    /* the sink's share of the row, P_sink = exp(σ − LSE): dL/dσ = −P_sink D */
    if (sink != -INFINITY)
        *dsink -= exp(sink - m) / l * dsum;

    /* dS = P ∘ (dP − D) ∘ ds/dx; dQ += scale dS K, dK += scale dSᵀ Q, dV += Pᵀ dO */
    for (int64_t j = lo; j <= hi; ++j) {
        const double ds = maybe_round(
            s->p[j] * (s->dp[j] - dsum) * oracle_score_slope(mod, s->x[j]), rounded, dt);
        const float *kj = kb + j * p->k_seq_stride;
        double *dkj = s->dk_h + j * d, *dvj = s->dv_h + j * d;
        for (int64_t x = 0; x < d; ++x) {
            dq_row[x] += scale * ds * (double)kj[x];
            dkj[x] += scale * ds * (double)qi[x];
            dvj[x] += s->p[j] * (double)doi[x];
        }
    }
    if (rounded)
        for (int64_t x = 0; x < d; ++x)
            dq_row[x] = maybe_round(dq_row[x], 1, dt);
}

static int backward(const fa2_problem_t *p, const oracle_score_t *mod, const float *q,
                    const float *k, const float *v, const float *d_o, int rounded, double *dq,
                    double *dk, double *dv, double *dsinks)
{
    const int64_t d = p->head_dim, sk = p->seqlen_k, group = p->heads_q / p->heads_kv;
    const size_t kv_row = (size_t)(sk > 0 ? sk : 1);
    scratch_t s;
    s.x = malloc(sizeof(double) * kv_row);
    s.p = malloc(sizeof(double) * kv_row);
    s.dp = malloc(sizeof(double) * kv_row);
    s.o = malloc(sizeof(double) * (size_t)d);
    s.dk_h = malloc(sizeof(double) * kv_row * (size_t)d);
    s.dv_h = malloc(sizeof(double) * kv_row * (size_t)d);
    const int ok = s.x && s.p && s.dp && s.o && s.dk_h && s.dv_h;
    if (ok) {
        memset(dk, 0, sizeof(double) * (size_t)(p->batch * sk * p->heads_kv * d));
        memset(dv, 0, sizeof(double) * (size_t)(p->batch * sk * p->heads_kv * d));
    }
    for (int64_t b = 0; ok && b < p->batch; ++b)
        for (int64_t hk = 0; hk < p->heads_kv; ++hk) {
            for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
                memset(s.dk_h, 0, sizeof(double) * (size_t)(sk * d));
                memset(s.dv_h, 0, sizeof(double) * (size_t)(sk * d));
                double dsink = 0.0;
                for (int64_t i = 0; i < p->seqlen_q; ++i)
                    backward_row(p, mod, q, k, v, d_o, b, h, i, rounded, &s,
                                 dq + ((b * p->seqlen_q + i) * p->heads_q + h) * d, &dsink);
                if (dsinks)
                    dsinks[h] += dsink; /* summed over the batch */
                /* this query head's dK/dV into the kv head's sum */
                for (int64_t j = 0; j < sk; ++j)
                    for (int64_t x = 0; x < d; ++x) {
                        const int64_t at = ((b * sk + j) * p->heads_kv + hk) * d + x;
                        dk[at] += maybe_round(s.dk_h[j * d + x], rounded, p->dtype);
                        dv[at] += maybe_round(s.dv_h[j * d + x], rounded, p->dtype);
                    }
            }
            if (rounded && group > 1)
                for (int64_t j = 0; j < sk; ++j)
                    for (int64_t x = 0; x < d; ++x) {
                        const int64_t at = ((b * sk + j) * p->heads_kv + hk) * d + x;
                        dk[at] = maybe_round(dk[at], 1, p->dtype);
                        dv[at] = maybe_round(dv[at], 1, p->dtype);
                    }
        }
    free(s.x);
    free(s.p);
    free(s.dp);
    free(s.o);
    free(s.dk_h);
    free(s.dv_h);
    return ok ? 0 : -1;
}

int oracle_backward(const fa2_problem_t *p, const float *q, const float *k, const float *v,
                    const float *d_o, double *dq, double *dk, double *dv)
{
    return backward(p, NULL, q, k, v, d_o, 0, dq, dk, dv, NULL);
}

int oracle_backward_scored(const fa2_problem_t *p, const oracle_score_t *mod, const float *q,
                           const float *k, const float *v, const float *d_o, double *dq,
                           double *dk, double *dv, double *dsinks)
{
    if (dsinks)
        for (int64_t h = 0; h < p->heads_q; ++h)
            dsinks[h] = 0.0;
    return backward(p, mod, q, k, v, d_o, 0, dq, dk, dv, dsinks);
}

int oracle_backward_rounded(const fa2_problem_t *p, const float *q, const float *k,
                            const float *v, const float *d_o, double *dq, double *dk,
                            double *dv)
{
    return backward(p, NULL, q, k, v, d_o, 1, dq, dk, dv, NULL);
}

int oracle_backward_scored_rounded(const fa2_problem_t *p, const oracle_score_t *mod,
                                   const float *q, const float *k, const float *v,
                                   const float *d_o, double *dq, double *dk, double *dv,
                                   double *dsinks)
{
    if (dsinks)
        for (int64_t h = 0; h < p->heads_q; ++h)
            dsinks[h] = 0.0;
    return backward(p, mod, q, k, v, d_o, 1, dq, dk, dv, dsinks);
}

double oracle_dsink_row_rounding(fa2_dtype_t dtype, int64_t head_dim, const float *d_o,
                                 const uint16_t *o_bits, double p_sink)
{
    const int bf16 = dtype == FA2_DTYPE_BF16;
    const double unit = bf16 ? 0x1p-8 : 0x1p-11, tiny = bf16 ? 0x1p-133 : 0x1p-24;
    double moved = 0.0;
    for (int64_t c = 0; c < head_dim; ++c)
        moved += fabs((double)d_o[c]) *
                 (unit * fabs((double)oracle_float_from_bits(o_bits[c], dtype)) + tiny / 2);
    return p_sink * moved;
}
