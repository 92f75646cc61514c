/* The oracles' score variants (oracle_score.h: softcap, ALiBi, sinks) checked three
 * ways: limits where a variant does nothing (a huge cap, zero slopes, sinks of -inf)
 * or everything (a huge sink); one row worked out here from the formulas; and the
 * backward (dQ, dK, dV and the sink gradient) against central finite differences of
 * the forward, every variant on, on causal, windowed and GQA problems.
 *
 * The seed is printed; FA2_TEST_SEED=<seed> replays a run. */
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
#include "oracle_score.h"

/* Central differences as test_oracle_backward: step 2^-20 on inputs that are
 * multiples of 2^-12, so every perturbation is exact in float. */
#define FD_STEP 0x1p-20
#define FD_TOL 1e-6

static uint64_t g_seed;

static double *doubles(int64_t n)
{
    double *x = calloc((size_t)(n > 0 ? n : 1), sizeof(double));
    assert_non_null(x);
    return x;
}

/* n floats, nonzero multiples of 2^-12 in [-1, 1]. */
static float *grid_floats(oracle_rng_t *rng, int64_t n)
{
    float *x = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    assert_non_null(x);
    for (int64_t t = 0; t < n; ++t) {
        const int64_t v = (int64_t)(oracle_rng_next(rng) >> 51) - 4096;
        x[t] = (float)(v == 0 ? 1 : v) * 0x1p-12f;
    }
    return x;
}

typedef struct inputs_t {
    float *q, *k, *v, *d_o, *slopes, *sinks;
} inputs_t;

static inputs_t make_inputs(const fa2_problem_t *p, oracle_rng_t *rng)
{
    inputs_t in;
    const int64_t nq = p->batch * p->seqlen_q * p->heads_q * p->head_dim;
    const int64_t nk = p->batch * p->seqlen_k * p->heads_kv * p->head_dim;
    in.q = grid_floats(rng, nq);
    in.k = grid_floats(rng, nk);
    in.v = grid_floats(rng, nk);
    in.d_o = grid_floats(rng, nq);
    in.slopes = grid_floats(rng, p->heads_q);
    in.sinks = grid_floats(rng, p->heads_q);
    for (int64_t h = 0; h < p->heads_q; ++h) {
        in.slopes[h] = fabsf(in.slopes[h]) * 0.5f; /* ALiBi slopes are positive */
        in.sinks[h] *= 2.0f;
    }
    return in;
}

static void free_inputs(inputs_t *in)
{
    free(in->q), free(in->k), free(in->v), free(in->d_o), free(in->slopes), free(in->sinks);
}

/* A contiguous BSHD problem. */
static fa2_problem_t problem(int64_t b, int64_t sq, int64_t sk, int64_t hq, int64_t hkv,
                             int64_t d, int causal, int64_t left)
{
    fa2_problem_t p;
    fa2_problem_init(&p, FA2_DTYPE_BF16, b, sq, sk, hq, hkv, d);
    p.causal = causal;
    p.window_left = left;
    return p;
}

/* ---- limits ---------------------------------------------------------------------- */

