/* fa2_combine on the GPU against a double-precision merge on the CPU.
 *
 * Random parts (O_i uniform in [-1, 1] rounded to the parts' dtype, LSE_i in [-4, 4])
 * for every pair of parts and output dtypes, 1 to 17 parts, head dims 8 to 256, padded
 * (non-contiguous) strides, parts with LSE_i = -inf holding NaN (must weigh nothing) and
 * rows whose parts are all -inf (O = 0, LSE = -inf). O and the LSE are poisoned first;
 * the padding between rows must stay poisoned. Bounds: O's relative L2 error within the
 * output dtype's rounding (fp32 1e-5, fp16 2e-3, bf16 1e-2), the LSE within 1e-5
 * relative. Then the use it exists for: libfa2's forward over two key ranges, merged,
 * against the forward over all the keys and the oracle. Then the accepted limits:
 * 2^31 - 1 rows and 2^31 - 1 heads (broadcast parts, 32 GiB outputs) and
 * FA2_MAX_COMBINE_PARTS parts.
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

static uint64_t g_seed;
static long g_only = -1;
static fa2_device_info_t g_info;

static size_t elem_bytes(fa2_dtype_t dt)
{
    return dt == FA2_DTYPE_FP32 ? 4 : 2;
}

/* Element i of a host buffer of dtype dt, as a float. */
static float get(const void *buf, size_t i, fa2_dtype_t dt)
{
    return dt == FA2_DTYPE_FP32 ? ((const float *)buf)[i]
                                : oracle_float_from_bits(((const uint16_t *)buf)[i], dt);
}

static void set(void *buf, size_t i, float x, fa2_dtype_t dt)
{
    if (dt == FA2_DTYPE_FP32)
        ((float *)buf)[i] = x;
    else
        ((uint16_t *)buf)[i] = oracle_bits_from_float(x, dt);
}

/* The merge of row r, head h in double: o (head_dim values) and the LSE. */
static double merge_ref(const fa2_combine_problem_t *p, const void *o_parts,
                        const float *lse_parts, int64_t r, int64_t h, double *o)
{
    double top = -INFINITY, sum = 0.0;
    for (int64_t x = 0; x < p->head_dim; ++x)
        o[x] = 0.0;
    for (int64_t i = 0; i < p->parts; ++i)
        top = fmax(top, lse_parts[i * p->lse_parts_part_stride + r * p->lse_parts_row_stride +
                                  h * p->lse_parts_head_stride]);
    if (top == -INFINITY)
        return -INFINITY;
    for (int64_t i = 0; i < p->parts; ++i)
        sum += exp(lse_parts[i * p->lse_parts_part_stride + r * p->lse_parts_row_stride +
                             h * p->lse_parts_head_stride] - top);
    const double lse = top + log(sum);
    for (int64_t i = 0; i < p->parts; ++i) {
        const double w = exp(lse_parts[i * p->lse_parts_part_stride +
                                       r * p->lse_parts_row_stride +
                                       h * p->lse_parts_head_stride] - lse);
        if (w == 0.0)
            continue;
        for (int64_t x = 0; x < p->head_dim; ++x)
            o[x] += w * get(o_parts,
                            (size_t)(i * p->o_parts_part_stride + r * p->o_parts_row_stride +
                                     h * p->o_parts_head_stride + x),
                            (fa2_dtype_t)p->parts_dtype);
    }
    return lse;
}

typedef struct combine_case_t {
    fa2_dtype_t parts_dtype, dtype;
    int64_t parts, rows, heads, head_dim;
    int64_t pad; /* extra elements after each head of O (and of the parts) */
} combine_case_t;

static const combine_case_t cases[] = {
    {FA2_DTYPE_FP32, FA2_DTYPE_BF16, 2, 33, 3, 128, 0},
    {FA2_DTYPE_FP32, FA2_DTYPE_FP32, 17, 20, 2, 64, 8},
    {FA2_DTYPE_FP32, FA2_DTYPE_FP16, 5, 7, 4, 256, 0},
    {FA2_DTYPE_BF16, FA2_DTYPE_BF16, 3, 65, 2, 8, 8},
    {FA2_DTYPE_FP16, FA2_DTYPE_FP16, 4, 17, 5, 96, 16},
    {FA2_DTYPE_BF16, FA2_DTYPE_FP32, 1, 9, 2, 64, 0},
    {FA2_DTYPE_FP16, FA2_DTYPE_BF16, 8, 1, 1, 32, 8},
};

