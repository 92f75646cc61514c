/* The decode kernel (kernels/decode/) on the GPU against the double oracle.
 *
 * Dense cases: 1 to 16 query tokens, GQA groups 1, 2, 4, 8, 16 and MQA up to 128 query
 * heads (rows past a block's 16 in row tiles), head dims 64, 128 and 256, batch 1 to 64, key counts 0, 1, 17, 300, 1000 to 128k, causal and
 * windows, with and without key splits (plan->splits checked: the decode kernel
 * runs, and splits where the case asks for them), planned for this device and again
 * for an A100's record (the two-stage pipeline), and with the score variants (softcap,
 * ALiBi, sinks) through fa2_forward_with. Split and unsplit runs of one problem equally
 * far from the oracle; FA2_MAX_SEQLEN keys in FA2_MAX_SPLITS splits. Then packed and
 * paged batches of decode rows with splits (pages of 16 and 64), sequence by sequence,
 * an empty sequence included. Then batch-invariant mode: a sequence's step alone and
 * inside a larger batch, bit-identical. O and the LSE are poisoned first; rows outside
 * the sequences must stay so. Bounds as the forward tests: O's relative L2 error within
 * max(2 x a same-precision naive attention's, 1e-2 bf16 / 2e-3 fp16; the score
 * variants: the fixed bound), the LSE within 1e-3.
 *
 * FA2_TEST_SEED=<seed> replays a run. Without a CUDA device: exit 77 (skipped);
 * `--probe` only checks for one. */
#include <inttypes.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <cuda_runtime_api.h>

#include "fa2.h"
#include "gpu_tensor.h"
#include "oracle.h"

static uint64_t g_seed;
static long g_only = -1;
static fa2_device_info_t g_info;

typedef struct decode_case_t {
    fa2_dtype_t dtype;
    int64_t batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim;
    int32_t causal;
    int64_t window_left;
    int64_t max_splits;
    int want_splits; /* 1: the plan must split the keys */
} decode_case_t;

#define BF16 FA2_DTYPE_BF16
#define FP16 FA2_DTYPE_FP16
static const decode_case_t cases[] = {
    {BF16, 1, 1, 8192, 32, 8, 128, 1, -1, 64, 1},   /* the batch-1 step */
    {BF16, 3, 1, 1000, 16, 16, 64, 1, -1, 64, 1},   /* MHA */
    {FP16, 2, 4, 777, 8, 2, 128, 1, -1, 0, 0},      /* speculative, no splits */
    {BF16, 1, 1, 17, 16, 1, 256, 0, -1, 64, 0},     /* MQA, few keys: no split */
    {BF16, 2, 2, 33000, 8, 8, 64, 1, 500, 128, 1},  /* a window */
    {FP16, 2, 1, 4096, 64, 4, 256, 1, -1, 16, 1},   /* GQA 16 */
    {BF16, 2, 1, 0, 8, 2, 128, 0, -1, 64, 0},       /* no keys: O = 0, LSE = -inf */
    {BF16, 1, 1, 33000, 8, 1, 128, 1, -1, 128, 1},  /* one kv head: over 100 splits */
    {BF16, 1, 16, 2000, 8, 8, 128, 1, -1, 64, 1},   /* 16 tokens, MHA: a causal mask per row */
    {FP16, 4, 1, 1, 16, 8, 128, 0, -1, 64, 0},      /* GQA 2, one key */
    {BF16, 64, 1, 300, 32, 8, 64, 1, -1, 64, 0},    /* batch 64: the grid fills the GPU */
    {BF16, 1, 1, 131072, 4, 1, 128, 1, -1, 128, 1}, /* 128k keys (one kv head) */
    /* MQA 6:1 at d = 64, 128k keys: dozens of splits, merged by a warp whose lanes 16..31
     * hold no columns (the combine must still take their splits' weights) */
    {FP16, 2, 1, 131072, 6, 1, 64, 1, -1, 128, 1},
    {BF16, 2, 2, 5000, 16, 2, 256, 1, -1, 32, 1},   /* 2 tokens x GQA 8: 16 rows */
    /* More rows than a block's 16: row tiles of one kv head */
    {BF16, 2, 1, 3000, 64, 1, 128, 1, -1, 64, 1},   /* MQA 64:1: 4 row tiles */
    {FP16, 1, 1, 2000, 128, 1, 64, 1, -1, 64, 1},   /* group 128 (absorbed MLA-like) */
    {BF16, 2, 4, 4100, 64, 8, 128, 1, -1, 64, 1},   /* GQA 8 x 4 speculative: 2 tiles */
    {BF16, 1, 16, 1500, 32, 2, 256, 1, -1, 0, 0},   /* 16 tokens x 16: 16 tiles, causal */
    {FP16, 3, 3, 999, 12, 2, 64, 1, 300, 32, 1},    /* 18 rows: a tile of 2, a window */
    {BF16, 1, 16, 16, 24, 1, 128, 1, -1, 0, 0},     /* 384 rows, 16 keys (the last tile's
                                                       tokens see keys 1..16) */
};

