/* The backward oracle checked against central finite differences of the forward
 * oracle; the same-precision backward checked for being a sane yardstick; the tiled
 * FlashAttention-2 backward (fp32, CPU) checked against the oracle with the tiles
 * fa2_plan picks for an H200 and with odd tiny ones that put block edges everywhere.
 *
 * The seed is printed; FA2_TEST_SEED=<seed> replays a run. Each case prints a line. */
#include <inttypes.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "fa2.h"
#include "oracle.h"
#include "oracle_backward.h"
#include "tiled_cpu.h"
#include "tiled_cpu_backward.h"

#if defined(FA2_WITH_SM90A)
#define FA2_SM90A_BUILD 1
#else
#define FA2_SM90A_BUILD 0
#endif

/* Central differences with step 2^-20 (about 1e-6) on inputs that are multiples of
 * 2^-12 in [-1, 1]: x ± h is then exact in float, so the perturbation the forward
 * oracle sees is exactly ±h. Truncation error ~h² and rounding error ~1e-16/h are both
 * far below the tolerance. */
#define FD_STEP 0x1p-20
#define FD_TOL 1e-6     /* rel L2 of each gradient: finite differences against the oracle */
#define TILED_TOL 1e-5  /* rel L2 of each gradient: fp32 tiled against double */

static uint64_t g_seed;

static fa2_device_info_t h200_info(void)
{
    fa2_device_info_t info = {sizeof(fa2_device_info_t), 9, 0, 132, 0, 232448, 233472};
    return info;
}

static double *doubles(int64_t n)
{
    double *x = calloc((size_t)(n > 0 ? n : 1), sizeof(double));
    assert_non_null(x);
    return x;
}

static float *floats(int64_t n)
{
    float *x = calloc((size_t)(n > 0 ? n : 1), sizeof(float));
    assert_non_null(x);
    return x;
}

/* A tensor of the problem with the given strides, filled: holes NaN, elements from
 * `draw`. */
typedef float (*draw_fn)(oracle_rng_t *rng, fa2_dtype_t dtype);

static float draw_grid(oracle_rng_t *rng, fa2_dtype_t dtype)
{
    (void)dtype;
    /* a nonzero multiple of 2^-12 in [-1, 1] */
    int64_t n = (int64_t)(oracle_rng_next(rng) >> 51) - 4096; /* [-4096, 4096) */
    return (float)(n == 0 ? 1 : n) * 0x1p-12f;
}

static float draw_dtype(oracle_rng_t *rng, fa2_dtype_t dtype)
{
    float x;
    do
        x = oracle_round(oracle_rng_uniform(rng, -1.0f, 1.0f), dtype);
    while (x == 0.0f);
    return x;
}

static float *strided_tensor(oracle_rng_t *rng, fa2_dtype_t dtype, draw_fn draw,
                             int64_t batch, int64_t seq, int64_t heads, int64_t d, int64_t bs,
                             int64_t ss, int64_t hs, int64_t *span)
{
    const int64_t n = oracle_span(batch, seq, heads, d, bs, ss, hs);
    float *t = floats(n);
    for (int64_t x = 0; x < n; ++x)
        t[x] = NAN;
    for (int64_t b = 0; b < batch; ++b)
        for (int64_t s = 0; s < seq; ++s)
            for (int64_t h = 0; h < heads; ++h)
                for (int64_t x = 0; x < d; ++x)
                    t[b * bs + s * ss + h * hs + x] = draw(rng, dtype);
    if (span)
        *span = n;
    return t;
}

typedef struct inputs_t {
    float *q, *k, *v, *d_o;
} inputs_t;

