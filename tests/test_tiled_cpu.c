/* The tiled FlashAttention-2 algorithm (fp32, CPU) against the double oracle over a
 * randomized sweep of shapes and masks, with the tile sizes fa2_plan picks for an
 * H200 and a few odd ones that put block edges everywhere; then with the score
 * variants (softcap, ALiBi, sinks) and key splits.
 *
 * The seed is printed; FA2_TEST_SEED=<seed> replays a run, FA2_TEST_CASE=<n> runs
 * case n alone, FA2_TEST_STRIDE=<n> every n-th case (what valgrind's entry runs: the
 * same code paths at a fraction of the arithmetic). Each case prints one line. */
#include <inttypes.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <cmocka.h>

#include "common/params.h"
#include "fa2.h"
#include "oracle.h"
#include "tiled_cpu.h"

#define O_TOL 1e-5   /* rel L2 of O: fp32 against double */
#define LSE_TOL 1e-5 /* |lse - ref| / max(1, |ref|, softcap) */

static uint64_t g_seed;
static long g_only = -1;
static long g_stride = 1;

typedef struct sweep_case_t {
    int64_t batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim;
    int32_t causal;
    int64_t window_left, window_right;
    float softmax_scale;
    int64_t block_m, block_n; /* 0: take them from fa2_plan */
    int low_rows; /* 1: K's elements >= 0, Q's even rows <= 0: those rows' scores all < 0 */
} sweep_case_t;

static fa2_device_info_t h200_info(void)
{
    fa2_device_info_t info = {sizeof(fa2_device_info_t), 9, 0, 132, 0, 232448, 233472};
    return info;
}

/* Runs one case with the score variants `mod` (NULL: plain) and the keys in `splits`
 * ranges; prints its line; returns 1 on pass. */