static void test_limits(void **state)
{
    (void)state;
    const fa2_problem_t p = problem(2, 5, 7, 4, 2, 16, 1, -1);
    oracle_rng_t rng = oracle_rng(g_seed ^ 0x9E3779B97F4A7C15ull);
    inputs_t in = make_inputs(&p, &rng);
    const int64_t n = p.batch * p.seqlen_q * p.heads_q * p.head_dim,
                  nl = p.batch * p.heads_q * p.seqlen_q;
    double *o = doubles(n), *lse = doubles(nl), *o2 = doubles(n), *lse2 = doubles(nl);
    assert_int_equal(oracle_forward(&p, in.q, in.k, in.v, o, lse), 0);

    /* softcap 1e7: tanh(x / cap) * cap = x to ~1e-15 relative */
    oracle_score_t mod = {1e7, NULL, NULL};
    assert_int_equal(oracle_forward_scored(&p, &mod, in.q, in.k, in.v, o2, lse2), 0);
    const double cap_err = oracle_rel_l2(o2, o, (size_t)n);
    assert_true(cap_err < 1e-12);

    /* zero slopes and sinks of -inf: the plain result, bit for bit */
    float zeros[4] = {0}, none[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
    mod = (oracle_score_t){0.0, zeros, none};
    assert_int_equal(oracle_forward_scored(&p, &mod, in.q, in.k, in.v, o2, lse2), 0);
    assert_memory_equal(o2, o, sizeof(double) * (size_t)n);
    assert_memory_equal(lse2, lse, sizeof(double) * (size_t)nl);

    /* sinks of 60: each row's softmax is the sink's, O ~ 0 and LSE ~ 60 */
    float big[4] = {60.f, 60.f, 60.f, 60.f};
    mod = (oracle_score_t){0.0, NULL, big};
    assert_int_equal(oracle_forward_scored(&p, &mod, in.q, in.k, in.v, o2, lse2), 0);
    double o_max = 0.0, lse_err = 0.0;
    for (int64_t t = 0; t < n; ++t)
        o_max = fmax(o_max, fabs(o2[t]));
    for (int64_t t = 0; t < nl; ++t)
        lse_err = fmax(lse_err, fabs(lse2[t] - 60.0));
    printf("limits: softcap 1e7 %.1e; zero slopes and -inf sinks bit-identical; sink 60: "
           "max |O| %.1e, LSE - 60 %.1e\n", cap_err, o_max, lse_err);
    assert_true(o_max < 1e-20 && lse_err < 1e-20);

    /* a row that sees nothing (seqlen_q > seqlen_k, causal: row 0) keeps O = 0 and its
     * LSE is the sink */
    const fa2_problem_t p2 = problem(1, 5, 3, 4, 2, 16, 1, -1);
    float sinks[4] = {0.25f, -1.0f, 2.0f, 0.0f};
    mod = (oracle_score_t){0.0, NULL, sinks};
    assert_int_equal(oracle_forward_scored(&p2, &mod, in.q, in.k, in.v, o2, lse2), 0);
    for (int64_t h = 0; h < 4; ++h) {
        assert_true(lse2[h * p2.seqlen_q] == (double)sinks[h]);
        for (int64_t c = 0; c < 16; ++c)
            assert_true(o2[h * 16 + c] == 0.0);
    }
    free(o), free(lse), free(o2), free(lse2);
    free_inputs(&in);
}

/* ---- one row by hand --------------------------------------------------------------- */

/* One query against three keys, d = 8, head 1 of 2 (MHA), no mask: every variant on,
 * the formulas of oracle_score.h written out once more here. */
static void test_one_row(void **state)
{
    (void)state;
    const fa2_problem_t p = problem(1, 1, 3, 2, 2, 8, 0, -1);
    oracle_rng_t rng = oracle_rng(g_seed ^ 0xC2B2AE3D27D4EB4Full);
    inputs_t in = make_inputs(&p, &rng);
    const float slopes[2] = {0.0f, 0.75f}, sinks[2] = {0.0f, 0.5f};
    const oracle_score_t mod = {2.0, slopes, sinks};
    double o[16], lse[2];
    assert_int_equal(oracle_forward_scored(&p, &mod, in.q, in.k, in.v, o, lse), 0);

    const int64_t h = 1, d = 8;
    const double scale = 1.0 / sqrt(8.0);
    double s[3], w[3], total = exp(0.5), want[8] = {0};
    for (int64_t j = 0; j < 3; ++j) {
        double x = 0.0;
        for (int64_t c = 0; c < d; ++c)
            x += (double)in.q[h * d + c] * (double)in.k[(j * 2 + h) * d + c];
        x *= scale;
        s[j] = 2.0 * tanh(x / 2.0) - 0.75 * (double)(2 - j); /* distance |0 + 3 - 1 - j| */
        w[j] = exp(s[j]);
        total += w[j];
    }
    for (int64_t j = 0; j < 3; ++j)
        for (int64_t c = 0; c < d; ++c)
            want[c] += w[j] / total * (double)in.v[(j * 2 + h) * d + c];
    double err = fabs(lse[1] - log(total));
    for (int64_t c = 0; c < d; ++c)
        err = fmax(err, fabs(o[h * d + c] - want[c]));
    printf("one row by hand: max abs difference %.1e\n", err);
    assert_true(err < 1e-14);
    free_inputs(&in);
}

/* ---- backward against finite differences --------------------------------------------- */

/* L = Σ O ∘ dO, O from the forward oracle with the variants. */
static double loss(const fa2_problem_t *p, const oracle_score_t *mod, const inputs_t *in,
                   double *o)
{
    assert_int_equal(oracle_forward_scored(p, mod, in->q, in->k, in->v, o, NULL), 0);
    const int64_t n = p->batch * p->seqlen_q * p->heads_q * p->head_dim;
    double l = 0.0;
    for (int64_t t = 0; t < n; ++t)
        l += o[t] * (double)in->d_o[t];
    return l;
}

/* dL/dx by central differences for each of the n floats at x. */
static void finite_differences(const fa2_problem_t *p, const oracle_score_t *mod,
                               const inputs_t *in, float *x, int64_t n, double *grad)
{
    double *o = doubles(p->batch * p->seqlen_q * p->heads_q * p->head_dim);
    for (int64_t t = 0; t < n; ++t) {
        const float saved = x[t];
        x[t] = (float)((double)saved + FD_STEP);
        assert_true((double)x[t] == (double)saved + FD_STEP); /* exact step */
        const double up = loss(p, mod, in, o);
        x[t] = (float)((double)saved - FD_STEP);
        assert_true((double)x[t] == (double)saved - FD_STEP);
        const double down = loss(p, mod, in, o);
        x[t] = saved;
        grad[t] = (up - down) / (2.0 * FD_STEP);
    }
    free(o);
}

static double max_abs(const double *x, int64_t n)
{
    double m = 0.0;
    for (int64_t t = 0; t < n; ++t)
        m = fmax(m, fabs(x[t]));
    return m;
}

typedef struct fd_case_t {
    int64_t b, sq, sk, hq, hkv, d;
    int causal;
    int64_t left;
    double softcap;
} fd_case_t;

static const fd_case_t fd_cases[] = {
    {1, 4, 6, 2, 1, 8, 1, -1, 1.5},   /* causal, GQA, a small cap (tanh bends) */
    {1, 5, 4, 2, 2, 8, 1, -1, 30.0},  /* causal, q > k: row 0 sees nothing */
    {2, 3, 7, 4, 2, 8, 0, 2, 0.5},    /* left window, batch 2 */
};

static void test_backward_matches_finite_differences(void **state)
{
    (void)state;
    long failed = 0;
    for (size_t ci = 0; ci < sizeof fd_cases / sizeof fd_cases[0]; ++ci) {
        const fd_case_t *c = &fd_cases[ci];
        const fa2_problem_t p = problem(c->b, c->sq, c->sk, c->hq, c->hkv, c->d, c->causal,
                                        c->left);
        oracle_rng_t rng = oracle_rng(g_seed ^ (0xD1B54A32D192ED03ull * (ci + 1)));
        inputs_t in = make_inputs(&p, &rng);
        const oracle_score_t mod = {c->softcap, in.slopes, in.sinks};
        const int64_t nq = p.batch * p.seqlen_q * p.heads_q * p.head_dim,
                      nk = p.batch * p.seqlen_k * p.heads_kv * p.head_dim, nh = p.heads_q;
        double *dq = doubles(nq), *dk = doubles(nk), *dv = doubles(nk), *ds = doubles(nh);
        double *fq = doubles(nq), *fk = doubles(nk), *fv = doubles(nk), *fs = doubles(nh);
        assert_int_equal(
            oracle_backward_scored(&p, &mod, in.q, in.k, in.v, in.d_o, dq, dk, dv, ds), 0);
        finite_differences(&p, &mod, &in, in.q, nq, fq);
        finite_differences(&p, &mod, &in, in.k, nk, fk);
        finite_differences(&p, &mod, &in, in.v, nk, fv);
        finite_differences(&p, &mod, &in, in.sinks, nh, fs);
        const double eq = oracle_rel_l2(dq, fq, (size_t)nq), ek = oracle_rel_l2(dk, fk, (size_t)nk),
                     ev = oracle_rel_l2(dv, fv, (size_t)nk), es = oracle_rel_l2(ds, fs, (size_t)nh);
        /* worth checking: no gradient all (near) zero */
        const int nontrivial = max_abs(fq, nq) > 1e-3 && max_abs(fk, nk) > 1e-3 &&
                               max_abs(fv, nk) > 1e-3 && max_abs(fs, nh) > 1e-3;
        const int pass = eq < FD_TOL && ek < FD_TOL && ev < FD_TOL && es < FD_TOL && nontrivial;
        printf("fd %zu: b=%" PRId64 " q=%" PRId64 " k=%" PRId64 " hq=%" PRId64 " hkv=%" PRId64
               " causal=%d left=%" PRId64 " softcap=%g : rel L2 dQ %.1e dK %.1e dV %.1e "
               "dsink %.1e %s\n",
               ci, c->b, c->sq, c->sk, c->hq, c->hkv, c->causal, c->left, c->softcap, eq, ek, ev,
               es, pass ? "PASS" : "FAIL");
        failed += !pass;
        free(dq), free(dk), free(dv), free(ds), free(fq), free(fk), free(fv), free(fs);
        free_inputs(&in);
    }
    assert_int_equal(failed, 0);
}

int main(void)
{
    const char *s = getenv("FA2_TEST_SEED");
    g_seed = s && *s ? strtoull(s, NULL, 0) : (uint64_t)time(NULL);
    printf("seed %" PRIu64 " (replay: FA2_TEST_SEED=%" PRIu64 ")\n", g_seed, g_seed);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_one_row),
        cmocka_unit_test(test_backward_matches_finite_differences),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