static inputs_t make_inputs(const fa2_problem_t *p, oracle_rng_t *rng, draw_fn draw)
{
    inputs_t in;
    in.q = strided_tensor(rng, p->dtype, draw, p->batch, p->seqlen_q, p->heads_q, p->head_dim,
                          p->q_batch_stride, p->q_seq_stride, p->q_head_stride, NULL);
    in.k = strided_tensor(rng, p->dtype, draw, p->batch, p->seqlen_k, p->heads_kv,
                          p->head_dim, p->k_batch_stride, p->k_seq_stride, p->k_head_stride,
                          NULL);
    in.v = strided_tensor(rng, p->dtype, draw, p->batch, p->seqlen_k, p->heads_kv,
                          p->head_dim, p->v_batch_stride, p->v_seq_stride, p->v_head_stride,
                          NULL);
    in.d_o = strided_tensor(rng, p->dtype, draw, p->batch, p->seqlen_q, p->heads_q,
                            p->head_dim, p->o_batch_stride, p->o_seq_stride, p->o_head_stride,
                            NULL);
    return in;
}

static void free_inputs(inputs_t *in)
{
    free(in->q), free(in->k), free(in->v), free(in->d_o);
}

static void set_bhsd(fa2_problem_t *p)
{
    const int64_t d = p->head_dim;
    p->q_seq_stride = d, p->q_head_stride = p->seqlen_q * d;
    p->q_batch_stride = p->heads_q * p->seqlen_q * d;
    p->k_seq_stride = d, p->k_head_stride = p->seqlen_k * d;
    p->k_batch_stride = p->heads_kv * p->seqlen_k * d;
    p->v_seq_stride = d, p->v_head_stride = p->seqlen_k * d;
    p->v_batch_stride = p->heads_kv * p->seqlen_k * d;
    /* O and dO stay contiguous BSHD, the layout the oracle writes O in */
}

typedef struct bwd_case_t {
    int64_t batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim;
    int32_t causal;
    int64_t window_left, window_right;
    float softmax_scale;
    int bhsd;
    int64_t block_n, block_m; /* tiled test: 0 takes them from fa2_plan */
} bwd_case_t;

static fa2_problem_t problem_of(const bwd_case_t *c, fa2_dtype_t dtype)
{
    fa2_problem_t p;
    fa2_problem_init(&p, dtype, c->batch, c->seqlen_q, c->seqlen_k, c->heads_q, c->heads_kv,
                     c->head_dim);
    p.causal = c->causal;
    p.window_left = c->window_left;
    p.window_right = c->window_right;
    p.softmax_scale = c->softmax_scale;
    if (c->bhsd)
        set_bhsd(&p);
    return p;
}

static void print_case(const char *what, long index, const bwd_case_t *c)
{
    printf("%s %ld: b=%" PRId64 " q=%" PRId64 " k=%" PRId64 " hq=%" PRId64 " hkv=%" PRId64
           " d=%" PRId64 " causal=%d wl=%" PRId64 " wr=%" PRId64 " scale=%g%s",
           what, index, c->batch, c->seqlen_q, c->seqlen_k, c->heads_q, c->heads_kv,
           c->head_dim, c->causal, c->window_left, c->window_right, (double)c->softmax_scale,
           c->bhsd ? " bhsd" : "");
}

static double norm2(const double *x, int64_t n)
{
    double s = 0.0;
    for (int64_t t = 0; t < n; ++t)
        s += x[t] * x[t];
    return sqrt(s);
}

/* ---- finite differences ------------------------------------------------------------ */

/* L = Σ O ∘ G, O from the forward oracle (contiguous BSHD, as G). */
static double loss(const fa2_problem_t *p, const inputs_t *in, const float *g, double *o)
{
    assert_int_equal(oracle_forward(p, in->q, in->k, in->v, o, NULL), 0);
    const int64_t n = p->batch * p->seqlen_q * p->heads_q * p->head_dim;
    double l = 0.0;
    for (int64_t t = 0; t < n; ++t)
        l += o[t] * (double)g[t];
    return l;
}

/* dL/dx by central differences for every element of tensor `x` (strides given),
 * written contiguous [batch, seq, heads, d]. */
