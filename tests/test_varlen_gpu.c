/* fa2_forward_varlen on the GPU against the double oracle, sequence by sequence.
 *
 * For each case: a packed batch of sequences of given (query, key) lengths, lengths 0
 * and 1 included, q < k and q > k; Q, K, V random in [-1, 1] rounded to the dtype;
 * O and the LSE [heads_q, total_q] poisoned (NaN) before the call, with spare rows
 * after the last sequence that must stay poisoned. Each sequence is compared to
 * oracle_forward on that sequence alone (a dense problem of batch 1): rel L2 error of
 * all of O within max(2 x a same-precision naive attention's, floor: 2e-3 fp16, 1e-2
 * bf16), rows with no visible key exactly 0, LSE within 1e-3 (relative, -inf exact).
 * Options per case: seqused_k (sequences use fewer keys than cu_seqlens_k holds),
 * padding sequences of length 0, planned maxima above the actual lengths, a sequence
 * past the planned maxima (skipped: its rows stay poisoned), and planning for a 99 KiB
 * device (the mma.sync kernels instead of the Hopper ones on the H200). Then the
 * accepted limits: total_q and total_k of 2^31 - 1, sequences ending on the last rows.
 *
 * FA2_TEST_SEED=<seed> replays a run. Without a CUDA device: exit 77 (skipped). */
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

#define FLOOR_FP16 2e-3
#define FLOOR_BF16 1e-2
#define LSE_TOL 1e-3
#define SPARE_ROWS 5   /* rows after the last sequence: never written */
#define MAX_SEQS 16

typedef struct varlen_case_t {
    const char *name;
    fa2_dtype_t dtype;
    int64_t heads_q, heads_kv, head_dim;
    int32_t causal;
    int64_t window_left, window_right;
    int n;                     /* sequences */
    int64_t len_q[MAX_SEQS];   /* query rows of each */
    int64_t len_k[MAX_SEQS];   /* keys each uses */
    int64_t extra_k;           /* > 0: cu_seqlens_k holds this many more keys per
                                  sequence than it uses, seqused_k gives the use */
    int64_t slack;             /* planned maxima this much above the longest sequence */
    int skipped;               /* index of a sequence past the planned query maximum, or -1 */
    int consumer;              /* plan for a 99 KiB sm_89 device */
} varlen_case_t;

static uint64_t g_seed;
static long g_only = -1;
static fa2_device_info_t g_info;

static int64_t max_of(const int64_t *x, int n, int skip)
{
    int64_t m = 0;
    for (int i = 0; i < n; ++i)
        if (i != skip && x[i] > m)
            m = x[i];
    return m;
}

/* Random values rounded to the dtype: `vals` (float) and `bits` (device format). */
static void fill(float *vals, uint16_t *bits, int64_t n, oracle_rng_t *rng, fa2_dtype_t dt)
{
    for (int64_t i = 0; i < n; ++i) {
        vals[i] = oracle_round(oracle_rng_uniform(rng, -1.0f, 1.0f), dt);
        bits[i] = oracle_bits_from_float(vals[i], dt);
    }
}

static void *upload(const void *host, size_t bytes)
{
    void *dev = NULL;
    assert_int_equal(cudaMalloc(&dev, bytes > 0 ? bytes : 1), cudaSuccess);
    if (host)
        assert_int_equal(cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice), cudaSuccess);
    else
        assert_int_equal(cudaMemset(dev, 0xFF, bytes > 0 ? bytes : 1), cudaSuccess);
    return dev;
}