/* One case planned for `info`; `mod` (NULL: plain attention) adds the score variants,
 * run through fa2_forward_with against oracle_forward_scored. */
static int run_case(long index, const decode_case_t *c, const fa2_device_info_t *info,
                    const oracle_score_t *mod)
{
    fa2_problem_t p;
    fa2_problem_init(&p, c->dtype, c->batch, c->seqlen_q, c->seqlen_k, c->heads_q, c->heads_kv,
                     c->head_dim);
    p.causal = c->causal;
    p.window_left = c->window_left;
    p.max_splits = c->max_splits;
    if (mod) {
        p.softcap = (float)mod->softcap;
        p.alibi = mod->alibi_slopes != NULL;
        p.sinks = mod->sinks != NULL;
        printf("scored softcap=%g alibi=%d sinks=%d ", mod->softcap, (int)p.alibi, (int)p.sinks);
    }
    fa2_plan_t plan;
    printf("case %ld: %s b=%" PRId64 " q=%" PRId64 " k=%" PRId64 " hq=%" PRId64 " hkv=%" PRId64
           " d=%" PRId64 " causal=%d wl=%" PRId64 " max_splits=%" PRId64,
           index, c->dtype == BF16 ? "bf16" : "fp16", c->batch, c->seqlen_q, c->seqlen_k,
           c->heads_q, c->heads_kv, c->head_dim, c->causal, c->window_left, c->max_splits);
    fa2_status_t st = fa2_plan(&p, info, &plan);
    if (st != FA2_SUCCESS) {
        printf(" : fa2_plan: %s (%s) FAIL\n", fa2_status_string(st), fa2_last_error());
        return 0;
    }
    printf(" [decode splits %d, %d B shared]", (int)plan.splits, (int)plan.smem_bytes);
    const int shape_ok = plan.splits >= 1 && (plan.splits > 1) == c->want_splits;
    const int64_t nq = c->batch * c->seqlen_q * c->heads_q * c->head_dim,
                  nk = c->batch * c->seqlen_k * c->heads_kv * c->head_dim,
                  n_lse = c->batch * c->heads_q * c->seqlen_q;
    float *qv = malloc(sizeof(float) * (size_t)nq), *kv = malloc(sizeof(float) * (size_t)(nk + 1)),
          *vv = malloc(sizeof(float) * (size_t)(nk + 1)), *lse = malloc(sizeof(float) * n_lse);
    uint16_t *qb = malloc(2 * (size_t)nq), *kb = malloc(2 * (size_t)(nk + 1)),
             *vb = malloc(2 * (size_t)(nk + 1)), *ob = malloc(2 * (size_t)nq);
    double *want = malloc(sizeof(double) * nq), *ref = malloc(sizeof(double) * nq),
           *got = malloc(sizeof(double) * nq), *want_lse = malloc(sizeof(double) * n_lse);
    assert_true(qv && kv && vv && lse && qb && kb && vb && ob && want && ref && got && want_lse);
    oracle_rng_t rng = case_rng(g_seed, index);
    fill_rounded(qv, qb, nq, &rng, c->dtype);
    fill_rounded(kv, kb, nk, &rng, c->dtype);
    fill_rounded(vv, vb, nk, &rng, c->dtype);
    void *dq = device_buffer(qb, 2 * nq), *dk = device_buffer(kb, 2 * nk),
         *dv = device_buffer(vb, 2 * nk),
         *d_o = device_buffer(NULL, 2 * nq),
         *ws = device_buffer(NULL, (size_t)plan.workspace_bytes);
    float *dlse = device_buffer(NULL, sizeof(float) * n_lse);
    float *dslopes = mod && mod->alibi_slopes
                         ? device_buffer(mod->alibi_slopes, sizeof(float) * c->heads_q)
                         : NULL;
    float *dsinks = mod && mod->sinks ? device_buffer(mod->sinks, sizeof(float) * c->heads_q)
                                      : NULL;
    int pass = 0;
    fa2_forward_args_t args;
    fa2_forward_args_init(&args);
    args.q = dq, args.k = dk, args.v = dv, args.o = d_o, args.lse = dlse;
    args.alibi_slopes = dslopes, args.sinks = dsinks;
    args.workspace = ws, args.workspace_bytes = (size_t)plan.workspace_bytes;
    st = fa2_forward_with(&plan, &args);
    if (st != FA2_SUCCESS) {
        printf(" : fa2_forward: %s (%s) FAIL\n", fa2_status_string(st), fa2_last_error());
        goto cleanup;
    }
    assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
    assert_int_equal(cudaMemcpy(ob, d_o, 2 * nq, cudaMemcpyDeviceToHost), cudaSuccess);
    assert_int_equal(cudaMemcpy(lse, dlse, sizeof(float) * n_lse, cudaMemcpyDeviceToHost),
                     cudaSuccess);
    assert_int_equal(oracle_forward_scored(&p, mod, qv, kv, vv, want, want_lse), 0);
    assert_int_equal(oracle_forward_scored_rounded(&p, mod, qv, kv, vv, ref), 0);
    int64_t nonfinite = 0, lse_bad = 0;
    for (int64_t i = 0; i < nq; ++i) {
        got[i] = oracle_float_from_bits(ob[i], c->dtype);
        nonfinite += !isfinite(got[i]);
    }
    for (int64_t i = 0; i < n_lse; ++i) {
        const double w = want_lse[i];
        lse_bad += isinf(w) ? !(isinf(lse[i]) && lse[i] < 0)
                            : !(fabs(lse[i] - w) <= 1e-3 * fmax(1.0, fabs(w)));
    }
    const double err = oracle_rel_l2(got, want, (size_t)nq),
                 ref_err = oracle_rel_l2(ref, want, (size_t)nq);
    const double bound = fmax(2.0 * ref_err, c->dtype == BF16 ? 1e-2 : 2e-3);
    /* no keys: O must be exactly 0 (the oracle's too: err is then |O|) */
    pass = shape_ok && (c->seqlen_k == 0 ? err == 0.0 : err <= bound) && nonfinite == 0 &&
           lse_bad == 0;
    printf(" : err=%.3e ref=%.3e bound=%.3e nonfinite=%" PRId64 " lse_bad=%" PRId64 "%s %s\n",
           err, ref_err, bound, nonfinite, lse_bad, shape_ok ? "" : " [wrong plan]",
           pass ? "PASS" : "FAIL");
cleanup:
    fflush(stdout);
    cudaFree(dq), cudaFree(dk), cudaFree(dv), cudaFree(d_o), cudaFree(ws), cudaFree(dlse);
    cudaFree(dslopes), cudaFree(dsinks);
    free(qv), free(kv), free(vv), free(lse), free(qb), free(kb), free(vb), free(ob);
    free(want), free(ref), free(got), free(want_lse);
    return pass;
}