static void finite_differences(const fa2_problem_t *p, inputs_t *in, float *x, int64_t seq,
                               int64_t heads, int64_t bs, int64_t ss, int64_t hs, double *grad)
{
    const int64_t d = p->head_dim;
    double *o = doubles(p->batch * p->seqlen_q * p->heads_q * d);
    int64_t t = 0;
    for (int64_t b = 0; b < p->batch; ++b)
        for (int64_t s = 0; s < seq; ++s)
            for (int64_t h = 0; h < heads; ++h)
                for (int64_t c = 0; c < d; ++c, ++t) {
                    float *e = x + b * bs + s * ss + h * hs + c;
                    const float saved = *e;
                    *e = (float)((double)saved + FD_STEP);
                    assert_true((double)*e == (double)saved + FD_STEP); /* exact step */
                    const double up = loss(p, in, in->d_o, o);
                    *e = (float)((double)saved - FD_STEP);
                    assert_true((double)*e == (double)saved - FD_STEP);
                    const double down = loss(p, in, in->d_o, o);
                    *e = saved;
                    grad[t] = (up - down) / (2.0 * FD_STEP);
                }
    free(o);
}

/* b, q, k, hq, hkv, d, causal, left, right, scale, bhsd */
static const bwd_case_t fd_cases[] = {
    {1, 4, 5, 2, 1, 8, 1, -1, -1, 0.0f, 0, 0, 0},   /* causal, q < k, GQA */
    {1, 5, 4, 2, 1, 8, 1, -1, -1, 0.0f, 0, 0, 0},   /* causal, q > k: row 0 sees nothing */
    {1, 3, 6, 2, 1, 8, 0, 2, 1, 0.0f, 0, 0, 0},     /* window left and right */
    {1, 5, 6, 2, 2, 8, 0, -1, -1, 0.7f, 1, 0, 0},   /* no mask, custom scale, BHSD */
    {2, 4, 4, 2, 1, 8, 1, 1, -1, 0.0f, 0, 0, 0},    /* causal + left window, batch 2 */
    {1, 5, 5, 4, 2, 8, 0, -1, 2, 0.0f, 1, 0, 0},    /* right window only, GQA, BHSD */
    {1, 3, 5, 2, 1, 16, 1, -1, -1, 2.0f, 0, 0, 0},  /* peaky rows (scale 2) */
    {1, 4, 6, 2, 1, 8, 0, 0, -1, 0.0f, 0, 0, 0},    /* left window 0, right unbounded */
};

static void test_oracle_matches_finite_differences(void **state)
{
    (void)state;
    long failed = 0;
    for (size_t ci = 0; ci < sizeof fd_cases / sizeof fd_cases[0]; ++ci) {
        const bwd_case_t *c = &fd_cases[ci];
        fa2_problem_t p = problem_of(c, FA2_DTYPE_BF16);
        oracle_rng_t rng = oracle_rng(g_seed ^ (0xD1B54A32D192ED03ull * (ci + 1)));
        inputs_t in = make_inputs(&p, &rng, draw_grid); /* dO = G: the loss's weights */
        const int64_t d = p.head_dim;
        const int64_t nq = p.batch * p.seqlen_q * p.heads_q * d;
        const int64_t nk = p.batch * p.seqlen_k * p.heads_kv * d;
        double *dq = doubles(nq), *dk = doubles(nk), *dv = doubles(nk);
        double *fq = doubles(nq), *fk = doubles(nk), *fv = doubles(nk);
        assert_int_equal(oracle_backward(&p, in.q, in.k, in.v, in.d_o, dq, dk, dv), 0);
        finite_differences(&p, &in, in.q, p.seqlen_q, p.heads_q, p.q_batch_stride,
                           p.q_seq_stride, p.q_head_stride, fq);
        finite_differences(&p, &in, in.k, p.seqlen_k, p.heads_kv, p.k_batch_stride,
                           p.k_seq_stride, p.k_head_stride, fk);
        finite_differences(&p, &in, in.v, p.seqlen_k, p.heads_kv, p.v_batch_stride,
                           p.v_seq_stride, p.v_head_stride, fv);
        const double eq = oracle_rel_l2(dq, fq, (size_t)nq);
        const double ek = oracle_rel_l2(dk, fk, (size_t)nk);
        const double ev = oracle_rel_l2(dv, fv, (size_t)nk);
        /* the gradients must be worth checking: not all zero */
        const int nontrivial = norm2(fq, nq) > 1e-3 && norm2(fk, nk) > 1e-3 &&
                               norm2(fv, nk) > 1e-3;
        const int pass = eq < FD_TOL && ek < FD_TOL && ev < FD_TOL && nontrivial;
        print_case("fd", (long)ci, c);
        printf(" : rel L2 dQ %.2e dK %.2e dV %.2e (|dQ| %.3g |dK| %.3g |dV| %.3g) %s\n", eq,
               ek, ev, norm2(fq, nq), norm2(fk, nk), norm2(fv, nk), pass ? "PASS" : "FAIL");
        failed += !pass;
        free(dq), free(dk), free(dv), free(fq), free(fk), free(fv);
        free_inputs(&in);
    }
    assert_int_equal(failed, 0);
}