static int run_case(long index, sweep_case_t c, const oracle_score_t *mod, int64_t splits)
{
    if (index % g_stride != 0)
        return 1; /* not this run's share */
    fa2_problem_t p;
    fa2_problem_init(&p, FA2_DTYPE_BF16, c.batch, c.seqlen_q, c.seqlen_k, c.heads_q,
                     c.heads_kv, c.head_dim);
    p.causal = c.causal;
    p.window_left = c.window_left;
    p.window_right = c.window_right;
    p.softmax_scale = c.softmax_scale;

    printf("case %ld: b=%" PRId64 " q=%" PRId64 " k=%" PRId64 " hq=%" PRId64 " hkv=%" PRId64
           " d=%" PRId64 " causal=%d wl=%" PRId64 " wr=%" PRId64 " scale=%g",
           index, c.batch, c.seqlen_q, c.seqlen_k, c.heads_q, c.heads_kv, c.head_dim,
           c.causal, c.window_left, c.window_right, (double)c.softmax_scale);
    if (c.block_m == 0) {
        const fa2_device_info_t info = h200_info();
        fa2_plan_t plan;
        const fa2_status_t st = fa2_plan(&p, &info, &plan);
        if (st != FA2_SUCCESS) {
            printf(" : fa2_plan failed: %s (%s) FAIL\n", fa2_status_string(st),
                   fa2_last_error());
            return 0;
        }
        c.block_m = plan.block_m;
        c.block_n = plan.block_n;
    }
    printf(" Br=%" PRId64 " Bc=%" PRId64, c.block_m, c.block_n);

    oracle_rng_t rng = oracle_rng(g_seed ^ (0x9E3779B97F4A7C15ull * (uint64_t)(index + 1)));
    const int64_t nq = c.batch * c.seqlen_q * c.heads_q * c.head_dim;
    const int64_t nkv = c.batch * c.seqlen_k * c.heads_kv * c.head_dim;
    const int64_t nl = c.batch * c.heads_q * c.seqlen_q;
    float *q = malloc(sizeof(float) * (size_t)nq);
    float *k = malloc(sizeof(float) * (size_t)(nkv + 1));
    float *v = malloc(sizeof(float) * (size_t)(nkv + 1));
    float *o = malloc(sizeof(float) * (size_t)nq);
    float *lse = malloc(sizeof(float) * (size_t)nl);
    double *o_ref = malloc(sizeof(double) * (size_t)nq);
    double *lse_ref = malloc(sizeof(double) * (size_t)nl);
    double *o_got = malloc(sizeof(double) * (size_t)nq);
    assert_true(q && k && v && o && lse && o_ref && lse_ref && o_got);
    for (int64_t t = 0; t < nq; ++t)
        q[t] = oracle_rng_uniform(&rng, -1.0f, 1.0f);
    for (int64_t t = 0; t < nkv; ++t) {
        k[t] = oracle_rng_uniform(&rng, -1.0f, 1.0f);
        v[t] = oracle_rng_uniform(&rng, -1.0f, 1.0f);
        if (c.low_rows)
            k[t] = fabsf(k[t]);
    }
    for (int64_t t = 0; c.low_rows && t < nq; ++t) /* layout [batch, seqlen_q, heads, d] */
        if ((t / (c.heads_q * c.head_dim)) % c.seqlen_q % 2 == 0)
            q[t] = -fabsf(q[t]);

    if (mod || splits > 1) {
        printf(" softcap=%g alibi=%d sinks=%d splits=%" PRId64, mod ? mod->softcap : 0.0,
               mod && mod->alibi_slopes, mod && mod->sinks, splits);
        assert_int_equal(oracle_forward_scored(&p, mod, q, k, v, o_ref, lse_ref), 0);
        assert_int_equal(
            tiled_cpu_forward_scored(&p, mod, c.block_m, c.block_n, splits, q, k, v, o, lse),
            0);
    } else {
        assert_int_equal(oracle_forward(&p, q, k, v, o_ref, lse_ref), 0);
        assert_int_equal(tiled_cpu_forward(&p, c.block_m, c.block_n, q, k, v, o, lse), 0);
    }

    for (int64_t t = 0; t < nq; ++t)
        o_got[t] = o[t];
    const double err = oracle_rel_l2(o_got, o_ref, (size_t)nq);
    /* A row's LSE is its offset (the running max, or the softcap's bound: at most the
     * cap) plus log l, so it carries the offset's rounding: scale by the cap too. */
    const double lse_scale = fmax(1.0, mod ? mod->softcap : 0.0);
    double lse_err = 0.0;
    int64_t bad_lse = -1;
    for (int64_t t = 0; t < nl; ++t) {
        if (isinf(lse_ref[t]) || isinf(lse[t])) {
            if ((double)lse[t] != lse_ref[t] && bad_lse < 0)
                bad_lse = t;
            continue;
        }
        const double e = fabs(lse[t] - lse_ref[t]) / fmax(lse_scale, fabs(lse_ref[t]));
        if (!(e <= lse_err)) /* NaN sticks */
            lse_err = e;
    }
    const int pass = err <= O_TOL && lse_err <= LSE_TOL && bad_lse < 0;
    printf(": err=%.2e lse_err=%.2e %s\n", err, lse_err, pass ? "PASS" : "FAIL");
    if (bad_lse >= 0)
        printf("  lse[%" PRId64 "] = %g, oracle %g (-inf must match exactly)\n", bad_lse,
               (double)lse[bad_lse], lse_ref[bad_lse]);

    free(q), free(k), free(v), free(o), free(lse), free(o_ref), free(lse_ref), free(o_got);
    return pass;
}

/* The sweep: every head dim (buckets and not) under every mask kind, with seqlens,
 * heads and tiles drawn from the seed. */