static void test_decode_dense(void **state)
{
    (void)state;
    long failed = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i)
        if (g_only < 0 || g_only == (long)i)
            failed += !run_case((long)i, &cases[i], &g_info, NULL);
    printf("%ld of %zu cases failed (seed %" PRIu64 ")\n", failed, sizeof cases / sizeof cases[0],
           g_seed);
    assert_int_equal(failed, 0);
}

/* The same cases planned for an A100's record (sm_80, 163 KiB a block, 108
 * multiprocessors: the two-stage pipeline, other split counts, no programmatic
 * dependent launch) and run here. */
static void test_decode_a100_record(void **state)
{
    (void)state;
    fa2_device_info_t a100 = g_info;
    a100.cc_major = 8, a100.cc_minor = 0, a100.sm_count = 108;
    a100.smem_per_block_optin = 166912, a100.smem_per_sm = 167936;
    long failed = 0;
    printf("planned for sm_80 with 166912 bytes of shared memory per block:\n");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i)
        if (g_only < 0 || g_only == (long)(200 + i))
            failed += !run_case((long)(200 + i), &cases[i], &a100, NULL);
    printf("%ld of %zu cases failed (seed %" PRIu64 ")\n", failed, sizeof cases / sizeof cases[0],
           g_seed);
    assert_int_equal(failed, 0);
}