static int run_case(long index, const varlen_case_t *c)
{
    const int n = c->n;
    const int64_t hq = c->heads_q, hkv = c->heads_kv, d = c->head_dim;
    int32_t cu_q[MAX_SEQS + 1], cu_k[MAX_SEQS + 1], used[MAX_SEQS];
    cu_q[0] = cu_k[0] = 0;
    for (int b = 0; b < n; ++b) {
        cu_q[b + 1] = cu_q[b] + (int32_t)c->len_q[b];
        cu_k[b + 1] = cu_k[b] + (int32_t)(c->len_k[b] + c->extra_k);
        used[b] = (int32_t)c->len_k[b];
    }
    const int64_t total_q = cu_q[n] + SPARE_ROWS, total_k = cu_k[n] + SPARE_ROWS;
    const int64_t max_q = max_of(c->len_q, n, c->skipped) + c->slack;
    const int64_t max_k = max_of(c->len_k, n, -1) + c->extra_k + c->slack;

    fa2_problem_t p;
    fa2_problem_init(&p, c->dtype, n, max_q > 0 ? max_q : 1, max_k, hq, hkv, d);
    p.total_q = total_q;
    p.total_k = total_k;
    p.q_batch_stride = p.k_batch_stride = p.v_batch_stride = p.o_batch_stride = 0;
    p.causal = c->causal;
    p.window_left = c->window_left;
    p.window_right = c->window_right;
    const fa2_device_info_t device = c->consumer ? consumer_device_info(&g_info) : g_info;
    printf("case %ld: %s %s %d seqs hq=%" PRId64 " hkv=%" PRId64 " d=%" PRId64 "%s", index,
           c->name, c->dtype == FA2_DTYPE_BF16 ? "bf16" : "fp16", n, hq, hkv, d,
           c->consumer ? " (planned for 99 KiB)" : "");
    fa2_plan_t plan;
    fa2_status_t st = fa2_plan(&p, &device, &plan);
    if (st != FA2_SUCCESS) {
        printf(" : fa2_plan: %s (%s) FAIL\n", fa2_status_string(st), fa2_last_error());
        return 0;
    }
    printf(" [sm%d %dx%d]", (int)plan.fwd_arch, (int)plan.block_m, (int)plan.block_n);

    const int64_t nq = total_q * hq * d, nk = total_k * hkv * d, n_lse = hq * total_q;
    float *qv = malloc(sizeof(float) * (size_t)nq), *kv = malloc(sizeof(float) * (size_t)nk),
          *vv = malloc(sizeof(float) * (size_t)nk), *lse = malloc(sizeof(float) * (size_t)n_lse);
    uint16_t *qb = malloc(2 * (size_t)nq), *kb = malloc(2 * (size_t)nk),
             *vb = malloc(2 * (size_t)nk), *ob = malloc(2 * (size_t)nq);
    double *want = calloc((size_t)nq, sizeof(double)), *ref = calloc((size_t)nq, sizeof(double)),
           *got = calloc((size_t)nq, sizeof(double)),
           *want_lse = malloc(sizeof(double) * (size_t)(hq * (max_q + 1)));
    assert_true(qv && kv && vv && lse && qb && kb && vb && ob && want && ref && got && want_lse);
    oracle_rng_t rng = case_rng(g_seed, index);
    fill(qv, qb, nq, &rng, c->dtype);
    fill(kv, kb, nk, &rng, c->dtype);
    fill(vv, vb, nk, &rng, c->dtype);

    void *dq = upload(qb, 2 * (size_t)nq), *dk = upload(kb, 2 * (size_t)nk),
         *dv = upload(vb, 2 * (size_t)nk), *d_o = upload(NULL, 2 * (size_t)nq);
    float *dlse = upload(NULL, sizeof(float) * (size_t)n_lse);
    int32_t *dcu_q = upload(cu_q, sizeof cu_q), *dcu_k = upload(cu_k, sizeof cu_k),
            *dused = upload(used, sizeof used);
    st = fa2_forward_varlen(&plan, dq, dk, dv, d_o, dlse, dcu_q, dcu_k,
                            c->extra_k ? dused : NULL, NULL, 0, NULL);
    int pass = 0;
    if (st != FA2_SUCCESS) {
        printf(" : fa2_forward_varlen: %s (%s) FAIL\n", fa2_status_string(st),
               fa2_last_error());
        goto cleanup;
    }
    assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
    assert_int_equal(cudaMemcpy(ob, d_o, 2 * (size_t)nq, cudaMemcpyDeviceToHost), cudaSuccess);
    assert_int_equal(cudaMemcpy(lse, dlse, sizeof(float) * (size_t)n_lse,
                                cudaMemcpyDeviceToHost),
                     cudaSuccess);

    /* Per sequence: the oracle on that sequence alone; O gathered into packed order. */
    int64_t nonfinite = 0, masked_nonzero = 0, poison_lost = 0, lse_bad = 0;
    for (int b = 0; b < n; ++b) {
        const int64_t lq = c->len_q[b], lk = c->len_k[b], q0 = cu_q[b], k0 = cu_k[b];
        const int skip = b == c->skipped;
        if (lq == 0)
            continue;
        fa2_problem_t one;
        fa2_problem_init(&one, c->dtype, 1, lq, lk, hq, hkv, d);
        one.causal = c->causal;
        one.window_left = c->window_left;
        one.window_right = c->window_right;
        if (!skip) {
            assert_int_equal(oracle_forward(&one, qv + q0 * hq * d, kv + k0 * hkv * d,
                                            vv + k0 * hkv * d, want + q0 * hq * d, want_lse),
                             0);
            assert_int_equal(oracle_forward_rounded(&one, qv + q0 * hq * d, kv + k0 * hkv * d,
                                                    vv + k0 * hkv * d, ref + q0 * hq * d),
                             0);
        }
        for (int64_t i = 0; i < lq; ++i)
            for (int64_t h = 0; h < hq; ++h) {
                const int64_t row = q0 + i;
                const float g_lse = lse[h * total_q + row];
                uint32_t lse_bits;
                memcpy(&lse_bits, &g_lse, sizeof lse_bits);
                if (skip) { /* past the planned bounds: nothing written */
                    poison_lost += lse_bits != 0xFFFFFFFFu;
                    for (int64_t x = 0; x < d; ++x)
                        poison_lost += ob[(row * hq + h) * d + x] != 0xFFFFu;
                    continue;
                }
                const double w_lse = want_lse[h * lq + i];
                const double e = isinf(w_lse) ? (g_lse == w_lse ? 0.0 : INFINITY)
                                              : fabs(g_lse - w_lse) / fmax(1.0, fabs(w_lse));
                lse_bad += !(e <= LSE_TOL);
                for (int64_t x = 0; x < d; ++x) {
                    const int64_t t = (row * hq + h) * d + x;
                    got[t] = oracle_float_from_bits(ob[t], c->dtype);
                    if (!isfinite(got[t]))
                        nonfinite++;
                    else if (isinf(w_lse) && got[t] != 0.0)
                        masked_nonzero++;
                }
            }
    }
    for (int64_t row = cu_q[n]; row < total_q; ++row) /* spare rows */
        for (int64_t h = 0; h < hq; ++h) {
            uint32_t bits;
            memcpy(&bits, &lse[h * total_q + row], sizeof bits);
            poison_lost += bits != 0xFFFFFFFFu;
            for (int64_t x = 0; x < d; ++x)
                poison_lost += ob[(row * hq + h) * d + x] != 0xFFFFu;
        }
    const double err = oracle_rel_l2(got, want, (size_t)nq);
    const double ref_err = oracle_rel_l2(ref, want, (size_t)nq);
    const double bound = fmax(2.0 * ref_err, c->dtype == FA2_DTYPE_BF16 ? FLOOR_BF16 : FLOOR_FP16);
    pass = err <= bound && nonfinite == 0 && masked_nonzero == 0 && poison_lost == 0 &&
           lse_bad == 0;
    printf(" : err=%.3e ref=%.3e bound=%.3e nonfinite=%" PRId64 " masked_nonzero=%" PRId64
           " written_outside=%" PRId64 " lse_bad=%" PRId64 " %s\n",
           err, ref_err, bound, nonfinite, masked_nonzero, poison_lost, lse_bad,
           pass ? "PASS" : "FAIL");

cleanup:
    fflush(stdout);
    cudaFree(dq), cudaFree(dk), cudaFree(dv), cudaFree(d_o), cudaFree(dlse);
    cudaFree(dcu_q), cudaFree(dcu_k), cudaFree(dused);
    free(qv), free(kv), free(vv), free(lse), free(qb), free(kb), free(vb), free(ob);
    free(want), free(ref), free(got), free(want_lse);
    return pass;
}