static void test_tiled_matches_oracle(void **state)
{
    (void)state;
    static const int64_t dims[] = {8, 32, 40, 64, 72, 96, 128, 136, 192, 200, 256};
    static const int64_t lens[] = {1, 17, 100, 33, 64, 129};
    static const int64_t heads[][2] = {{1, 1}, {3, 3}, {4, 2}, {8, 2}, {4, 1}};
    static const int64_t odd_tiles[][2] = {{16, 16}, {7, 5}, {1, 1}, {64, 128}, {3, 200}};
    enum { MASKS = 7 };
    oracle_rng_t pick = oracle_rng(g_seed);
    long index = 0, failed = 0;

    for (size_t di = 0; di < sizeof dims / sizeof dims[0]; ++di)
        for (int mask = 0; mask < MASKS; ++mask)
            for (int rep = 0; rep < 2; ++rep, ++index) {
                sweep_case_t c = {0};
                const size_t nl = sizeof lens / sizeof lens[0];
                c.batch = 1 + (int64_t)(oracle_rng_next(&pick) % 2);
                c.seqlen_q = lens[oracle_rng_next(&pick) % nl];
                c.seqlen_k = lens[oracle_rng_next(&pick) % nl];
                const size_t hh = oracle_rng_next(&pick) % (sizeof heads / sizeof heads[0]);
                c.heads_q = heads[hh][0];
                c.heads_kv = heads[hh][1];
                c.head_dim = dims[di];
                c.window_left = c.window_right = -1;
                const int64_t w1 = (int64_t)(oracle_rng_next(&pick) % 40);
                const int64_t w2 = (int64_t)(oracle_rng_next(&pick) % 40);
                switch (mask) {
                case 0: break;                                           /* none */
                case 1: c.causal = 1; break;                             /* causal */
                case 2: c.window_left = w1; break;                       /* left only */
                case 3: c.window_right = w2; break;                      /* right only */
                case 4: c.window_left = w1, c.window_right = w2; break;  /* both */
                case 5: c.causal = 1, c.window_left = w1; break;         /* causal + left */
                case 6: c.window_left = 0, c.window_right = 0; break;    /* diagonal only */
                }
                if (oracle_rng_next(&pick) % 4 == 0)
                    c.softmax_scale = oracle_rng_uniform(&pick, 0.05f, 1.0f);
                if (rep == 1) {
                    const size_t t = oracle_rng_next(&pick) % 5;
                    c.block_m = odd_tiles[t][0];
                    c.block_n = odd_tiles[t][1];
                }
                if (g_only >= 0 && index != g_only)
                    continue;
                failed += !run_case(index, c, NULL, 1);
            }

    /* fixed cases: lengths far apart both ways, seqlen_k = 0, one long row */
    const sweep_case_t fixed[] = {
        {1, 100, 1000, 4, 2, 64, 1, -1, -1, 0.0f, 0, 0},
        {1, 1000, 100, 2, 1, 128, 1, -1, -1, 0.0f, 0, 0},
        {1, 1000, 100, 2, 2, 72, 0, 30, 10, 0.0f, 0, 0},
        {2, 17, 0, 2, 1, 40, 0, -1, -1, 0.0f, 0, 0},
        {1, 1, 1000, 1, 1, 256, 0, -1, -1, 0.0f, 0, 0},
        {1, 300, 300, 2, 2, 96, 1, 100, -1, 0.0f, 0, 0},
    };
    for (size_t t = 0; t < sizeof fixed / sizeof fixed[0]; ++t, ++index)
        if (g_only < 0 || index == g_only)
            failed += !run_case(index, fixed[t], NULL, 1);

    printf("%ld of %ld cases failed (seed %" PRIu64 ")\n", failed, index, g_seed);
    assert_int_equal(failed, 0);
}

/* The score variants (softcap, ALiBi, sinks; each alone and all together) with the keys
 * whole and in 3 splits, against the oracle's: the tile loop's softcap and ALiBi, and
 * the sink added once, in the merge of the splits. Then softcaps around the largest one
 * offset by a fixed offset (FA2_MAX_BOUNDED_SOFTCAP) and the largest offset by the
 * bound itself (33). */