/* The score variants (include/fa2.h) in the decode kernel, with and without key splits
 * (the sink joins each row once: in the kernel's merge, or in the combine), against
 * oracle_forward_scored: softcap alone (large and small), ALiBi with softcap, sinks
 * alone (large ones: rows dominated by the sink), and all three; a window case where
 * rows see few keys. */
static void test_decode_scored(void **state)
{
    (void)state;
    static const size_t picks[] = {0, 2, 4, 5, 7};
    float slopes[64], sinks[64], big_sinks[64];
    oracle_rng_t rng = case_rng(g_seed, 500);
    for (int h = 0; h < 64; ++h) {
        slopes[h] = oracle_rng_uniform(&rng, 0.0f, 0.25f);
        sinks[h] = oracle_rng_uniform(&rng, -2.0f, 4.0f);
        big_sinks[h] = 20.0f + (float)h;
    }
    const oracle_score_t mods[] = {{30.0, NULL, NULL}, {1.5, slopes, NULL},
                                   {0.0, NULL, big_sinks}, {20.0, slopes, sinks}};
    long failed = 0, run = 0, index = 300;
    for (size_t m = 0; m < sizeof mods / sizeof mods[0]; ++m)
        for (size_t i = 0; i < sizeof picks / sizeof picks[0]; ++i, ++index)
            if (g_only < 0 || g_only == index)
                failed += !run_case(index, &cases[picks[i]], &g_info, &mods[m]), ++run;
    printf("%ld of %ld scored cases failed (seed %" PRIu64 ")\n", failed, run, g_seed);
    assert_int_equal(failed, 0);
}

/* A packed batch of decode rows (1 query token per sequence, one sequence empty), over
 * packed K/V (page = 0) or a paged cache (pages of `page` keys, dealt in reverse), with
 * key splits, head dim d, 32 query heads over hkv kv heads; each sequence against the
 * oracle; the spare rows stay poisoned. */