static int run_case(long index, const combine_case_t *c)
{
    const int64_t n = c->parts, rows = c->rows, heads = c->heads, d = c->head_dim;
    const int64_t head_stride = d + c->pad;
    fa2_combine_problem_t p;
    fa2_combine_problem_init(&p, c->parts_dtype, c->dtype, n, rows, heads, d);
    p.o_parts_head_stride = p.o_head_stride = head_stride;
    p.o_parts_row_stride = p.o_row_stride = heads * head_stride;
    p.o_parts_part_stride = rows * heads * head_stride;
    const size_t n_parts = (size_t)(n * rows * heads * head_stride),
                 n_lse_parts = (size_t)(n * heads * rows),
                 n_o = (size_t)(rows * heads * head_stride),
                 n_lse = (size_t)(heads * rows);
    void *parts = malloc(n_parts * elem_bytes(c->parts_dtype)),
         *o = malloc(n_o * elem_bytes(c->dtype));
    float *lse_parts = malloc(sizeof(float) * n_lse_parts), *lse = malloc(sizeof(float) * n_lse);
    double *want = malloc(sizeof(double) * (size_t)d), *got = calloc(n_o, sizeof(double)),
           *ref = calloc(n_o, sizeof(double));
    assert_true(parts && o && lse_parts && lse && want && got && ref);
    oracle_rng_t rng = case_rng(g_seed, index);
    for (size_t i = 0; i < n_parts; ++i)
        set(parts, i, oracle_rng_uniform(&rng, -1.0f, 1.0f), c->parts_dtype);
    for (int64_t i = 0; i < n; ++i)
        for (int64_t h = 0; h < heads; ++h)
            for (int64_t r = 0; r < rows; ++r) {
                float *l = &lse_parts[(i * heads + h) * rows + r];
                *l = oracle_rng_uniform(&rng, -4.0f, 4.0f);
                /* empty parts: every third (row + part), and all of row 1's */
                if ((r + i) % 3 == 0 || (r == 1 && rows > 2)) {
                    *l = -INFINITY;
                    for (int64_t x = 0; x < d; ++x) /* NaN: must weigh nothing */
                        set(parts, (size_t)(i * p.o_parts_part_stride + r * p.o_parts_row_stride +
                                            h * head_stride + x),
                            NAN, c->parts_dtype);
                }
            }
    printf("case %ld: parts %d x %s -> %s, rows=%" PRId64 " heads=%" PRId64 " d=%" PRId64
           " pad=%" PRId64, index, (int)n, c->parts_dtype == FA2_DTYPE_FP32 ? "fp32"
           : c->parts_dtype == FA2_DTYPE_BF16 ? "bf16" : "fp16",
           c->dtype == FA2_DTYPE_FP32 ? "fp32" : c->dtype == FA2_DTYPE_BF16 ? "bf16" : "fp16",
           rows, heads, d, c->pad);
    void *d_parts = device_buffer(parts, n_parts * elem_bytes(c->parts_dtype)),
         *d_lse_parts = device_buffer(lse_parts, sizeof(float) * n_lse_parts),
         *d_o = device_buffer(NULL, n_o * elem_bytes(c->dtype)),
         *d_lse = device_buffer(NULL, sizeof(float) * n_lse);
    const fa2_status_t st = fa2_combine(&p, d_parts, d_lse_parts, d_o, d_lse, NULL);
    int pass = 0;
    if (st != FA2_SUCCESS) {
        printf(" : fa2_combine: %s (%s) FAIL\n", fa2_status_string(st), fa2_last_error());
        goto cleanup;
    }
    assert_int_equal(cudaMemcpy(o, d_o, n_o * elem_bytes(c->dtype), cudaMemcpyDeviceToHost),
                     cudaSuccess);
    assert_int_equal(cudaMemcpy(lse, d_lse, sizeof(float) * n_lse, cudaMemcpyDeviceToHost),
                     cudaSuccess);
    int64_t lse_bad = 0, empty_bad = 0, pad_written = 0, nonfinite = 0;
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t h = 0; h < heads; ++h) {
            const double wl = merge_ref(&p, parts, lse_parts, r, h, want);
            const float gl = lse[h * rows + r];
            lse_bad += isinf(wl) ? !(isinf(gl) && gl < 0)
                                 : !(fabs(gl - wl) <= 1e-5 * fmax(1.0, fabs(wl)));
            for (int64_t x = 0; x < head_stride; ++x) {
                const size_t at = (size_t)(r * heads * head_stride + h * head_stride + x);
                const float g = get(o, at, c->dtype);
                if (x >= d) {
                    pad_written += !isnan(g);
                    continue;
                }
                if (isinf(wl))
                    empty_bad += g != 0.0f;
                nonfinite += !isfinite(g);
                got[at] = g, ref[at] = want[x];
            }
        }
    const double err = oracle_rel_l2(got, ref, n_o);
    const double bound = c->dtype == FA2_DTYPE_FP32   ? 1e-5
                         : c->dtype == FA2_DTYPE_FP16 ? 2e-3
                                                      : 1e-2;
    pass = err <= bound && lse_bad == 0 && empty_bad == 0 && pad_written == 0 && nonfinite == 0;
    printf(" : err=%.2e (bound %.0e) lse_bad=%" PRId64 " empty_rows_bad=%" PRId64
           " padding_written=%" PRId64 " nonfinite=%" PRId64 " %s\n", err, bound, lse_bad,
           empty_bad, pad_written, nonfinite, pass ? "PASS" : "FAIL");
