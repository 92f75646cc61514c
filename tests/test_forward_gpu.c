/* fa2_forward on the GPU against the double oracle, on fresh random inputs.
 *
 * For each case: random Q, K, V (uniform, rounded to the dtype; the oracle gets the
 * same rounded values); elements of a strided allocation that belong to no tensor hold
 * NaN, so a kernel that reads them shows it; O and LSE poisoned with 0xFF bytes (NaN)
 * before the run. Checks: every O and LSE element written and finite (LSE = -inf
 * exactly where the oracle has it, with O = 0 on those rows); O's holes and the guard
 * after each output untouched; rel L2 error of O within 1e-2 and within
 * max(2 x the error of a same-precision naive attention, floor); the worst element
 * within 4 x that reference's worst (or 2 ulp of max |O|); LSE within
 * 1e-3 * max(1, |lse|). Then: two runs bit-identical.
 *
 * Prints the seed and one line per case. FA2_TEST_SEED=<seed> replays a run,
 * FA2_TEST_CASE=<n> runs case n alone. Without a CUDA device: exit 77 (skipped). */
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

#define GUARD GPU_TENSOR_GUARD /* poisoned elements after each buffer */
#define MAX_REL_L2 1e-2   /* bf16 operands: a relative L2 error between 1e-3 and 1e-2 is expected */
#define FLOOR_FP16 1e-3   /* error allowed whatever the reference makes */
#define FLOOR_BF16 4e-3
#define MAX_ELEM_FACTOR 4 /* worst element within 4x the reference's worst */
#define LSE_TOL 1e-3      /* |lse - ref| / max(1, |ref|) */
#define SHOW 8            /* mismatching elements printed per failing case */

typedef struct gpu_case_t {
    fa2_dtype_t dtype;
    int64_t batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim;
    int32_t causal;
    int64_t window_left, window_right;
    float softmax_scale; /* 0: 1/sqrt(d) */
    layout_t layout;
    float amplitude;     /* inputs uniform in [-amplitude, amplitude]; 0 means 1 */
    int no_lse;          /* pass lse = NULL */
} gpu_case_t;

static uint64_t g_seed;
static long g_only = -1;
static fa2_device_info_t g_info;

/* ---- one case ----------------------------------------------------------------------- */

static void describe(long index, const gpu_case_t *c, const fa2_problem_t *p)
{
    describe_problem(index, p, c->layout);
    if (c->amplitude > 0 && c->amplitude != 1.0f)
        printf(" amp=%g", (double)c->amplitude);
    if (c->no_lse)
        printf(" lse=NULL");
}

/* Prints (b, s, h, x) of the first SHOW elements of O off by more than `limit` or
 * than 4 dtype ulps of (1 + |expected|), whichever is smaller, and the worst one. */
static void show_mismatches(const gpu_case_t *c, const double *got, const double *want,
                            const double *ref_lowp, double limit)
{
    const double eps = c->dtype == FA2_DTYPE_BF16 ? 0x1p-8 : 0x1p-11;
    const int64_t d = c->head_dim, hq = c->heads_q, sq = c->seqlen_q;
    const int64_t n = c->batch * sq * hq * d;
    int64_t shown = 0, bad = 0, worst = 0;
    double worst_err = -1.0;
    for (int64_t t = 0; t < n; ++t) {
        const double e = fabs(got[t] - want[t]);
        if (!(e <= worst_err)) /* NaN counts as worst */
            worst_err = e, worst = t;
        if (!(e <= fmin(limit, 4 * eps * (1.0 + fabs(want[t]))))) {
            ++bad;
            if (shown++ < SHOW)
                printf("  O[b=%" PRId64 ",s=%" PRId64 ",h=%" PRId64 ",x=%" PRId64
                       "] got %.6g expected %.6g (same-precision ref %.6g)\n",
                       t / (sq * hq * d), t / (hq * d) % sq, t / d % hq, t % d, got[t],
                       want[t], ref_lowp[t]);
        }
    }
    printf("  %" PRId64 " of %" PRId64 " elements off by more than min(%.2e, "
           "4 ulp*(1+|expected|)); worst at "
           "[b=%" PRId64 ",s=%" PRId64 ",h=%" PRId64 ",x=%" PRId64 "]: got %.6g expected %.6g\n",
           bad, n, limit, worst / (sq * hq * d), worst / (hq * d) % sq, worst / d % hq, worst % d,
           got[worst], want[worst]);
}