/* ---- hand-checkable -------------------------------------------------------------- */

/* One key: P = 1 on every row, so dS = dP − D = dO·v − dO·v = 0: dQ = dK = 0, and
 * dV = Σ of dO over every row of every query head of the group. */
static void test_single_key(void **state)
{
    (void)state;
    fa2_problem_t p;
    fa2_problem_init(&p, FA2_DTYPE_FP16, 2, 5, 1, 4, 2, 16);
    oracle_rng_t rng = oracle_rng(g_seed + 7);
    inputs_t in = make_inputs(&p, &rng, draw_grid);
    double *dq = doubles(2 * 5 * 4 * 16), *dk = doubles(2 * 2 * 16), *dv = doubles(2 * 2 * 16);
    assert_int_equal(oracle_backward(&p, in.q, in.k, in.v, in.d_o, dq, dk, dv), 0);
    for (int64_t t = 0; t < 2 * 5 * 4 * 16; ++t)
        assert_true(fabs(dq[t]) < 1e-14);
    for (int64_t b = 0; b < 2; ++b)
        for (int64_t hk = 0; hk < 2; ++hk)
            for (int64_t x = 0; x < 16; ++x) {
                double want = 0.0;
                for (int64_t h = 2 * hk; h < 2 * hk + 2; ++h)
                    for (int64_t i = 0; i < 5; ++i)
                        want += in.d_o[((b * 5 + i) * 4 + h) * 16 + x];
                assert_true(fabs(dk[(b * 2 + hk) * 16 + x]) < 1e-14);
                assert_float_equal(dv[(b * 2 + hk) * 16 + x], want, 1e-14);
            }
    free(dq), free(dk), free(dv);
    free_inputs(&in);
}

/* Whether element t of a contiguous [b, sq, hq, d] dQ belongs to a query that sees
 * some key. */
static int query_sees_keys(const fa2_problem_t *p, int64_t t)
{
    int64_t lo, hi;
    const int64_t i = t / (p->heads_q * p->head_dim) % p->seqlen_q;
    return oracle_key_range(p, i, &lo, &hi);
}

/* Whether element t of a contiguous [b, sk, hkv, d] dK/dV belongs to a key some query
 * sees. */
static int key_is_seen(const fa2_problem_t *p, int64_t t)
{
    int64_t lo, hi;
    const int64_t j = t / (p->heads_kv * p->head_dim) % p->seqlen_k;
    for (int64_t i = 0; i < p->seqlen_q; ++i)
        if (oracle_key_range(p, i, &lo, &hi) && j >= lo && j <= hi)
            return 1;
    return 0;
}

/* Rows that see no key and keys no row sees get exactly zero gradients; seqlen_k = 0
 * gives dQ = 0. */