cleanup:
    fflush(stdout);
    cudaFree(d_parts), cudaFree(d_lse_parts), cudaFree(d_o), cudaFree(d_lse);
    free(parts), free(o), free(lse_parts), free(lse), free(want), free(got), free(ref);
    return pass;
}

static void test_combine_matches_reference(void **state)
{
    (void)state;
    long failed = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i)
        if (g_only < 0 || g_only == (long)i)
            failed += !run_case((long)i, &cases[i]);
    printf("%ld of %zu cases failed (seed %" PRIu64 ")\n", failed, sizeof cases / sizeof cases[0],
           g_seed);
    assert_int_equal(failed, 0);
}

/* Attention over keys [0, split) and [split, seqlen_k) by two fa2_forward calls (O and
 * LSE into the parts' buffers), merged, against one call over all keys and the oracle. */
static void test_split_keys_merge(void **state)
{
    (void)state;
    const int64_t sq = 64, sk = 300, split = 120, hq = 4, hkv = 2, d = 128;
    const int64_t nq = sq * hq * d, nk = sk * hkv * d;
    oracle_rng_t rng = case_rng(g_seed, 100);
    float *qv = malloc(sizeof(float) * nq), *kv = malloc(sizeof(float) * nk),
          *vv = malloc(sizeof(float) * nk);
    uint16_t *qb = malloc(2 * nq), *kb = malloc(2 * nk), *vb = malloc(2 * nk),
             *ob = malloc(2 * nq), *fb = malloc(2 * nq);
    double *want = malloc(sizeof(double) * nq), *got = malloc(sizeof(double) * nq),
           *full = malloc(sizeof(double) * nq), *want_lse = malloc(sizeof(double) * hq * sq);
    float *lse = malloc(sizeof(float) * hq * sq), *full_lse = malloc(sizeof(float) * hq * sq);
    assert_true(qv && kv && vv && qb && kb && vb && ob && fb && want && got && full && want_lse &&
                lse && full_lse);
    for (int64_t i = 0; i < nq; ++i)
        qb[i] = oracle_bits_from_float(oracle_rng_uniform(&rng, -1.f, 1.f), FA2_DTYPE_BF16),
        qv[i] = oracle_float_from_bits(qb[i], FA2_DTYPE_BF16);
    for (int64_t i = 0; i < nk; ++i) {
        kb[i] = oracle_bits_from_float(oracle_rng_uniform(&rng, -1.f, 1.f), FA2_DTYPE_BF16);
        vb[i] = oracle_bits_from_float(oracle_rng_uniform(&rng, -1.f, 1.f), FA2_DTYPE_BF16);
        kv[i] = oracle_float_from_bits(kb[i], FA2_DTYPE_BF16);
        vv[i] = oracle_float_from_bits(vb[i], FA2_DTYPE_BF16);
    }
    void *dq = device_buffer(qb, 2 * nq), *dk = device_buffer(kb, 2 * nk),
         *dv = device_buffer(vb, 2 * nk),
         *d_parts = device_buffer(NULL, 2 * 2 * nq), *d_o = device_buffer(NULL, 2 * nq),
         *d_full = device_buffer(NULL, 2 * nq);
    float *d_lse_parts = device_buffer(NULL, sizeof(float) * 2 * hq * sq),
          *d_lse = device_buffer(NULL, sizeof(float) * hq * sq),
          *d_full_lse = device_buffer(NULL, sizeof(float) * hq * sq);
    const int64_t range[3] = {0, split, sk};
    fa2_plan_t plan;
    fa2_problem_t p;
    for (int part = 0; part < 3; ++part) { /* part 2: all the keys */
        const int64_t k0 = part < 2 ? range[part] : 0, k1 = part < 2 ? range[part + 1] : sk;
        fa2_problem_init(&p, FA2_DTYPE_BF16, 1, sq, k1 - k0, hq, hkv, d);
        assert_int_equal(fa2_plan(&p, &g_info, &plan), FA2_SUCCESS);
        const size_t kv_off = (size_t)(k0 * hkv * d);
        void *o = part < 2 ? (uint16_t *)d_parts + part * nq : d_full;
        float *l = part < 2 ? d_lse_parts + part * hq * sq : d_full_lse;
        assert_int_equal(fa2_forward(&plan, dq, (uint16_t *)dk + kv_off, (uint16_t *)dv + kv_off,
                                     o, l, NULL, 0, NULL),
                         FA2_SUCCESS);
    }
    fa2_combine_problem_t cp;
    fa2_combine_problem_init(&cp, FA2_DTYPE_BF16, FA2_DTYPE_BF16, 2, sq, hq, d);
    assert_int_equal(fa2_combine(&cp, d_parts, d_lse_parts, d_o, d_lse, NULL), FA2_SUCCESS);
    assert_int_equal(cudaMemcpy(ob, d_o, 2 * nq, cudaMemcpyDeviceToHost), cudaSuccess);
    assert_int_equal(cudaMemcpy(fb, d_full, 2 * nq, cudaMemcpyDeviceToHost), cudaSuccess);
    assert_int_equal(cudaMemcpy(lse, d_lse, sizeof(float) * hq * sq, cudaMemcpyDeviceToHost),
                     cudaSuccess);
    assert_int_equal(cudaMemcpy(full_lse, d_full_lse, sizeof(float) * hq * sq,
                                cudaMemcpyDeviceToHost),
                     cudaSuccess);
    fa2_problem_init(&p, FA2_DTYPE_BF16, 1, sq, sk, hq, hkv, d);
    assert_int_equal(oracle_forward(&p, qv, kv, vv, want, want_lse), 0);
    double lse_err = 0.0;
    for (int64_t i = 0; i < nq; ++i) {
        got[i] = oracle_float_from_bits(ob[i], FA2_DTYPE_BF16);
        full[i] = oracle_float_from_bits(fb[i], FA2_DTYPE_BF16);
    }
    for (int64_t i = 0; i < hq * sq; ++i) /* LSE [heads, rows], the oracle's too */
        lse_err = fmax(lse_err, fabs(lse[i] - want_lse[i]) / fmax(1.0, fabs(want_lse[i])));
    const double err = oracle_rel_l2(got, want, (size_t)nq),
                 full_err = oracle_rel_l2(full, want, (size_t)nq);
    const int pass = err <= fmax(2.0 * full_err, 1e-2) && lse_err <= 1e-3;
    printf("split keys [0, %" PRId64 ") + [%" PRId64 ", %" PRId64 "), merged: err %.2e vs the "
           "oracle (one forward over all keys: %.2e), LSE err %.1e %s\n",
           split, split, sk, err, full_err, lse_err, pass ? "PASS" : "FAIL");
    cudaFree(dq), cudaFree(dk), cudaFree(dv), cudaFree(d_parts), cudaFree(d_o), cudaFree(d_full);
    cudaFree(d_lse_parts), cudaFree(d_lse), cudaFree(d_full_lse);
    free(qv), free(kv), free(vv), free(qb), free(kb), free(vb), free(ob), free(fb), free(want);
    free(got), free(full), free(want_lse), free(lse), free(full_lse);
    assert_true(pass);
}