static long run_varlen(int64_t page, int64_t d, int64_t hkv)
{
    enum { N = 4, SPARE = 3 };
    const int paged = page > 0;
    const int64_t page_keys = paged ? page : 1;
    const int64_t hq = 32, len_k[N] = {100, 5000, 0, 33};
    const int64_t len_q[N] = {1, 1, 0, 1};
    int32_t cu_q[N + 1] = {0}, cu_k[N + 1] = {0}, used[N];
    int64_t max_k = 0, pages = 0;
    for (int b = 0; b < N; ++b) {
        cu_q[b + 1] = cu_q[b] + (int32_t)len_q[b];
        cu_k[b + 1] = cu_k[b] + (int32_t)len_k[b];
        used[b] = (int32_t)len_k[b];
        max_k = len_k[b] > max_k ? len_k[b] : max_k;
        pages += (len_k[b] + page_keys - 1) / page_keys;
    }
    const int64_t per_seq = (max_k + page_keys - 1) / page_keys, total_q = cu_q[N] + SPARE;
    const int64_t k_rows = paged ? pages * page_keys : cu_k[N];
    int32_t *table = malloc(sizeof(int32_t) * N * per_seq);
    assert_non_null(table);
    for (int b = 0, next = 0; b < N; ++b)
        for (int64_t j = 0; j < per_seq; ++j)
            table[b * per_seq + j] =
                j < (len_k[b] + page_keys - 1) / page_keys ? (int32_t)(pages - 1 - next++) : -1;
    fa2_problem_t p;
    fa2_problem_init(&p, BF16, N, 1, max_k, hq, hkv, d);
    p.total_q = total_q;
    p.q_batch_stride = p.o_batch_stride = 0;
    if (paged) {
        p.page_size = page_keys, p.num_pages = pages, p.pages_per_seq = per_seq;
        p.k_batch_stride = p.v_batch_stride = page_keys * hkv * d;
    } else {
        p.total_k = k_rows;
        p.k_batch_stride = p.v_batch_stride = 0;
    }
    p.causal = 1;
    p.max_splits = 64;
    fa2_plan_t plan;
    assert_int_equal(fa2_plan(&p, &g_info, &plan), FA2_SUCCESS);
    printf("varlen decode %s (page %" PRId64 "), d=%" PRId64 ", GQA 32:%" PRId64
           ": [decode splits %d]",
           paged ? "paged" : "packed", page, d, hkv, (int)plan.splits);
    const int64_t nq = total_q * hq * d, nk = k_rows * hkv * d;
    float *qv = malloc(sizeof(float) * nq), *kv = malloc(sizeof(float) * nk),
          *vv = malloc(sizeof(float) * nk), *ks = malloc(sizeof(float) * max_k * hkv * d),
          *vs = malloc(sizeof(float) * max_k * hkv * d),
          *lse = malloc(sizeof(float) * hq * total_q);
    uint16_t *qb = malloc(2 * nq), *kb = malloc(2 * nk), *vb = malloc(2 * nk),
             *ob = malloc(2 * nq);
    double *want = malloc(sizeof(double) * hq * d), *got = malloc(sizeof(double) * hq * d),
           *want_lse = malloc(sizeof(double) * hq);
    assert_true(qv && kv && vv && ks && vs && lse && qb && kb && vb && ob && want && got &&
                want_lse);
    oracle_rng_t rng = case_rng(g_seed, (uint64_t)(100 + page + 2 * d + hkv));
    fill_rounded(qv, qb, nq, &rng, BF16);
    fill_rounded(kv, kb, nk, &rng, BF16);
    fill_rounded(vv, vb, nk, &rng, BF16);
    void *dq = device_buffer(qb, 2 * nq), *dk = device_buffer(kb, 2 * nk),
         *dv = device_buffer(vb, 2 * nk),
         *d_o = device_buffer(NULL, 2 * nq),
         *ws = device_buffer(NULL, (size_t)plan.workspace_bytes);
    float *dlse = device_buffer(NULL, sizeof(float) * hq * total_q);
    int32_t *dcu_q = device_buffer(cu_q, sizeof cu_q), *dcu_k = device_buffer(cu_k, sizeof cu_k),
            *dused = device_buffer(used, sizeof used),
            *dtable = device_buffer(table, sizeof(int32_t) * N * per_seq);
    long failed = 0;
    const fa2_status_t st = fa2_forward_varlen(
        &plan, dq, dk, dv, d_o, dlse, dcu_q, paged ? NULL : dcu_k, dused, paged ? dtable : NULL,
        ws, (size_t)plan.workspace_bytes, NULL);
    if (st != FA2_SUCCESS) {
        printf(" : %s (%s) FAIL\n", fa2_status_string(st), fa2_last_error());
        failed = 1;
        goto cleanup;
    }
    assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
    assert_int_equal(cudaMemcpy(ob, d_o, 2 * nq, cudaMemcpyDeviceToHost), cudaSuccess);
    assert_int_equal(cudaMemcpy(lse, dlse, sizeof(float) * hq * total_q, cudaMemcpyDeviceToHost),
                     cudaSuccess);
    int64_t poison_lost = 0;
    double worst = 0.0;
    for (int b = 0; b < N; ++b) {
        if (len_q[b] == 0)
            continue;
        for (int64_t j = 0; j < len_k[b]; ++j) {
            const int64_t row = paged ? table[b * per_seq + j / page_keys] * page_keys +
                                            j % page_keys
                                      : cu_k[b] + j;
            memcpy(ks + j * hkv * d, kv + row * hkv * d, sizeof(float) * hkv * d);
            memcpy(vs + j * hkv * d, vv + row * hkv * d, sizeof(float) * hkv * d);
        }
        fa2_problem_t one;
        fa2_problem_init(&one, BF16, 1, 1, len_k[b], hq, hkv, d);
        one.causal = 1;
        assert_int_equal(oracle_forward(&one, qv + cu_q[b] * hq * d, ks, vs, want, want_lse), 0);
        for (int64_t x = 0; x < hq * d; ++x)
            got[x] = oracle_float_from_bits(ob[cu_q[b] * hq * d + x], BF16);
        const double e = oracle_rel_l2(got, want, (size_t)(hq * d));
        worst = isnan(e) || e > worst ? e : worst;
        for (int64_t h = 0; h < hq; ++h)
            worst = fmax(worst, fabs(lse[h * total_q + cu_q[b]] - want_lse[h]) > 1e-3 ? 1.0 : 0.0);
    }
    for (int64_t r = cu_q[N]; r < total_q; ++r)
        for (int64_t x = 0; x < hq * d; ++x)
            poison_lost += ob[r * hq * d + x] != 0xFFFFu;
    failed = !(plan.splits > 1 && worst <= 1e-2 && poison_lost == 0);
    printf(" worst sequence %.2e, written_outside=%" PRId64 " %s\n", worst, poison_lost,
           failed ? "FAIL" : "PASS");
cleanup:
    fflush(stdout);
    cudaFree(dq), cudaFree(dk), cudaFree(dv), cudaFree(d_o), cudaFree(ws), cudaFree(dlse);
    cudaFree(dcu_q), cudaFree(dcu_k), cudaFree(dused), cudaFree(dtable);
    free(qv), free(kv), free(vv), free(ks), free(vs), free(lse), free(qb), free(kb), free(vb);
    free(ob), free(want), free(got), free(want_lse), free(table);
    return failed;
}