static void test_masked_rows_and_keys_are_zero(void **state)
{
    (void)state;
    fa2_problem_t p;
    /* causal, q 6 > k 4: rows 0, 1 see nothing (and row 2 sees key 0 alone, so its
     * P is 1 and its dS 0: dQ is 0 there too, by the math, not by the mask) */
    fa2_problem_init(&p, FA2_DTYPE_BF16, 1, 6, 4, 2, 1, 8);
    p.causal = 1;
    oracle_rng_t rng = oracle_rng(g_seed + 8);
    inputs_t in = make_inputs(&p, &rng, draw_grid);
    double *dq = doubles(6 * 2 * 8), *dk = doubles(4 * 8), *dv = doubles(4 * 8);
    assert_int_equal(oracle_backward(&p, in.q, in.k, in.v, in.d_o, dq, dk, dv), 0);
    for (int64_t i = 0; i < 6; ++i)
        for (int64_t t = 0; t < 2 * 8; ++t)
            assert_true((dq[i * 16 + t] == 0.0) == (i < 3));
    free_inputs(&in);
    free(dq), free(dk), free(dv);

    /* window 0 both sides, q 3 < k 6: row i sees key i + 3 alone; keys 0..2 unseen */
    fa2_problem_init(&p, FA2_DTYPE_BF16, 1, 3, 6, 2, 2, 8);
    p.window_left = 0;
    p.window_right = 0;
    in = make_inputs(&p, &rng, draw_grid);
    dq = doubles(3 * 2 * 8), dk = doubles(6 * 2 * 8), dv = doubles(6 * 2 * 8);
    assert_int_equal(oracle_backward(&p, in.q, in.k, in.v, in.d_o, dq, dk, dv), 0);
    for (int64_t j = 0; j < 6; ++j)
        for (int64_t t = 0; t < 2 * 8; ++t) {
            /* diagonal only: each row's P is 1 on one key, so dS = 0 everywhere */
            assert_true(dk[j * 16 + t] == 0.0);
            assert_true((dv[j * 16 + t] == 0.0) == (j < 3));
        }
    for (int64_t t = 0; t < 3 * 2 * 8; ++t)
        assert_true(dq[t] == 0.0);
    free_inputs(&in);
    free(dq), free(dk), free(dv);

    fa2_problem_init(&p, FA2_DTYPE_FP16, 1, 3, 0, 1, 1, 8);
    in = make_inputs(&p, &rng, draw_grid);
    dq = doubles(3 * 8), dk = doubles(1), dv = doubles(1);
    for (int64_t t = 0; t < 3 * 8; ++t)
        dq[t] = NAN;
    assert_int_equal(oracle_backward(&p, in.q, in.k, in.v, in.d_o, dq, dk, dv), 0);
    for (int64_t t = 0; t < 3 * 8; ++t)
        assert_true(dq[t] == 0.0);
    free_inputs(&in);
    free(dq), free(dk), free(dv);
}

/* The same-precision backward is a sane yardstick: off the oracle by about the
 * dtype's rounding (fp16 2^-11, bf16 2^-8), neither zero nor far more. */
static void test_rounded_reference_error(void **state)
{
    (void)state;
    const fa2_dtype_t dts[2] = {FA2_DTYPE_FP16, FA2_DTYPE_BF16};
    const double lo[2] = {1e-5, 1e-4}, hi[2] = {5e-3, 4e-2};
    for (int t = 0; t < 2; ++t) {
        fa2_problem_t p;
        fa2_problem_init(&p, dts[t], 1, 120, 150, 4, 2, 64);
        p.causal = 1;
        oracle_rng_t rng = oracle_rng(g_seed + 9 + (uint64_t)t);
        inputs_t in = make_inputs(&p, &rng, draw_dtype);
        const int64_t nq = 120 * 4 * 64, nk = 150 * 2 * 64;
        double *dq = doubles(nq), *dk = doubles(nk), *dv = doubles(nk);
        double *rq = doubles(nq), *rk = doubles(nk), *rv = doubles(nk);
        assert_int_equal(oracle_backward(&p, in.q, in.k, in.v, in.d_o, dq, dk, dv), 0);
        assert_int_equal(oracle_backward_rounded(&p, in.q, in.k, in.v, in.d_o, rq, rk, rv), 0);
        const double e[3] = {oracle_rel_l2(rq, dq, (size_t)nq), oracle_rel_l2(rk, dk, (size_t)nk),
                             oracle_rel_l2(rv, dv, (size_t)nk)};
        printf("same-precision backward, %s: rel L2 dQ %.2e dK %.2e dV %.2e (want %.0e..%.0e)\n",
               t ? "bf16" : "fp16", e[0], e[1], e[2], lo[t], hi[t]);
        for (int g = 0; g < 3; ++g)
            assert_true(e[g] > lo[t] && e[g] < hi[t]);
        free(dq), free(dk), free(dv), free(rq), free(rk), free(rv);
        free_inputs(&in);
    }
}