/* The accepted limits: rows = 2^31 - 1 and heads = 2^31 - 1 (2 fp32 parts broadcast by
 * stride 0, a bf16 output of 32 GiB; sampled (row, head)s checked), and
 * FA2_MAX_COMBINE_PARTS parts. */
static void test_combine_limits(void **state)
{
    (void)state;
    long failed = 0, skipped = 0;
    for (int which = 0; which < 3; ++which) {
        const int many_parts = which == 1, many_heads = which == 2;
        const int64_t n = many_parts ? FA2_MAX_COMBINE_PARTS : 2,
                      rows = many_parts ? 3 : many_heads ? 1 : INT32_MAX,
                      heads = many_heads ? INT32_MAX : 1, d = 8;
        fa2_combine_problem_t p;
        fa2_combine_problem_init(&p, FA2_DTYPE_FP32, FA2_DTYPE_BF16, n, rows, heads, d);
        if (!many_parts) /* every (row, head) reads the same parts */
            p.o_parts_row_stride = p.lse_parts_row_stride = 0, p.o_parts_head_stride = 0,
            p.lse_parts_head_stride = 0, p.o_parts_part_stride = d, p.lse_parts_part_stride = 1;
        const size_t part_elems = many_parts ? (size_t)(n * rows * d) : (size_t)(n * d),
                     lse_elems = many_parts ? (size_t)(n * rows) : (size_t)n,
                     o_bytes = 2 * (size_t)(rows * heads * d);
        size_t free_b = 0, total_b = 0;
        printf("limit: parts=%" PRId64 " rows=%" PRId64 " heads=%" PRId64, n, rows, heads);
        if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess ||
            (double)free_b < (double)o_bytes + (double)(1ull << 30)) {
            printf(" : SKIP (%.1f GiB free)\n", (double)free_b / (1ull << 30));
            ++skipped;
            continue;
        }
        float *parts = malloc(sizeof(float) * part_elems),
              *lsep = malloc(sizeof(float) * lse_elems);
        double want[8];
        assert_true(parts && lsep);
        oracle_rng_t rng = case_rng(g_seed, 200 + which);
        for (size_t i = 0; i < part_elems; ++i)
            parts[i] = oracle_rng_uniform(&rng, -1.f, 1.f);
        for (size_t i = 0; i < lse_elems; ++i)
            lsep[i] = oracle_rng_uniform(&rng, -4.f, 4.f);
        void *d_parts = device_buffer(parts, sizeof(float) * part_elems),
             *d_o = device_buffer(NULL, o_bytes);
        float *d_lsep = device_buffer(lsep, sizeof(float) * lse_elems);
        int64_t bad = 0;
        const fa2_status_t st = fa2_combine(&p, d_parts, d_lsep, d_o, NULL, NULL);
        if (st != FA2_SUCCESS) {
            printf(" : %s (%s)", fa2_status_string(st), fa2_last_error());
            ++bad;
        } else {
            const int64_t units = rows * heads, sample[4] = {0, units / 2, units - 2, units - 1};
            for (int s = 0; s < 4; ++s) { /* (row, head) = unit / heads, unit % heads */
                const int64_t u = sample[s] < 0 ? 0 : sample[s];
                uint16_t row[8];
                assert_int_equal(cudaMemcpy(row, (uint16_t *)d_o + u * d, sizeof row,
                                            cudaMemcpyDeviceToHost),
                                 cudaSuccess);
                merge_ref(&p, parts, lsep, u / heads, u % heads, want);
                for (int x = 0; x < 8; ++x) {
                    const double g = oracle_float_from_bits(row[x], FA2_DTYPE_BF16);
                    bad += !(fabs(g - want[x]) <= 1e-2 * fabs(want[x]) + 1e-3);
                }
            }
        }
        printf(" : %" PRId64 " sampled values wrong %s\n", bad, bad ? "FAIL" : "PASS");
        failed += bad != 0;
        cudaFree(d_parts), cudaFree(d_o), cudaFree(d_lsep);
        free(parts), free(lsep);
    }
    assert_int_equal(failed, 0);
    if (skipped) /* not enough device memory: reported as skipped, not passed */
        skip();
}

int main(void)
{
    const int setup = gpu_test_setup("combine", &g_info, &g_seed, &g_only);
    if (setup != 0)
        return setup;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_combine_matches_reference),
        cmocka_unit_test(test_split_keys_merge),
        cmocka_unit_test(test_combine_limits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