#define FP16 FA2_DTYPE_FP16
#define BF16 FA2_DTYPE_BF16

/* name, dtype, hq, hkv, d, causal, left, right, n, len_q, len_k, extra_k, slack,
 * skipped, consumer */
static const varlen_case_t cases[] = {
    {"mixed lengths causal GQA", BF16, 4, 2, 128, 1, -1, -1, 7,
     {1, 17, 0, 300, 1000, 5, 64}, {1, 17, 0, 300, 1000, 200, 64}, 0, 16, -1, 0},
    {"mixed lengths causal GQA", BF16, 4, 2, 128, 1, -1, -1, 7,
     {1, 17, 0, 300, 1000, 5, 64}, {1, 17, 0, 300, 1000, 200, 64}, 0, 16, -1, 1},
    {"q > k, seqused_k", FP16, 2, 2, 64, 0, -1, -1, 4,
     {100, 1, 250, 33}, {37, 500, 250, 0}, 13, 0, -1, 0},
    {"MQA window", BF16, 8, 1, 256, 1, 32, -1, 3, {129, 64, 2}, {129, 300, 2}, 0, 7, -1, 0},
    {"d 96 chunked prefill", FP16, 3, 3, 96, 1, -1, -1, 8,
     {1, 1, 1, 40, 130, 0, 1, 77}, {900, 45, 1, 40, 260, 0, 2, 77}, 0, 0, -1, 0},
    {"d 32 windows", BF16, 2, 1, 32, 0, 20, 10, 5, {16, 64, 65, 1, 200},
     {16, 64, 65, 1, 180}, 0, 100, -1, 0},
    {"padding and a skipped sequence", BF16, 4, 4, 64, 1, -1, -1, 6,
     {50, 0, 400, 0, 0, 20}, {50, 0, 400, 0, 0, 20}, 0, 0, 2, 0},
};