static void test_decode_varlen(void **state)
{
    (void)state;
    /* GQA 4 (rows 8-15 of the tile padding), d = 64 (two paged parts a tile) with GQA 16
     * (every row real), and MQA 32:1 (two row tiles) */
    assert_int_equal(run_varlen(0, 128, 8) + run_varlen(16, 128, 8) + run_varlen(64, 128, 8) +
                         run_varlen(0, 64, 2) + run_varlen(16, 64, 2) + run_varlen(0, 256, 1) +
                         run_varlen(16, 128, 1),
                     0);
}

/* Batch-invariant mode: one sequence's decode step alone (batch 1) and as the middle of
 * a batch of 3 (other sequences around it, a plan of another batch size): O and the LSE
 * bit-identical. */
static void test_batch_invariant(void **state)
{
    (void)state;
    const int64_t sk = 5000, hq = 32, hkv = 8, d = 128, row_q = hq * d, row_k = sk * hkv * d;
    oracle_rng_t rng = case_rng(g_seed, 300);
    float *vals = malloc(sizeof(float) * 3 * row_k);
    uint16_t *qb = malloc(2 * 3 * row_q), *kb = malloc(2 * 3 * row_k), *vb = malloc(2 * 3 * row_k),
             *o1 = malloc(2 * row_q), *o3 = malloc(2 * 3 * row_q);
    float lse1[32], lse3[3 * 32];
    assert_true(vals && qb && kb && vb && o1 && o3);
    fill_rounded(vals, qb, 3 * row_q, &rng, BF16);
    fill_rounded(vals, kb, 3 * row_k, &rng, BF16);
    fill_rounded(vals, vb, 3 * row_k, &rng, BF16);
    int32_t splits[2] = {0, 0};
    for (int run = 0; run < 2; ++run) {
        const int64_t batch = run ? 3 : 1, first = run ? 0 : 1; /* batch 1: sequence 1 */
        fa2_problem_t p;
        fa2_problem_init(&p, BF16, batch, 1, sk, hq, hkv, d);
        p.causal = 1;
        p.max_splits = 64;
        p.batch_invariant = 1;
        fa2_plan_t plan;
        assert_int_equal(fa2_plan(&p, &g_info, &plan), FA2_SUCCESS);
        splits[run] = plan.splits;
        void *dq = device_buffer(qb + first * row_q, 2 * batch * row_q),
             *dk = device_buffer(kb + first * row_k, 2 * batch * row_k),
             *dv = device_buffer(vb + first * row_k, 2 * batch * row_k),
             *d_o = device_buffer(NULL, 2 * batch * row_q),
             *ws = device_buffer(NULL, (size_t)plan.workspace_bytes);
        float *dlse = device_buffer(NULL, sizeof(float) * batch * hq);
        assert_int_equal(fa2_forward(&plan, dq, dk, dv, d_o, dlse, ws,
                                     (size_t)plan.workspace_bytes, NULL),
                         FA2_SUCCESS);
        assert_int_equal(cudaMemcpy(run ? o3 : o1, d_o, 2 * batch * row_q,
                                    cudaMemcpyDeviceToHost),
                         cudaSuccess);
        assert_int_equal(cudaMemcpy(run ? lse3 : lse1, dlse, sizeof(float) * batch * hq,
                                    cudaMemcpyDeviceToHost),
                         cudaSuccess);
        cudaFree(dq), cudaFree(dk), cudaFree(dv), cudaFree(d_o), cudaFree(ws), cudaFree(dlse);
    }
    const int same = memcmp(o1, o3 + row_q, 2 * row_q) == 0 &&
                     memcmp(lse1, lse3 + hq, sizeof lse1) == 0;
    printf("batch-invariant: decode splits %d (batch 1) and %d (batch 3), sequence 1's O and "
           "LSE %s\n", (int)splits[0], (int)splits[1], same ? "bit-identical PASS" : "differ FAIL");
    free(vals), free(qb), free(kb), free(vb), free(o1), free(o3);
    assert_true(same && splits[0] == splits[1] && splits[0] > 1);
}