/* ---- tiled backward against the oracle --------------------------------------------- */

/* b, q, k, hq, hkv, d, causal, left, right, scale, bhsd, block_n, block_m */
static const bwd_case_t tiled_cases[] = {
    {2, 150, 130, 4, 2, 32, 0, -1, -1, 0.0f, 0, 0, 0},
    {1, 130, 150, 4, 2, 40, 1, -1, -1, 0.0f, 0, 0, 0},
    {1, 200, 200, 2, 2, 64, 1, -1, -1, 0.0f, 1, 0, 0},
    {1, 100, 300, 4, 1, 96, 0, 50, 20, 0.0f, 0, 0, 0},
    {1, 300, 100, 2, 1, 128, 1, -1, -1, 0.0f, 0, 0, 0}, /* 200 rows see nothing */
    {1, 97, 161, 2, 2, 136, 0, -1, 0, 0.5f, 0, 0, 0},
    {1, 120, 120, 2, 1, 192, 1, 40, -1, 0.0f, 0, 0, 0},
    {1, 70, 90, 2, 2, 200, 0, -1, -1, 0.0f, 1, 0, 0},
    {1, 90, 70, 2, 1, 256, 0, 10, 10, 0.0f, 0, 0, 0},
    {1, 1, 1, 2, 1, 64, 0, -1, -1, 0.0f, 0, 0, 0},
    {1, 1, 170, 2, 1, 128, 1, -1, -1, 0.0f, 0, 0, 0},
    {1, 170, 1, 2, 1, 128, 1, -1, -1, 0.0f, 0, 0, 0},
    /* tiny odd tiles: block edges everywhere */
    {2, 37, 41, 4, 2, 16, 1, -1, -1, 0.0f, 0, 3, 5},
    {1, 41, 37, 2, 1, 24, 0, 6, 3, 0.0f, 1, 7, 2},
    {1, 33, 33, 3, 1, 8, 0, 0, 0, 0.0f, 0, 1, 1},
    {1, 25, 50, 2, 2, 8, 1, 4, -1, 1.5f, 0, 16, 16},
};