/* Runs one case; prints its line (and details on failure); returns 1 on pass. */
/* Runs one case, planned for `device`; prints its line (and details on failure);
 * returns 1 on pass. */
static int run_case(long index, const gpu_case_t *c, const fa2_device_info_t *device)
{
    fa2_problem_t p;
    fa2_problem_init(&p, c->dtype, c->batch, c->seqlen_q, c->seqlen_k, c->heads_q,
                     c->heads_kv, c->head_dim);
    p.causal = c->causal;
    p.window_left = c->window_left;
    p.window_right = c->window_right;
    p.softmax_scale = c->softmax_scale;
    apply_layout(&p, c->layout);
    describe(index, c, &p);
    fflush(stdout);

    fa2_plan_t plan;
    const fa2_status_t st = fa2_plan(&p, device, &plan);
    if (st != FA2_SUCCESS) {
        printf(" : fa2_plan: %s (%s) FAIL\n", fa2_status_string(st), fa2_last_error());
        return 0;
    }
    printf(" [sm%d %dx%d]", (int)plan.fwd_arch, (int)plan.block_m, (int)plan.block_n);

    oracle_rng_t rng = case_rng(g_seed, index);
    const float amp = c->amplitude > 0 ? c->amplitude : 1.0f;
    tensor_t q = tensor_new(p.batch, p.seqlen_q, p.heads_q, p.head_dim, p.q_batch_stride,
                            p.q_seq_stride, p.q_head_stride);
    tensor_t k = tensor_new(p.batch, p.seqlen_k, p.heads_kv, p.head_dim, p.k_batch_stride,
                            p.k_seq_stride, p.k_head_stride);
    tensor_t v = tensor_new(p.batch, p.seqlen_k, p.heads_kv, p.head_dim, p.v_batch_stride,
                            p.v_seq_stride, p.v_head_stride);
    tensor_t o = tensor_new(p.batch, p.seqlen_q, p.heads_q, p.head_dim, p.o_batch_stride,
                            p.o_seq_stride, p.o_head_stride);
    tensor_fill(&q, &rng, c->dtype, amp, 0);
    tensor_fill(&k, &rng, c->dtype, amp, 0);
    tensor_fill(&v, &rng, c->dtype, amp, 0);

    const int64_t n_o = p.batch * p.seqlen_q * p.heads_q * p.head_dim;
    const int64_t n_lse = p.batch * p.heads_q * p.seqlen_q;
    double *want = malloc(sizeof(double) * (size_t)n_o);
    double *want_lse = malloc(sizeof(double) * (size_t)n_lse);
    double *ref_lowp = malloc(sizeof(double) * (size_t)n_o);
    double *got = malloc(sizeof(double) * (size_t)n_o);
    char *in_o = calloc((size_t)o.alloc, 1); /* 1 where an O element lives */
    float *lse = malloc(sizeof(float) * (size_t)(n_lse + GUARD));
    assert_true(want && want_lse && ref_lowp && got && in_o && lse);

    int pass = 0;
    void *dq = NULL, *dk = NULL, *dv = NULL, *d_o = NULL, *dws = NULL;
    float *dlse = NULL;
    CUDA_CHECK(cudaMalloc(&dq, sizeof(uint16_t) * (size_t)q.alloc));
    CUDA_CHECK(cudaMalloc(&dk, sizeof(uint16_t) * (size_t)k.alloc));
    CUDA_CHECK(cudaMalloc(&dv, sizeof(uint16_t) * (size_t)v.alloc));
    CUDA_CHECK(cudaMalloc(&d_o, sizeof(uint16_t) * (size_t)o.alloc));
    CUDA_CHECK(cudaMalloc((void **)&dlse, sizeof(float) * (size_t)(n_lse + GUARD)));
    if (plan.workspace_bytes > 0)
        CUDA_CHECK(cudaMalloc(&dws, (size_t)plan.workspace_bytes));
    CUDA_CHECK(cudaMemcpy(dq, q.bits, sizeof(uint16_t) * (size_t)q.alloc,
                          cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(dk, k.bits, sizeof(uint16_t) * (size_t)k.alloc,
                          cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(dv, v.bits, sizeof(uint16_t) * (size_t)v.alloc,
                          cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemset(d_o, 0xFF, sizeof(uint16_t) * (size_t)o.alloc));
    CUDA_CHECK(cudaMemset(dlse, 0xFF, sizeof(float) * (size_t)(n_lse + GUARD)));

    const fa2_status_t fs = fa2_forward(&plan, dq, dk, dv, d_o, c->no_lse ? NULL : dlse, dws,
                                        (size_t)plan.workspace_bytes, NULL);
    if (fs != FA2_SUCCESS) {
        printf(" : fa2_forward: %s (%s) FAIL\n", fa2_status_string(fs), fa2_last_error());
        goto cleanup;
    }
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaMemcpy(o.bits, d_o, sizeof(uint16_t) * (size_t)o.alloc,
                          cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(lse, dlse, sizeof(float) * (size_t)(n_lse + GUARD),
                          cudaMemcpyDeviceToHost));

    /* references, from the same rounded inputs */
    assert_int_equal(oracle_forward(&p, q.vals, k.vals, v.vals, want, want_lse), 0);
    assert_int_equal(oracle_forward_rounded(&p, q.vals, k.vals, v.vals, ref_lowp), 0);

    /* gather O; every element written and finite; masked rows exactly 0 */
    int64_t n_nonfinite = 0, n_masked_nonzero = 0, first_bad = -1;
    for (int64_t b = 0; b < p.batch; ++b)
        for (int64_t i = 0; i < p.seqlen_q; ++i)
            for (int64_t h = 0; h < p.heads_q; ++h) {
                const int masked = isinf(want_lse[(b * p.heads_q + h) * p.seqlen_q + i]);
                for (int64_t x = 0; x < p.head_dim; ++x) {
                    const int64_t at = tensor_offset(&o, b, i, h) + x;
                    const int64_t t = ((b * p.seqlen_q + i) * p.heads_q + h) * p.head_dim + x;
                    in_o[at] = 1;
                    got[t] = oracle_float_from_bits(o.bits[at], c->dtype);
                    if (!isfinite(got[t]))
                        n_nonfinite++, first_bad = first_bad < 0 ? t : first_bad;
                    else if (masked && got[t] != 0.0)
                        n_masked_nonzero++, first_bad = first_bad < 0 ? t : first_bad;
                }
            }
    int64_t n_clobbered = 0, first_clobbered = -1;
    for (int64_t at = 0; at < o.alloc; ++at)
        if (!in_o[at] && o.bits[at] != 0xFFFFu)
            n_clobbered++, first_clobbered = first_clobbered < 0 ? at : first_clobbered;

    /* LSE: finite and close, -inf exactly where the oracle has it; guard untouched */
    int64_t n_lse_bad = 0, first_lse_bad = -1;
    double lse_err = 0.0;
    if (!c->no_lse)
        for (int64_t t = 0; t < n_lse; ++t) {
            const double w = want_lse[t], g = lse[t];
            double e;
            if (isinf(w))
                e = g == w ? 0.0 : INFINITY;
            else
                e = isfinite(g) ? fabs(g - w) / fmax(1.0, fabs(w)) : INFINITY;
            if (!(e <= LSE_TOL))
                n_lse_bad++, first_lse_bad = first_lse_bad < 0 ? t : first_lse_bad;
            if (!(e <= lse_err))
                lse_err = e;
        }
    int64_t n_lse_written = 0;
    for (int64_t t = c->no_lse ? 0 : n_lse; t < n_lse + GUARD; ++t) {
        uint32_t bits;
        memcpy(&bits, &lse[t], sizeof bits);
        n_lse_written += bits != 0xFFFFFFFFu;
    }

    const double err = oracle_rel_l2(got, want, (size_t)n_o);
    const double ref_err = oracle_rel_l2(ref_lowp, want, (size_t)n_o);
    const double floor = c->dtype == FA2_DTYPE_BF16 ? FLOOR_BF16 : FLOOR_FP16;
    const double bound = fmin(MAX_REL_L2, fmax(2.0 * ref_err, floor));
    /* the worst element too, so that one wrong row cannot hide in the L2 norm */
    const double max_err = oracle_max_abs_err(got, want, (size_t)n_o);
    const double ref_max = oracle_max_abs_err(ref_lowp, want, (size_t)n_o);
    const double eps = c->dtype == FA2_DTYPE_BF16 ? 0x1p-8 : 0x1p-11;
    double want_max = 0.0;
    for (int64_t t = 0; t < n_o; ++t)
        want_max = fmax(want_max, fabs(want[t]));
    const double max_bound = fmax(MAX_ELEM_FACTOR * ref_max, 2.0 * eps * want_max);
    pass = err <= bound && max_err <= max_bound && n_nonfinite == 0 &&
           n_masked_nonzero == 0 && n_clobbered == 0 && n_lse_bad == 0 && n_lse_written == 0;
    printf(" : err=%.3e ref=%.3e bound=%.3e max=%.2e ref_max=%.2e lse_err=%.2e %s\n", err,
           ref_err, bound, max_err, ref_max, lse_err, pass ? "PASS" : "FAIL");
    if (!pass) {
        if (n_nonfinite)
            printf("  %" PRId64 " O elements not finite (unwritten: NaN poison)\n", n_nonfinite);
        if (n_masked_nonzero)
            printf("  %" PRId64 " O elements nonzero on rows with no visible key\n",
                   n_masked_nonzero);
        if (first_bad >= 0)
            printf("  first such: flat index %" PRId64 " (contiguous [b,s,h,d]) = %g\n",
                   first_bad, got[first_bad]);
        if (n_clobbered)
            printf("  %" PRId64 " O elements outside the tensor were written; first at "
                   "offset %" PRId64 " of %" PRId64 " (bits 0x%04x)\n",
                   n_clobbered, first_clobbered, o.alloc, o.bits[first_clobbered]);
        if (n_lse_bad)
            printf("  %" PRId64 " LSE values off; first [b*hq+h=%" PRId64 ", s=%" PRId64
                   "]: got %.7g expected %.7g\n",
                   n_lse_bad, first_lse_bad / p.seqlen_q, first_lse_bad % p.seqlen_q,
                   (double)lse[first_lse_bad], want_lse[first_lse_bad]);
        if (n_lse_written)
            printf("  %" PRId64 " LSE floats written that should not be (%s)\n", n_lse_written,
                   c->no_lse ? "lse=NULL" : "guard past the end");
        show_mismatches(c, got, want, ref_lowp, max_bound);
    }

cleanup:
    fflush(stdout);
    cudaFree(dq), cudaFree(dk), cudaFree(dv), cudaFree(d_o), cudaFree(dlse), cudaFree(dws);
    tensor_free(&q), tensor_free(&k), tensor_free(&v), tensor_free(&o);
    free(want), free(want_lse), free(ref_lowp), free(got), free(in_o), free(lse);
    return pass;
}

/* ---- the cases ---------------------------------------------------------------------- */

#define FP16 FA2_DTYPE_FP16
#define BF16 FA2_DTYPE_BF16

/* dtype, b, q, k, hq, hkv, d, causal, left, right, scale, layout, amplitude, no_lse */
static const gpu_case_t fixed_cases[] = {
    /* odd lengths, q != k both ways, lengths that fit no tile */
    {BF16, 1, 1, 1, 2, 2, 128, 0, -1, -1, 0, BSHD, 0, 0},
    {FP16, 2, 1, 17, 2, 2, 64, 0, -1, -1, 0, BSHD, 0, 0},
    {BF16, 2, 17, 1, 2, 2, 64, 1, -1, -1, 0, BSHD, 0, 0},
    {FP16, 1, 17, 17, 4, 4, 96, 1, -1, -1, 0, BSHD, 0, 0},
    {BF16, 1, 1, 1000, 4, 4, 128, 1, -1, -1, 0, BSHD, 0, 0},
    {FP16, 1, 1000, 1, 2, 2, 64, 0, -1, -1, 0, BSHD, 0, 0},
    {BF16, 1, 100, 1000, 4, 2, 128, 0, -1, -1, 0, BSHD, 0, 0},
    {BF16, 1, 100, 1000, 4, 2, 128, 1, -1, -1, 0, BSHD, 0, 0},
    {FP16, 1, 1000, 100, 4, 2, 64, 0, -1, -1, 0, BSHD, 0, 0},
    {FP16, 1, 1000, 100, 4, 2, 64, 1, -1, -1, 0, BSHD, 0, 0}, /* 900 rows see nothing */
    /* the long square cases */
    {BF16, 1, 1000, 1000, 2, 2, 128, 0, -1, -1, 0, BSHD, 0, 0},
    {FP16, 1, 1000, 1000, 2, 2, 128, 1, -1, -1, 0, BSHD, 0, 0},
    {BF16, 1, 1000, 1000, 2, 1, 256, 1, -1, -1, 0, BHSD, 0, 0},
    {FP16, 1, 1000, 1000, 2, 2, 64, 0, 100, 50, 0, BSHD, 0, 0},
    /* sliding windows: left only, right only, both, with causal, diagonal only */
    {BF16, 2, 300, 300, 2, 2, 64, 0, 50, -1, 0, BSHD, 0, 0},
    {FP16, 2, 300, 300, 2, 2, 128, 0, -1, 20, 0, BSHD, 0, 0},
    {BF16, 1, 200, 333, 2, 2, 96, 0, 30, 10, 0, BSHD, 0, 0},
    {FP16, 1, 333, 200, 2, 2, 256, 0, 30, 10, 0, BSHD, 0, 0},
    {BF16, 1, 257, 257, 2, 2, 192, 1, 64, -1, 0, BSHD, 0, 0},
    {FP16, 1, 129, 129, 2, 2, 32, 1, 0, -1, 0, BSHD, 0, 0},
    {BF16, 1, 300, 100, 2, 2, 72, 0, 0, 0, 0, BSHD, 0, 0},   /* 200 empty rows */
    {BF16, 1, 100, 300, 2, 2, 64, 0, 3, -1, 0, BSHD, 0, 0},  /* right unbounded */
    /* GQA and MQA */
    {BF16, 2, 100, 100, 8, 2, 128, 1, -1, -1, 0, BSHD, 0, 0},
    {FP16, 2, 100, 137, 8, 2, 64, 0, -1, -1, 0, BHSD, 0, 0},
    {BF16, 1, 200, 200, 8, 1, 128, 0, -1, -1, 0, BSHD, 0, 0},
    {FP16, 1, 77, 200, 8, 1, 256, 1, -1, -1, 0, PADDED, 0, 0},
    /* seqlen_k = 0: O = 0, LSE = -inf */
    {BF16, 2, 17, 0, 2, 1, 64, 0, -1, -1, 0, BSHD, 0, 0},
    {FP16, 1, 100, 0, 2, 2, 128, 1, -1, -1, 0, BHSD, 0, 0},
    /* strides: BHSD and padded, with non-bucket head dims */
    {BF16, 2, 100, 100, 4, 4, 128, 0, -1, -1, 0, BHSD, 0, 0},
    {FP16, 2, 100, 120, 4, 2, 40, 1, -1, -1, 0, BHSD, 0, 0},
    {BF16, 2, 100, 120, 4, 2, 72, 0, -1, -1, 0, PADDED, 0, 0},
    {FP16, 2, 65, 130, 4, 4, 136, 0, 20, 20, 0, PADDED, 0, 0},
    {BF16, 1, 100, 100, 2, 2, 200, 1, -1, -1, 0, PADDED, 0, 0},
    {FP16, 1, 33, 47, 2, 2, 8, 0, -1, -1, 0, PADDED, 0, 0},
    /* custom scales and larger inputs (peaky rows) */
    {BF16, 1, 100, 100, 2, 2, 64, 0, -1, -1, 0.5f, BSHD, 0, 0},
    {FP16, 1, 100, 100, 2, 2, 128, 1, -1, -1, 0.01f, BSHD, 0, 0},
    {BF16, 1, 100, 200, 2, 2, 128, 0, -1, -1, 2.0f, BSHD, 0, 0},
    {FP16, 1, 150, 150, 2, 2, 64, 1, -1, -1, 0, BSHD, 4.0f, 0},
    {BF16, 1, 150, 150, 2, 2, 256, 0, -1, -1, 0, BHSD, 3.0f, 0},
    /* d = 128's bucket at the producer layout's edge (dense: more than 64 rows take it):
     * 64 rows (one-warpgroup tile), 65 (the second math warpgroup holds one row), 129
     * (the second block one row), d = 112 (zero-filled columns), windows, MQA, q > k */
    {BF16, 2, 64, 300, 4, 2, 128, 1, -1, -1, 0, BSHD, 0, 0},
    {BF16, 2, 65, 300, 4, 2, 128, 1, -1, -1, 0, BSHD, 0, 0},
    {FP16, 1, 65, 65, 2, 2, 112, 0, -1, -1, 0, BHSD, 0, 0},
    {BF16, 1, 129, 129, 2, 2, 112, 1, 40, -1, 0, PADDED, 0, 0},
    {FP16, 2, 129, 77, 4, 1, 128, 0, 30, 30, 0, BSHD, 0, 0},
    {BF16, 1, 257, 1000, 2, 2, 120, 0, -1, -1, 0, BSHD, 2.0f, 0},
    /* lse = NULL */
    {FP16, 1, 100, 100, 2, 2, 64, 1, -1, -1, 0, BSHD, 0, 1},
    {BF16, 1, 100, 100, 2, 1, 192, 0, -1, -1, 0, PADDED, 0, 1},
};

/* Every head dim, bucket or not, both dtypes, causal and not, q != k. */
static const int64_t sweep_dims[] = {8, 32, 40, 64, 72, 96, 128, 136, 192, 200, 256};

static void test_forward_matches_oracle(void **state)
{
    (void)state;
    long index = 0, failed = 0, run = 0;
    for (size_t di = 0; di < sizeof sweep_dims / sizeof sweep_dims[0]; ++di)
        for (int dt = 0; dt < 2; ++dt)
            for (int causal = 0; causal < 2; ++causal, ++index) {
                const gpu_case_t c = {dt ? BF16 : FP16, 2, causal ? 100 : 130,
                                      causal ? 160 : 97, 3, 3, sweep_dims[di], causal, -1, -1,
                                      0, BSHD, 0, 0};
                if (g_only < 0 || g_only == index)
                    failed += !run_case(index, &c, &g_info), ++run;
            }
    for (size_t t = 0; t < sizeof fixed_cases / sizeof fixed_cases[0]; ++t, ++index)
        if (g_only < 0 || g_only == index)
            failed += !run_case(index, &fixed_cases[t], &g_info), ++run;
    printf("%ld of %ld cases failed (seed %" PRIu64 ")\n", failed, run, g_seed);
    assert_int_equal(failed, 0);
}

/* Plans made for a 99 KiB device (sm_89) at every bucket, run here: the compact tile
 * where the main one does not fit (d > 192), the main tile elsewhere. */
static void test_forward_99k_device(void **state)
{
    (void)state;
    const fa2_device_info_t consumer = consumer_device_info(&g_info);
    const int64_t dims[] = CONSUMER_DIMS;
    long index = 1000, failed = 0, run = 0;
    printf("planned for sm_89 with 101376 bytes of shared memory per block:\n");
    for (size_t di = 0; di < sizeof dims / sizeof dims[0]; ++di)
        for (int dt = 0; dt < 2; ++dt, ++index) {
            const int causal = (int)((di + (size_t)dt) % 2);
            const gpu_case_t c = {dt ? BF16 : FP16, 2, causal ? 200 : 130, causal ? 260 : 97,
                                  4, 2, dims[di], causal, -1, -1, 0, BSHD, 0, 0};
            if (g_only < 0 || g_only == index)
                failed += !run_case(index, &c, &consumer), ++run;
        }
    printf("%ld of %ld cases failed (seed %" PRIu64 ")\n", failed, run, g_seed);
    assert_int_equal(failed, 0);
}

/* Two runs of the same problem on the same inputs (on a non-default stream) give
 * bit-identical O and LSE. */
static void test_forward_deterministic(void **state)
{
    (void)state;
    fa2_problem_t p;
    fa2_problem_init(&p, BF16, 2, 1000, 1000, 8, 2, 128);
    p.causal = 1;
    fa2_plan_t plan;
    assert_int_equal(fa2_plan(&p, &g_info, &plan), FA2_SUCCESS);

    const int64_t n_q = p.batch * p.seqlen_q * p.heads_q * p.head_dim;
    const int64_t n_kv = p.batch * p.seqlen_k * p.heads_kv * p.head_dim;
    const int64_t n_lse = p.batch * p.heads_q * p.seqlen_q;
    uint16_t *h_in = malloc(sizeof(uint16_t) * (size_t)(n_q > n_kv ? n_q : n_kv));
    uint16_t *o1 = malloc(sizeof(uint16_t) * (size_t)n_q);
    uint16_t *o2 = malloc(sizeof(uint16_t) * (size_t)n_q);
    float *l1 = malloc(sizeof(float) * (size_t)n_lse), *l2 = malloc(sizeof(float) * (size_t)n_lse);
    assert_true(h_in && o1 && o2 && l1 && l2);
    oracle_rng_t rng = oracle_rng(g_seed + 12345);
    int pass = 0;
    void *dq = NULL, *dk = NULL, *dv = NULL, *d_o = NULL, *dws = NULL;
    float *dlse = NULL;
    cudaStream_t stream = NULL;
    CUDA_CHECK(cudaStreamCreate(&stream));
    CUDA_CHECK(cudaMalloc(&dq, sizeof(uint16_t) * (size_t)n_q));
    CUDA_CHECK(cudaMalloc(&dk, sizeof(uint16_t) * (size_t)n_kv));
    CUDA_CHECK(cudaMalloc(&dv, sizeof(uint16_t) * (size_t)n_kv));
    CUDA_CHECK(cudaMalloc(&d_o, sizeof(uint16_t) * (size_t)n_q));
    CUDA_CHECK(cudaMalloc((void **)&dlse, sizeof(float) * (size_t)n_lse));
    if (plan.workspace_bytes > 0)
        CUDA_CHECK(cudaMalloc(&dws, (size_t)plan.workspace_bytes));
    void *ins[3] = {dq, dk, dv};
    const int64_t sizes[3] = {n_q, n_kv, n_kv};
    for (int t = 0; t < 3; ++t) {
        for (int64_t x = 0; x < sizes[t]; ++x)
            h_in[x] = oracle_bf16_from_float(oracle_rng_uniform(&rng, -1.0f, 1.0f));
        CUDA_CHECK(cudaMemcpy(ins[t], h_in, sizeof(uint16_t) * (size_t)sizes[t],
                              cudaMemcpyHostToDevice));
    }
    for (int r = 0; r < 2; ++r) {
        CUDA_CHECK(cudaMemsetAsync(d_o, 0xFF, sizeof(uint16_t) * (size_t)n_q, stream));
        CUDA_CHECK(cudaMemsetAsync(dlse, 0xFF, sizeof(float) * (size_t)n_lse, stream));
        const fa2_status_t fs = fa2_forward(&plan, dq, dk, dv, d_o, dlse, dws,
                                            (size_t)plan.workspace_bytes, stream);
        if (fs != FA2_SUCCESS) {
            printf("determinism: fa2_forward: %s (%s)\n", fa2_status_string(fs),
                   fa2_last_error());
            goto cleanup;
        }
        CUDA_CHECK(cudaGetLastError());
        CUDA_CHECK(cudaStreamSynchronize(stream));
        CUDA_CHECK(cudaMemcpy(r ? o2 : o1, d_o, sizeof(uint16_t) * (size_t)n_q,
                              cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaMemcpy(r ? l2 : l1, dlse, sizeof(float) * (size_t)n_lse,
                              cudaMemcpyDeviceToHost));
    }
    int64_t o_diff = 0, l_diff = 0;
    for (int64_t x = 0; x < n_q; ++x)
        o_diff += o1[x] != o2[x];
    for (int64_t x = 0; x < n_lse; ++x)
        l_diff += memcmp(&l1[x], &l2[x], sizeof(float)) != 0;
    pass = o_diff == 0 && l_diff == 0;
    printf("determinism: bf16 b=2 q=k=1000 hq=8 hkv=2 d=128 causal, 2 runs on a stream: "
           "%" PRId64 " O and %" PRId64 " LSE elements differ %s\n",
           o_diff, l_diff, pass ? "PASS" : "FAIL");

cleanup:
    fflush(stdout);
    if (stream)
        cudaStreamDestroy(stream);
    cudaFree(dq), cudaFree(dk), cudaFree(dv), cudaFree(d_o), cudaFree(dlse), cudaFree(dws);
    free(h_in), free(o1), free(o2), free(l1), free(l2);
    assert_true(pass);
}

int main(void)
{
    const int setup = gpu_test_setup("forward", &g_info, &g_seed, &g_only);
    if (setup != 0)
        return setup;
    printf("inputs uniform in [-amp, amp] (amp 1 unless shown), rounded to the dtype; "
           "holes of strided inputs hold NaN; outputs poisoned with NaN\n");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forward_matches_oracle),
        cmocka_unit_test(test_forward_99k_device),
        cmocka_unit_test(test_forward_deterministic),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