/* ---- the accepted limits: total_q, total_k = 2^31 - 1 --------------------------------- */

typedef struct limit_case_t {
    const char *name;
    int64_t head_dim;          /* 8: the mma.sync kernels; 64: the Hopper ones on sm_90 */
    int64_t total_q, total_k;  /* rows of Q/O and K/V */
    int64_t max_q;             /* the planned longest query sequence */
    int n;
    int64_t cu_q[4];           /* query offsets; a sequence longer than max_q is skipped */
    int64_t k0[3], len_k[3];   /* each sequence's first key row and key count (seqused_k) */
} limit_case_t;

/* A packed batch at the largest total_q or total_k fa2_plan accepts, with sequences
 * at the very end of the rows. Q, K and V repeat one random row (row stride 0), so every
 * score of a row is the same: O = v and LSE = s + ln(keys the row sees), exactly
 * computable. O and the LSE (poisoned) are real: rows outside the sequences must stay
 * poisoned (a skipped sequence's and the spare rows, sampled). V's values are signed
 * powers of two, so that a sum of 2^22 of them is exact in fp32. Causal, bottom-right. */
static int run_limit_case(long index, const limit_case_t *c)
{
    const int64_t d = c->head_dim, n_o = c->total_q * d;
    int64_t max_k = 0, len_q[3];
    int32_t cu_q[4], cu_k[4], used[3];
    for (int b = 0; b < c->n; ++b) {
        len_q[b] = c->cu_q[b + 1] - c->cu_q[b];
        max_k = c->len_k[b] > max_k ? c->len_k[b] : max_k;
        cu_q[b] = (int32_t)c->cu_q[b];
        cu_k[b] = (int32_t)c->k0[b];
        used[b] = (int32_t)c->len_k[b];
    }
    cu_q[c->n] = (int32_t)c->cu_q[c->n];
    cu_k[c->n] = (int32_t)(c->k0[c->n - 1] + c->len_k[c->n - 1]);
    printf("case %ld: limit %s: total_q=%" PRId64 " total_k=%" PRId64 " d=%" PRId64, index,
           c->name, c->total_q, c->total_k, d);
    fa2_problem_t p;
    fa2_problem_init(&p, FA2_DTYPE_BF16, c->n, c->max_q, max_k, 1, 1, d);
    p.total_q = c->total_q;
    p.total_k = c->total_k;
    p.q_batch_stride = p.k_batch_stride = p.v_batch_stride = p.o_batch_stride = 0;
    p.q_seq_stride = p.k_seq_stride = p.v_seq_stride = 0; /* one row, repeated */
    p.causal = 1;
    fa2_plan_t plan;
    fa2_status_t st = fa2_plan(&p, &g_info, &plan);
    if (st != FA2_SUCCESS) {
        printf(" : fa2_plan: %s (%s) FAIL\n", fa2_status_string(st), fa2_last_error());
        return 0;
    }
    printf(" [sm%d %dx%d]", (int)plan.fwd_arch, (int)plan.block_m, (int)plan.block_n);
    const size_t o_bytes = 2 * (size_t)n_o, lse_bytes = 4 * (size_t)c->total_q;
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess ||
        (double)free_b < (double)(o_bytes + lse_bytes) + (double)(1ull << 30)) {
        printf(" : SKIP (needs %.1f GiB + 1 GiB, %.1f GiB free)\n",
               (double)(o_bytes + lse_bytes) / (1ull << 30), (double)free_b / (1ull << 30));
        return 1;
    }
    oracle_rng_t rng = case_rng(g_seed, index);
    float qv[64], kv[64], vv[64];
    uint16_t qb[64], kb[64], vb[64];
    fill(qv, qb, d, &rng, FA2_DTYPE_BF16);
    fill(kv, kb, d, &rng, FA2_DTYPE_BF16);
    for (int64_t x = 0; x < d; ++x) { /* signed powers of two: sums of up to 2^22 exact */
        const uint64_t r = oracle_rng_next(&rng);
        vv[x] = ldexpf(r & 1 ? -1.0f : 1.0f, (int)((r >> 1) % 5) - 2);
        vb[x] = oracle_bits_from_float(vv[x], FA2_DTYPE_BF16);
    }
    double s = 0.0; /* the one score: scale * q.k */
    for (int64_t x = 0; x < d; ++x)
        s += (double)qv[x] * kv[x];
    s *= oracle_softmax_scale(&p);
    void *dq = upload(qb, 2 * (size_t)d), *dk = upload(kb, 2 * (size_t)d),
         *dv = upload(vb, 2 * (size_t)d), *d_o = upload(NULL, o_bytes);
    float *dlse = upload(NULL, lse_bytes);
    int32_t *dcu_q = upload(cu_q, sizeof cu_q), *dcu_k = upload(cu_k, sizeof cu_k),
            *dused = upload(used, sizeof used);
    int pass = 0;
    st = fa2_forward_varlen(&plan, dq, dk, dv, d_o, dlse, dcu_q, dcu_k, dused, NULL, 0, NULL);
    if (st != FA2_SUCCESS) {
        printf(" : fa2_forward_varlen: %s (%s) FAIL\n", fa2_status_string(st),
               fa2_last_error());
        goto cleanup;
    }
    assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
    int64_t o_bad = 0, lse_bad = 0, poison_lost = 0;
    uint16_t row[64];
    float lse;
    for (int b = 0; b < c->n; ++b) { /* every row of every sequence */
        const int skipped = len_q[b] > c->max_q; /* past the plan: nothing written */
        for (int64_t i = 0; i < len_q[b]; i += skipped ? len_q[b] / 3 : 1) {
            const int64_t r = c->cu_q[b] + i;
            uint32_t lse_bits;
            assert_int_equal(cudaMemcpy(row, (uint16_t *)d_o + r * d, 2 * (size_t)d,
                                        cudaMemcpyDeviceToHost),
                             cudaSuccess);
            assert_int_equal(cudaMemcpy(&lse, dlse + r, 4, cudaMemcpyDeviceToHost), cudaSuccess);
            if (skipped) {
                memcpy(&lse_bits, &lse, 4);
                poison_lost += lse_bits != 0xFFFFFFFFu;
                for (int64_t x = 0; x < d; ++x)
                    poison_lost += row[x] != 0xFFFFu;
                continue;
            }
            const int64_t seen = i + c->len_k[b] - len_q[b] + 1; /* causal, bottom-right */
            const double want = seen > 0 ? s + log((double)seen) : -INFINITY;
            lse_bad += seen > 0 ? !(fabs(lse - want) <= LSE_TOL * fmax(1.0, fabs(want)))
                                : !(isinf(lse) && lse < 0);
            for (int64_t x = 0; x < d; ++x) {
                const double got = oracle_float_from_bits(row[x], FA2_DTYPE_BF16);
                const double w = seen > 0 ? vv[x] : 0.0;
                o_bad += !(fabs(got - w) <= 0x1p-8 * fabs(w) + 1e-6);
            }
        }
    }
    /* rows past the last offset (spare rows) stay poisoned too */
    for (int64_t r = c->cu_q[c->n]; r < c->total_q; r += (c->total_q - c->cu_q[c->n]) / 3 + 1) {
        uint32_t lse_bits;
        assert_int_equal(cudaMemcpy(row, (uint16_t *)d_o + r * d, 2 * (size_t)d,
                                    cudaMemcpyDeviceToHost),
                         cudaSuccess);
        assert_int_equal(cudaMemcpy(&lse_bits, dlse + r, 4, cudaMemcpyDeviceToHost),
                         cudaSuccess);
        poison_lost += lse_bits != 0xFFFFFFFFu;
        for (int64_t x = 0; x < d; ++x)
            poison_lost += row[x] != 0xFFFFu;
    }
    pass = o_bad == 0 && lse_bad == 0 && poison_lost == 0;
    printf(" : o_bad=%" PRId64 " lse_bad=%" PRId64 " written_outside=%" PRId64 " %s\n", o_bad,
           lse_bad, poison_lost, pass ? "PASS" : "FAIL");