static void test_tiled_matches_oracle(void **state)
{
    (void)state;
    const fa2_device_info_t info = h200_info();
    long failed = 0;
    for (size_t ci = 0; ci < sizeof tiled_cases / sizeof tiled_cases[0]; ++ci) {
        const bwd_case_t *c = &tiled_cases[ci];
        const fa2_dtype_t dtype = ci % 2 ? FA2_DTYPE_FP16 : FA2_DTYPE_BF16;
        fa2_problem_t p = problem_of(c, dtype);
        fa2_plan_t plan;
        int64_t bn = c->block_n, bm = c->block_m, fwd_m = 16, fwd_n = 16;
        if (bn == 0) {
            const fa2_status_t st = fa2_plan(&p, &info, &plan);
            if (st != FA2_SUCCESS)
                fail_msg("fa2_plan: %s (%s)", fa2_status_string(st), fa2_last_error());
            assert_true(plan.bwd_supported);
            bn = plan.bwd_block_n, bm = plan.bwd_block_m;
            fwd_m = plan.block_m, fwd_n = plan.block_n;
        }
        oracle_rng_t rng = oracle_rng(g_seed ^ (0x9E3779B97F4A7C15ull * (ci + 101)));
        inputs_t in = make_inputs(&p, &rng, draw_dtype);
        const int64_t d = p.head_dim;
        const int64_t nq = p.batch * p.seqlen_q * p.heads_q * d;
        const int64_t nk = p.batch * p.seqlen_k * p.heads_kv * d;
        /* the forward the algorithm runs after: tiled fp32 O (contiguous BSHD, which is
         * the layout of O and dO here) and LSE */
        float *o = floats(nq), *lse = floats(p.batch * p.heads_q * p.seqlen_q);
        assert_int_equal(tiled_cpu_forward(&p, fwd_m, fwd_n, in.q, in.k, in.v, o, lse), 0);
        float *tq = floats(nq), *tk = floats(nk), *tv = floats(nk);
        for (int64_t t = 0; t < nk; ++t)
            tk[t] = tv[t] = NAN; /* every element must be written */
        assert_int_equal(tiled_cpu_backward(&p, bn, bm, in.q, in.k, in.v, o, in.d_o, lse, tq,
                                            tk, tv), 0);
        double *dq = doubles(nq), *dk = doubles(nk), *dv = doubles(nk);
        double *gq = doubles(nq), *gk = doubles(nk), *gv = doubles(nk);
        assert_int_equal(oracle_backward(&p, in.q, in.k, in.v, in.d_o, dq, dk, dv), 0);
        /* Structural zeros must be exact: dQ rows of queries that see no key, dK/dV
         * rows of keys no query sees. Elsewhere a value may round to 0 in one
         * precision and not the other, so only the L2 error is compared. */
        int64_t zero_mismatch = 0;
        for (int64_t t = 0; t < nq; ++t) {
            gq[t] = tq[t];
            zero_mismatch += !query_sees_keys(&p, t) && tq[t] != 0.0f;
        }
        for (int64_t t = 0; t < nk; ++t) {
            gk[t] = tk[t], gv[t] = tv[t];
            zero_mismatch += !key_is_seen(&p, t) && (tk[t] != 0.0f || tv[t] != 0.0f);
        }
        const double eq = oracle_rel_l2(gq, dq, (size_t)nq);
        const double ek = oracle_rel_l2(gk, dk, (size_t)nk);
        const double ev = oracle_rel_l2(gv, dv, (size_t)nk);
        const int pass = eq < TILED_TOL && ek < TILED_TOL && ev < TILED_TOL && zero_mismatch == 0;
        print_case("tiled", (long)ci, c);
        printf(" %s bwd tiles %" PRId64 "x%" PRId64 " : rel L2 dQ %.2e dK %.2e dV %.2e%s %s\n",
               dtype == FA2_DTYPE_BF16 ? "bf16" : "fp16", bn, bm, eq, ek, ev,
               zero_mismatch ? " (zero pattern differs)" : "", pass ? "PASS" : "FAIL");
        failed += !pass;
        free(o), free(lse), free(tq), free(tk), free(tv);
        free(dq), free(dk), free(dv), free(gq), free(gk), free(gv);
        free_inputs(&in);
    }
    assert_int_equal(failed, 0);
}

/* The plan's backward tiles on an H200, per head-dim bucket: what the tiled test runs
 * with; the workspace: D (one float per query row, padded to 256 bytes), then in the
 * default (atomic) mode an fp32 dQ accumulator of head_dim floats per row, except
 * for the Hopper split row (bucket 256 in an sm_90a build: dQ by the Hopper dQ
 * kernel in both modes). */