/* One problem run without key splits (max_splits 0) and with them. The partial O and LSE
 * are fp32 and so is the combine, but P goes into the P.V mma as bf16, rounded against
 * the running maximum each split sees, so the two results differ by that rounding, not
 * only by the order of fp32 sums. The check: the split adds no error of its own (its
 * distance from the double oracle within 10 % of the unsplit one's, which a lost or
 * twice-counted key or a wrong rescale would exceed many times) and the LSEs agree to
 * 1e-5 relative. */
static void test_split_agrees(void **state)
{
    (void)state;
    const int64_t sk = 8192, hq = 32, hkv = 8, d = 128, nq = hq * d, nk = sk * hkv * d;
    oracle_rng_t rng = case_rng(g_seed, 400);
    float *qv = malloc(sizeof(float) * nq), *kv = malloc(sizeof(float) * nk),
          *vv = malloc(sizeof(float) * nk), lse[2][32];
    double want_lse[32];
    double *got[2] = {malloc(sizeof(double) * nq), malloc(sizeof(double) * nq)},
           *want = malloc(sizeof(double) * nq);
    uint16_t *qb = malloc(2 * nq), *kb = malloc(2 * nk), *vb = malloc(2 * nk),
             *o = malloc(2 * nq);
    assert_true(qv && kv && vv && got[0] && got[1] && want && qb && kb && vb && o);
    fill_rounded(qv, qb, nq, &rng, BF16);
    fill_rounded(kv, kb, nk, &rng, BF16);
    fill_rounded(vv, vb, nk, &rng, BF16);
    void *dq = device_buffer(qb, 2 * nq), *dk = device_buffer(kb, 2 * nk),
         *dv = device_buffer(vb, 2 * nk);
    int32_t splits[2] = {0, 0};
    fa2_problem_t p;
    for (int run = 0; run < 2; ++run) {
        fa2_problem_init(&p, BF16, 1, 1, sk, hq, hkv, d);
        p.causal = 1;
        p.max_splits = run ? 64 : 0;
        fa2_plan_t plan;
        assert_int_equal(fa2_plan(&p, &g_info, &plan), FA2_SUCCESS);
        splits[run] = plan.splits;
        void *d_o = device_buffer(NULL, 2 * nq),
             *ws = device_buffer(NULL, (size_t)plan.workspace_bytes);
        float *dlse = device_buffer(NULL, sizeof(float) * hq);
        assert_int_equal(fa2_forward(&plan, dq, dk, dv, d_o, dlse, ws,
                                     (size_t)plan.workspace_bytes, NULL),
                         FA2_SUCCESS);
        assert_int_equal(cudaMemcpy(o, d_o, 2 * nq, cudaMemcpyDeviceToHost), cudaSuccess);
        assert_int_equal(cudaMemcpy(lse[run], dlse, sizeof lse[run], cudaMemcpyDeviceToHost),
                         cudaSuccess);
        for (int64_t i = 0; i < nq; ++i)
            got[run][i] = oracle_float_from_bits(o[i], BF16);
        cudaFree(d_o), cudaFree(ws), cudaFree(dlse);
    }
    assert_int_equal(oracle_forward(&p, qv, kv, vv, want, want_lse), 0);
    const double err_unsplit = oracle_rel_l2(got[0], want, (size_t)nq),
                 err_split = oracle_rel_l2(got[1], want, (size_t)nq),
                 apart = oracle_rel_l2(got[1], got[0], (size_t)nq);
    double worst_lse = 0.0;
    for (int64_t h = 0; h < hq; ++h)
        worst_lse = fmax(worst_lse, fabs((double)lse[0][h] - lse[1][h]) / fabs((double)lse[0][h]));
    const int pass = splits[0] == 1 && splits[1] > 1 && err_split <= 1.1 * err_unsplit &&
                     worst_lse <= 1e-5;
    printf("split against unsplit: decode splits %d and %d, error against the oracle %.3e "
           "and %.3e, apart %.3e, LSE within %.1e relative %s\n",
           (int)splits[0], (int)splits[1], err_unsplit, err_split, apart, worst_lse,
           pass ? "PASS" : "FAIL");
    cudaFree(dq), cudaFree(dk), cudaFree(dv);
    free(qv), free(kv), free(vv), free(got[0]), free(got[1]), free(want);
    free(qb), free(kb), free(vb), free(o);
    assert_true(pass);
}