cleanup:
    fflush(stdout);
    cudaFree(dq), cudaFree(dk), cudaFree(dv), cudaFree(d_o), cudaFree(dlse);
    cudaFree(dcu_q), cudaFree(dcu_k), cudaFree(dused);
    return pass;
}

#define MAX_ROWS INT32_MAX

/* name, d, total_q, total_k, max_q, n, cu_q, k0, len_k */
static const limit_case_t limit_cases[] = {
    /* Q and O at 2^31 - 1 rows (O: 32 GiB at d = 8), the last sequence ending on the last
     * row and the one before it too long for the plan (skipped); K/V at their limit too,
     * the last sequence's keys ending on the last key row, FA2_MAX_SEQLEN of them */
    {"rows of Q and K", 8, MAX_ROWS, MAX_ROWS, 1000, 3, {0, 17, MAX_ROWS - 1000, MAX_ROWS},
     {0, 40, MAX_ROWS - FA2_MAX_SEQLEN}, {40, 0, FA2_MAX_SEQLEN}},
    /* K/V at 2^31 - 1 rows on the Hopper kernels (d = 64), Q small with spare rows */
    {"rows of K, Hopper kernels", 64, 2000, MAX_ROWS, 1000, 2, {0, 300, 1300},
     {0, MAX_ROWS - 5000}, {300, 5000}},
};

static void test_packed_limits(void **state)
{
    (void)state;
    long failed = 0, run = 0;
    for (size_t i = 0; i < sizeof limit_cases / sizeof limit_cases[0]; ++i)
        if (g_only < 0 || g_only == 200 + (long)i)
            failed += !run_limit_case(200 + (long)i, &limit_cases[i]), ++run;
    printf("%ld of %ld limit cases failed (seed %" PRIu64 ")\n", failed, run, g_seed);
    assert_int_equal(failed, 0);
}

static void test_varlen_matches_oracle(void **state)
{
    (void)state;
    long failed = 0, run = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i)
        if (g_only < 0 || g_only == (long)i)
            failed += !run_case((long)i, &cases[i]), ++run;
    printf("%ld of %ld cases failed (seed %" PRIu64 ")\n", failed, run, g_seed);
    assert_int_equal(failed, 0);
}

int main(void)
{
    const int setup = gpu_test_setup("varlen", &g_info, &g_seed, &g_only);
    if (setup != 0)
        return setup;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_varlen_matches_oracle),
        cmocka_unit_test(test_packed_limits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