static void test_plan_backward_fields(void **state)
{
    (void)state;
    const fa2_device_info_t info = h200_info();
    const int64_t dims[] = {8, 32, 40, 64, 72, 96, 128, 136, 192, 200, 256};
    for (size_t t = 0; t < sizeof dims / sizeof dims[0]; ++t) {
        fa2_problem_t p;
        fa2_problem_init(&p, FA2_DTYPE_BF16, 3, 100, 77, 8, 2, dims[t]);
        const int64_t d_bytes = (3 * 8 * 100 * 4 + 255) / 256 * 256;
        for (int det = 0; det < 2; ++det) {
            p.deterministic = det;
            fa2_plan_t plan;
            assert_int_equal(fa2_plan(&p, &info, &plan), FA2_SUCCESS);
            assert_true(plan.bwd_supported == 1);
            assert_true(plan.bwd_block_n >= 16 && plan.bwd_block_n % 16 == 0);
            assert_true(plan.bwd_block_m >= 16 && plan.bwd_block_m % 16 == 0);
            assert_true(plan.bwd_dq_block_m >= 16 && plan.bwd_dq_block_n >= 16);
            assert_true(plan.bwd_smem_bytes > 0 &&
                        plan.bwd_smem_bytes <= info.smem_per_block_optin);
            /* Hopper rows (both modes): buckets 64, 128, 256 (kernels/sm90/bwd_sm90_tiles.h);
             * 256 is split. */
            const int bucket = plan.head_dim_bucket;
            const int hopper = FA2_SM90A_BUILD && (bucket == 64 || bucket == 128 || bucket == 256);
            const int split = hopper && bucket == 256;
            assert_int_equal(plan.bwd_arch == 90, hopper);
            assert_int_equal(plan.bwd_workspace_bytes,
                             det || split ? d_bytes : d_bytes + 3 * 8 * 100 * 4 * dims[t]);
        }
    }
}

/* oracle_dsink_row_rounding: one relative rounding of each |O|, plus half the smallest
 * subnormal per element, weighted by |dO| and P_sink; a row of O stored as 0 (underflow)
 * still gets a bound above 0. */
static void test_dsink_row_rounding(void **state)
{
    (void)state;
    const float d_o[3] = {1.0f, 0.5f, -1.0f};
    const uint16_t bf16_o[3] = {0x0000, 0x3F80, 0xC000}, fp16_o[3] = {0x0000, 0x3C00, 0xC000};
    const uint16_t zeros[3] = {0, 0, 0};
    const double u16 = 0x1p-8, t16 = 0x1p-133, u11 = 0x1p-11, t11 = 0x1p-24;
    assert_true(oracle_dsink_row_rounding(FA2_DTYPE_BF16, 3, d_o, bf16_o, 0.5) ==
                0.5 * (t16 / 2 + 0.5 * (u16 + t16 / 2) + (2 * u16 + t16 / 2)));
    assert_true(oracle_dsink_row_rounding(FA2_DTYPE_FP16, 3, d_o, fp16_o, 0.25) ==
                0.25 * (t11 / 2 + 0.5 * (u11 + t11 / 2) + (2 * u11 + t11 / 2)));
    assert_true(oracle_dsink_row_rounding(FA2_DTYPE_FP16, 3, d_o, zeros, 1.0) ==
                2.5 * t11 / 2);
    assert_true(oracle_dsink_row_rounding(FA2_DTYPE_BF16, 3, d_o, bf16_o, 0.0) == 0.0);
}

int main(void)
{
    const char *s = getenv("FA2_TEST_SEED");
    g_seed = s && *s ? strtoull(s, NULL, 0) : (uint64_t)time(NULL);
    printf("seed %" PRIu64 " (replay: FA2_TEST_SEED=%" PRIu64 ")\n", g_seed, g_seed);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_oracle_matches_finite_differences),
        cmocka_unit_test(test_single_key),
        cmocka_unit_test(test_masked_rows_and_keys_are_zero),
        cmocka_unit_test(test_rounded_reference_error),
        cmocka_unit_test(test_tiled_matches_oracle),
        cmocka_unit_test(test_plan_backward_fields),
        cmocka_unit_test(test_dsink_row_rounding),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