static void test_tiled_scored(void **state)
{
    (void)state;
    static const sweep_case_t shapes[] = {
        {1, 1, 1000, 8, 2, 128, 1, -1, -1, 0.0f, 16, 64}, /* decode, GQA */
        {2, 70, 130, 4, 4, 64, 1, -1, -1, 0.0f, 64, 32},  /* causal, q < k */
        {1, 90, 40, 4, 1, 32, 1, 10, -1, 0.0f, 32, 16},   /* q > k: rows that see nothing */
        {1, 100, 300, 4, 2, 64, 0, -1, -1, 0.0f, 32, 16}, /* tiles right of the diagonal */
        {1, 130, 90, 2, 2, 128, 0, 30, 20, 0.0f, 16, 32}, /* a band, q > k */
    };
    oracle_rng_t pick = oracle_rng(g_seed ^ 0x5851F42D4C957F2Dull);
    float slopes[8], steep[8], sinks[8];
    for (int h = 0; h < 8; ++h) {
        slopes[h] = oracle_rng_uniform(&pick, 0.0f, 0.5f);
        steep[h] = h % 2 ? 1.03f : 1.05f; /* around 1.5 / log2(e): ALiBi split and not */
        sinks[h] = oracle_rng_uniform(&pick, -3.0f, 3.0f);
    }
    const oracle_score_t mods[] = {
        {1.0, NULL, NULL}, {30.0, NULL, NULL}, {0.0, slopes, NULL}, {0.0, NULL, sinks},
        {5.0, slopes, sinks}, {0.0, steep, NULL}, {50.0, slopes, NULL}};
    long index = 1000, failed = 0, run = 0;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; ++si)
        for (size_t mi = 0; mi < sizeof mods / sizeof mods[0]; ++mi)
            for (int64_t splits = 1; splits <= 3; splits += 2, ++index)
                if (g_only < 0 || index == g_only)
                    failed += !run_case(index, shapes[si], &mods[mi], splits), ++run;

    /* The softcap at which rows stop being offset by a fixed offset, with and without
     * sinks, just above it, and the largest offset by the bound 1: over rows whose every
     * score is near -cap (scale 8; their probabilities about 2^-95 against the offset)
     * and ordinary ones. */
    const sweep_case_t low[] = {
        {1, 64, 300, 4, 2, 128, 1, -1, -1, 8.0f, 64, 128, 1},
        {2, 33, 200, 2, 1, 64, 0, -1, -1, 8.0f, 64, 128, 1},
        {1, 64, 300, 4, 2, 256, 1, -1, -1, 0.0f, 64, 80, 1},
    };
    const oracle_score_t bounds[] = {{FA2_MAX_BOUNDED_SOFTCAP, NULL, NULL},
                                     {FA2_MAX_BOUNDED_SOFTCAP, NULL, sinks},
                                     {FA2_MAX_BOUNDED_SOFTCAP + 0.5, NULL, sinks},
                                     {33.0, NULL, sinks}};
    for (size_t si = 0; si < sizeof low / sizeof low[0]; ++si)
        for (size_t mi = 0; mi < sizeof bounds / sizeof bounds[0]; ++mi, ++index)
            if (g_only < 0 || index == g_only)
                failed += !run_case(index, low[si], &bounds[mi], 1 + (int64_t)mi), ++run;
    printf("%ld of %ld scored cases failed (seed %" PRIu64 ")\n", failed, run, g_seed);
    assert_int_equal(failed, 0);
}

/* Both sweeps again with the lazy rescale (tiled_cpu.h) and rows whose maxima climb:
 * scales near 1 make scores of several units, so rows both keep their offsets
 * (exponentials above 1) and move them. */
static int lazy_on(void **state)
{
    (void)state;
    tiled_cpu_lazy_rescale = 1;
    return 0;
}

static int lazy_off(void **state)
{
    (void)state;
    tiled_cpu_lazy_rescale = 0;
    return 0;
}

static void test_tiled_lazy_climbing_rows(void **state)
{
    (void)state;
    const sweep_case_t climbing[] = {
        {1, 64, 700, 2, 1, 256, 0, -1, -1, 1.0f, 16, 32},
        {2, 100, 333, 4, 2, 128, 1, -1, -1, 0.7f, 64, 64},
        {1, 130, 130, 2, 2, 64, 0, 20, 20, 1.0f, 32, 16},
    };
    long failed = 0;
    for (size_t t = 0; t < sizeof climbing / sizeof climbing[0]; ++t)
        failed += !run_case(5000 + (long)t, climbing[t], NULL, 1);
    printf("%ld climbing-row cases failed (seed %" PRIu64 ")\n", failed, g_seed);
    assert_int_equal(failed, 0);
}

int main(void)
{
    const char *s = getenv("FA2_TEST_SEED");
    g_seed = s && *s ? strtoull(s, NULL, 0) : (uint64_t)time(NULL);
    const char *only = getenv("FA2_TEST_CASE");
    if (only && *only)
        g_only = strtol(only, NULL, 10);
    const char *stride = getenv("FA2_TEST_STRIDE");
    if (stride && *stride && strtol(stride, NULL, 10) > 1)
        g_stride = strtol(stride, NULL, 10);
    printf("seed %" PRIu64 " (replay: FA2_TEST_SEED=%" PRIu64 ", one case: FA2_TEST_CASE=n)\n",
           g_seed, g_seed);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tiled_matches_oracle),
        cmocka_unit_test(test_tiled_scored),
        cmocka_unit_test_setup_teardown(test_tiled_matches_oracle, lazy_on, lazy_off),
        cmocka_unit_test_setup_teardown(test_tiled_scored, lazy_on, lazy_off),
        cmocka_unit_test_setup_teardown(test_tiled_lazy_climbing_rows, lazy_on, lazy_off),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