/* The decode kernel at its accepted extremes: seqlen_k = FA2_MAX_SEQLEN keys with
 * max_splits = FA2_MAX_SPLITS, in batch-invariant mode (exactly FA2_MAX_SPLITS splits)
 * and in the default mode (the planner's count, keys split unevenly). K and V are one
 * row repeated (sequence stride 0), so every score of a row is the same: O = v and
 * LSE = scale q.k + ln(keys), exactly computable; a split that dropped or repeated keys
 * moves the LSE. */
static void test_decode_limits(void **state)
{
    (void)state;
    const int64_t sk = FA2_MAX_SEQLEN, hq = 8, d = 128;
    float qv[8 * 128], kv[128], vv[128], lse[8];
    uint16_t qb[8 * 128], kb[128], vb[128], ob[8 * 128];
    oracle_rng_t rng = case_rng(g_seed, 600);
    fill_rounded(qv, qb, hq * d, &rng, BF16);
    fill_rounded(kv, kb, d, &rng, BF16);
    fill_rounded(vv, vb, d, &rng, BF16);
    long failed = 0;
    for (int invariant = 1; invariant >= 0; --invariant) {
        fa2_problem_t p;
        fa2_problem_init(&p, BF16, 1, 1, sk, hq, 1, d);
        p.k_batch_stride = p.k_seq_stride = p.v_batch_stride = p.v_seq_stride = 0;
        p.causal = 1;
        p.max_splits = FA2_MAX_SPLITS;
        p.batch_invariant = invariant;
        fa2_plan_t plan;
        assert_int_equal(fa2_plan(&p, &g_info, &plan), FA2_SUCCESS);
        void *dq = device_buffer(qb, sizeof qb), *dk = device_buffer(kb, sizeof kb),
             *dv = device_buffer(vb, sizeof vb), *d_o = device_buffer(NULL, sizeof ob),
             *ws = device_buffer(NULL, (size_t)plan.workspace_bytes);
        float *dlse = device_buffer(NULL, sizeof lse);
        const fa2_status_t st = fa2_forward(&plan, dq, dk, dv, d_o, dlse, ws,
                                            (size_t)plan.workspace_bytes, NULL);
        assert_int_equal(st, FA2_SUCCESS);
        assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
        assert_int_equal(cudaMemcpy(ob, d_o, sizeof ob, cudaMemcpyDeviceToHost), cudaSuccess);
        assert_int_equal(cudaMemcpy(lse, dlse, sizeof lse, cudaMemcpyDeviceToHost), cudaSuccess);
        cudaFree(dq), cudaFree(dk), cudaFree(dv), cudaFree(d_o), cudaFree(ws), cudaFree(dlse);
        int64_t o_bad = 0, lse_bad = 0;
        for (int64_t h = 0; h < hq; ++h) {
            double s = 0.0;
            for (int64_t x = 0; x < d; ++x)
                s += (double)qv[h * d + x] * (double)kv[x];
            const double want = s / sqrt((double)d) + log((double)sk);
            lse_bad += !(fabs(lse[h] - want) <= 1e-3 * fmax(1.0, fabs(want)));
            for (int64_t x = 0; x < d; ++x) /* v, to a bf16 rounding */
                o_bad += !(fabs(oracle_float_from_bits(ob[h * d + x], BF16) - vv[x]) <=
                           0x1p-8 * fabs(vv[x]) + 1e-6);
        }
        const int pass = (invariant ? plan.splits == FA2_MAX_SPLITS
                                    : plan.splits > 1) &&
                         o_bad == 0 && lse_bad == 0;
        printf("limit: seqlen_k=%" PRId64 " max_splits=%d batch_invariant=%d [decode splits %d]"
               " : o_bad=%" PRId64 " lse_bad=%" PRId64 " %s\n",
               sk, FA2_MAX_SPLITS, invariant, (int)plan.splits, o_bad, lse_bad,
               pass ? "PASS" : "FAIL");
        failed += !pass;
    }
    assert_int_equal(failed, 0);
}

int main(int argc, char **argv)
{
    const int setup = gpu_test_setup("decode", &g_info, &g_seed, &g_only);
    if (setup != 0 || (argc > 1 && strcmp(argv[1], "--probe") == 0))
        return setup; /* --probe: a device is there (for the sanitizer runner) */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode_dense),
        cmocka_unit_test(test_decode_a100_record),
        cmocka_unit_test(test_decode_scored),
        cmocka_unit_test(test_decode_varlen),
        cmocka_unit_test(test_split_agrees),
        cmocka_unit_test(test_decode_limits),
        cmocka_unit_test(test_batch_invariant),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
