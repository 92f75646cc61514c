/* The oracle checked on cases computed by hand and on properties any attention must
 * have; the fp16/bf16 conversions, RNG and error metrics it ships with. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "fa2.h"
#include "oracle.h"

/* ---- helpers ------------------------------------------------------------------------ */

static float *random_floats(oracle_rng_t *rng, int64_t n)
{
    float *x = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    assert_non_null(x);
    for (int64_t t = 0; t < n; ++t)
        x[t] = oracle_rng_uniform(rng, -1.0f, 1.0f);
    return x;
}

static double *doubles(int64_t n)
{
    double *x = calloc((size_t)(n > 0 ? n : 1), sizeof(double));
    assert_non_null(x);
    return x;
}

static int64_t o_elems(const fa2_problem_t *p)
{
    return p->batch * p->seqlen_q * p->heads_q * p->head_dim;
}

static int64_t lse_elems(const fa2_problem_t *p)
{
    return p->batch * p->heads_q * p->seqlen_q;
}

static int64_t kv_elems(const fa2_problem_t *p)
{
    return p->batch * p->seqlen_k * p->heads_kv * p->head_dim;
}

/* ---- hand-checkable cases ----------------------------------------------------------- */

/* One key: every row attends to it alone, so O = V exactly and LSE = its score. */
static void test_single_key_gives_v(void **state)
{
    (void)state;
    fa2_problem_t p;
    fa2_problem_init(&p, FA2_DTYPE_FP16, 2, 5, 1, 3, 3, 16);
    oracle_rng_t rng = oracle_rng(1);
    float *q = random_floats(&rng, 2 * 5 * 3 * 16);
    float *k = random_floats(&rng, kv_elems(&p));
    float *v = random_floats(&rng, kv_elems(&p));
    double *o = doubles(o_elems(&p)), *lse = doubles(lse_elems(&p));
    assert_int_equal(oracle_forward(&p, q, k, v, o, lse), 0);
    const double scale = 1.0 / 4.0;
    for (int64_t b = 0; b < 2; ++b)
        for (int64_t i = 0; i < 5; ++i)
            for (int64_t h = 0; h < 3; ++h) {
                const float *qi = q + ((b * 5 + i) * 3 + h) * 16;
                const float *kv0 = k + (b * 3 + h) * 16;
                const float *vv0 = v + (b * 3 + h) * 16;
                double s = 0.0;
                for (int x = 0; x < 16; ++x) {
                    assert_true(o[((b * 5 + i) * 3 + h) * 16 + x] == (double)vv0[x]);
                    s += (double)qi[x] * kv0[x];
                }
                assert_float_equal(lse[(b * 3 + h) * 5 + i], scale * s, 1e-12);
            }
    free(q), free(k), free(v), free(o), free(lse);
}

/* Identical keys give equal scores: O is the mean of V, LSE = s + log(seqlen_k). */
static void test_uniform_scores_give_mean(void **state)
{
    (void)state;
    const int64_t lk = 7, d = 8;
    fa2_problem_t p;
    fa2_problem_init(&p, FA2_DTYPE_BF16, 1, 3, lk, 1, 1, d);
    oracle_rng_t rng = oracle_rng(2);
    float *q = random_floats(&rng, 3 * d);
    float *k = random_floats(&rng, lk * d);
    float *v = random_floats(&rng, lk * d);
    for (int64_t j = 1; j < lk; ++j)
        memcpy(k + j * d, k, sizeof(float) * (size_t)d);
    double *o = doubles(3 * d), *lse = doubles(3);
    assert_int_equal(oracle_forward(&p, q, k, v, o, lse), 0);
    for (int64_t i = 0; i < 3; ++i) {
        double s = 0.0;
        for (int64_t x = 0; x < d; ++x) {
            double mean = 0.0;
            for (int64_t j = 0; j < lk; ++j)
                mean += v[j * d + x];
            assert_float_equal(o[i * d + x], mean / lk, 1e-14);
            s += (double)q[i * d + x] * k[x];
        }
        assert_float_equal(lse[i], s / sqrt((double)d) + log((double)lk), 1e-14);
    }
    free(q), free(k), free(v), free(o), free(lse);
}

/* head_dim 1, scale 1, seqlen_q 2, seqlen_k 3, causal: the diagonal is shifted right by
 * seqlen_k - seqlen_q = 1, so row 0 sees keys 0..1 and row 1 sees keys 0..2. */
static void test_causal_bottom_right_2x3(void **state)
{
    (void)state;
    fa2_problem_t p;
    fa2_problem_init(&p, FA2_DTYPE_FP16, 1, 2, 3, 1, 1, 1);
    p.causal = 1;
    p.softmax_scale = 1.0f;
    const float q[2] = {1, 2}, k[3] = {1, 0, -1}, v[3] = {1, 2, 3};
    double o[2], lse[2];
    assert_int_equal(oracle_forward(&p, q, k, v, o, lse), 0);
    const double e = exp(1.0);
    /* row 0: scores (1, 0) */
    assert_float_equal(o[0], (e * 1 + 1 * 2) / (e + 1), 1e-15);
    assert_float_equal(lse[0], log(e + 1), 1e-15);
    /* row 1: scores (2, 0, -2) */
    const double z = e * e + 1 + 1 / (e * e);
    assert_float_equal(o[1], (e * e * 1 + 2 + 3 / (e * e)) / z, 1e-15);
    assert_float_equal(lse[1], log(z), 1e-15);
}

/* seqlen_q 3 > seqlen_k 2, causal: diagonal shifted left by 1, row 0 sees no key. */
static void test_fully_masked_row(void **state)
{
    (void)state;
    fa2_problem_t p;
    fa2_problem_init(&p, FA2_DTYPE_FP16, 1, 3, 2, 1, 1, 1);
    p.causal = 1;
    p.softmax_scale = 1.0f;
    const float q[3] = {1, 1, 1}, k[2] = {0, 0}, v[2] = {5, 7};
    double o[3], lse[3];
    assert_int_equal(oracle_forward(&p, q, k, v, o, lse), 0);
    assert_true(o[0] == 0.0);
    assert_true(isinf(lse[0]) && lse[0] < 0);
    assert_float_equal(o[1], 5.0, 0.0);
    assert_float_equal(lse[1], 0.0, 0.0);
    assert_float_equal(o[2], 6.0, 1e-15);
    assert_float_equal(lse[2], log(2.0), 1e-15);

    /* seqlen_k = 0: no row sees a key */
    fa2_problem_init(&p, FA2_DTYPE_FP16, 1, 3, 0, 1, 1, 1);
    assert_int_equal(oracle_forward(&p, q, k, v, o, lse), 0);
    for (int i = 0; i < 3; ++i) {
        assert_true(o[i] == 0.0);
        assert_true(isinf(lse[i]) && lse[i] < 0);
    }
}

/* The key ranges of a few masks, by hand. */
static void test_key_ranges(void **state)
{
    (void)state;
    fa2_problem_t p;
    int64_t lo, hi;
    fa2_problem_init(&p, FA2_DTYPE_FP16, 1, 4, 6, 1, 1, 8); /* diag(i) = i + 2 */
    assert_true(oracle_key_range(&p, 0, &lo, &hi) && lo == 0 && hi == 5);
    p.causal = 1;
    assert_true(oracle_key_range(&p, 0, &lo, &hi) && lo == 0 && hi == 2);
    assert_true(oracle_key_range(&p, 3, &lo, &hi) && lo == 0 && hi == 5);
    p.window_left = 1;
    assert_true(oracle_key_range(&p, 0, &lo, &hi) && lo == 1 && hi == 2);
    assert_true(oracle_key_range(&p, 3, &lo, &hi) && lo == 4 && hi == 5);
    p.causal = 0;
    p.window_right = 2;
    assert_true(oracle_key_range(&p, 0, &lo, &hi) && lo == 1 && hi == 4);
    assert_true(oracle_key_range(&p, 3, &lo, &hi) && lo == 4 && hi == 5);
    p.window_left = -1;
    p.window_right = 0;
    p.causal = 0; /* window_right 0 is causal */
    assert_true(oracle_key_range(&p, 1, &lo, &hi) && lo == 0 && hi == 3);
    /* seqlen_q > seqlen_k: diag(i) = i - 3 */
    fa2_problem_init(&p, FA2_DTYPE_FP16, 1, 6, 3, 1, 1, 8);
    p.causal = 1;
    assert_false(oracle_key_range(&p, 2, &lo, &hi));
    assert_true(oracle_key_range(&p, 3, &lo, &hi) && lo == 0 && hi == 0);
    p.causal = 0;
    p.window_left = 0; /* only keys right of the diagonal, unbounded */
    assert_false(oracle_key_range(&p, 6 + 3, &lo, &hi)); /* past the last key */
    assert_true(oracle_key_range(&p, 4, &lo, &hi) && lo == 1 && hi == 2);
}

/* ---- properties ------------------------------------------------------------------- */

/* Each row equals an unmasked attention over exactly its key range. */
static void test_mask_equals_key_subrange(void **state)
{
    (void)state;
    const int64_t masks[][3] = {/* causal, left, right */
                                {1, -1, -1}, {0, 3, -1}, {0, -1, 2}, {0, 4, 1},
                                {1, 5, -1},  {0, 0, 0},  {0, 2, 7}};
    const int64_t shapes[][2] = {{9, 9}, {5, 12}, {12, 5}, {1, 7}};
    const int64_t d = 8;
    oracle_rng_t rng = oracle_rng(3);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; ++s)
        for (size_t m = 0; m < sizeof masks / sizeof masks[0]; ++m) {
            const int64_t lq = shapes[s][0], lk = shapes[s][1];
            fa2_problem_t p;
            fa2_problem_init(&p, FA2_DTYPE_FP16, 1, lq, lk, 1, 1, d);
            p.causal = (int32_t)masks[m][0];
            p.window_left = masks[m][1];
            p.window_right = masks[m][2];
            float *q = random_floats(&rng, lq * d), *k = random_floats(&rng, lk * d);
            float *v = random_floats(&rng, lk * d);
            double *o = doubles(lq * d), *lse = doubles(lq);
            assert_int_equal(oracle_forward(&p, q, k, v, o, lse), 0);
            for (int64_t i = 0; i < lq; ++i) {
                int64_t lo, hi;
                double o1[8], lse1;
                if (!oracle_key_range(&p, i, &lo, &hi)) {
                    assert_true(isinf(lse[i]) && lse[i] < 0);
                    for (int64_t x = 0; x < d; ++x)
                        assert_true(o[i * d + x] == 0.0);
                    continue;
                }
                fa2_problem_t one;
                fa2_problem_init(&one, FA2_DTYPE_FP16, 1, 1, hi - lo + 1, 1, 1, d);
                assert_int_equal(
                    oracle_forward(&one, q + i * d, k + lo * d, v + lo * d, o1, &lse1), 0);
                for (int64_t x = 0; x < d; ++x)
                    assert_float_equal(o[i * d + x], o1[x], 1e-14);
                assert_float_equal(lse[i], lse1, 1e-14);
            }
            free(q), free(k), free(v), free(o), free(lse);
        }
}

/* GQA: query head h uses kv head h / 3. Same as MHA on K/V with each kv head
 * repeated 3 times. */
static void test_gqa_head_mapping(void **state)
{
    (void)state;
    const int64_t b = 2, lq = 4, lk = 6, hq = 6, hkv = 2, d = 8;
    oracle_rng_t rng = oracle_rng(4);
    float *q = random_floats(&rng, b * lq * hq * d);
    float *k = random_floats(&rng, b * lk * hkv * d);
    float *v = random_floats(&rng, b * lk * hkv * d);
    float *k_rep = random_floats(&rng, b * lk * hq * d);
    float *v_rep = random_floats(&rng, b * lk * hq * d);
    for (int64_t bb = 0; bb < b; ++bb)
        for (int64_t j = 0; j < lk; ++j)
            for (int64_t h = 0; h < hq; ++h) {
                const int64_t src = ((bb * lk + j) * hkv + h / 3) * d;
                const int64_t dst = ((bb * lk + j) * hq + h) * d;
                memcpy(k_rep + dst, k + src, sizeof(float) * (size_t)d);
                memcpy(v_rep + dst, v + src, sizeof(float) * (size_t)d);
            }
    fa2_problem_t gqa, mha;
    fa2_problem_init(&gqa, FA2_DTYPE_BF16, b, lq, lk, hq, hkv, d);
    fa2_problem_init(&mha, FA2_DTYPE_BF16, b, lq, lk, hq, hq, d);
    gqa.causal = mha.causal = 1;
    const int64_t no = b * lq * hq * d, nl = b * hq * lq;
    double *o1 = doubles(no), *o2 = doubles(no), *l1 = doubles(nl), *l2 = doubles(nl);
    assert_int_equal(oracle_forward(&gqa, q, k, v, o1, l1), 0);
    assert_int_equal(oracle_forward(&mha, q, k_rep, v_rep, o2, l2), 0);
    assert_memory_equal(o1, o2, sizeof(double) * (size_t)no);
    assert_memory_equal(l1, l2, sizeof(double) * (size_t)nl);
    /* and not the identity mapping h % hkv: head 1 must differ from that */
    fa2_problem_t mqa;
    fa2_problem_init(&mqa, FA2_DTYPE_BF16, b, lq, lk, hq, 1, d);
    mqa.causal = 1;
    mqa.k_seq_stride = mqa.v_seq_stride = gqa.k_seq_stride; /* K, V stored as for gqa */
    mqa.k_batch_stride = mqa.v_batch_stride = gqa.k_batch_stride;
    assert_int_equal(oracle_forward(&mqa, q, k, v, o2, l2), 0); /* kv head 0 for all */
    for (int64_t x = 0; x < d; ++x) /* heads 0..2 use kv head 0 in both */
        assert_true(o1[2 * d + x] == o2[2 * d + x]);
    assert_true(o1[3 * d] != o2[3 * d]); /* head 3 uses kv head 1 */
    free(q), free(k), free(v), free(k_rep), free(v_rep), free(o1), free(o2), free(l1),
        free(l2);
}

/* The same tensors stored BSHD and BHSD (and padded) give bit-identical results. */
static void test_layouts_agree(void **state)
{
    (void)state;
    const int64_t b = 2, lq = 5, lk = 7, hq = 4, hkv = 2, d = 16;
    oracle_rng_t rng = oracle_rng(5);
    fa2_problem_t bshd, bhsd;
    fa2_problem_init(&bshd, FA2_DTYPE_FP16, b, lq, lk, hq, hkv, d);
    bshd.window_left = 3;
    bhsd = bshd;
    /* BHSD with a padded row: [b, h, s, d + 8] */
    const int64_t dp = d + 8;
    bhsd.q_head_stride = lq * dp, bhsd.q_seq_stride = dp, bhsd.q_batch_stride = hq * lq * dp;
    bhsd.k_head_stride = lk * dp, bhsd.k_seq_stride = dp, bhsd.k_batch_stride = hkv * lk * dp;
    bhsd.v_head_stride = bhsd.k_head_stride, bhsd.v_seq_stride = dp;
    bhsd.v_batch_stride = bhsd.k_batch_stride;
    float *q = random_floats(&rng, b * lq * hq * d);
    float *k = random_floats(&rng, b * lk * hkv * d);
    float *v = random_floats(&rng, b * lk * hkv * d);
    float *q2 = random_floats(&rng, b * hq * lq * dp);
    float *k2 = random_floats(&rng, b * hkv * lk * dp);
    float *v2 = random_floats(&rng, b * hkv * lk * dp);
    for (int64_t bb = 0; bb < b; ++bb)
        for (int64_t h = 0; h < hq; ++h)
            for (int64_t i = 0; i < lq; ++i)
                memcpy(q2 + bb * bhsd.q_batch_stride + h * bhsd.q_head_stride + i * dp,
                       q + ((bb * lq + i) * hq + h) * d, sizeof(float) * (size_t)d);
    for (int64_t bb = 0; bb < b; ++bb)
        for (int64_t h = 0; h < hkv; ++h)
            for (int64_t j = 0; j < lk; ++j) {
                const int64_t dst = bb * bhsd.k_batch_stride + h * bhsd.k_head_stride + j * dp;
                const int64_t src = ((bb * lk + j) * hkv + h) * d;
                memcpy(k2 + dst, k + src, sizeof(float) * (size_t)d);
                memcpy(v2 + dst, v + src, sizeof(float) * (size_t)d);
            }
    const int64_t no = o_elems(&bshd), nl = lse_elems(&bshd);
    double *o1 = doubles(no), *o2 = doubles(no), *l1 = doubles(nl), *l2 = doubles(nl);
    assert_int_equal(oracle_forward(&bshd, q, k, v, o1, l1), 0);
    assert_int_equal(oracle_forward(&bhsd, q2, k2, v2, o2, l2), 0);
    assert_memory_equal(o1, o2, sizeof(double) * (size_t)no);
    assert_memory_equal(l1, l2, sizeof(double) * (size_t)nl);
    assert_int_equal(oracle_span(b, lq, hq, d, bhsd.q_batch_stride, dp, lq * dp),
                     b * hq * lq * dp - (dp - d));
    free(q), free(k), free(v), free(q2), free(k2), free(v2), free(o1), free(o2), free(l1),
        free(l2);
}

/* V = ones: every visible row's softmax sums to 1, so O = 1. */
static void test_softmax_rows_sum_to_one(void **state)
{
    (void)state;
    const int64_t lq = 13, lk = 29, d = 8;
    fa2_problem_t p;
    fa2_problem_init(&p, FA2_DTYPE_FP16, 1, lq, lk, 2, 1, d);
    p.window_left = 6;
    p.causal = 1;
    p.softmax_scale = 3.0f; /* peaky rows */
    oracle_rng_t rng = oracle_rng(6);
    float *q = random_floats(&rng, lq * 2 * d), *k = random_floats(&rng, lk * d);
    float *v = random_floats(&rng, lk * d);
    for (int64_t t = 0; t < lk * d; ++t)
        v[t] = 1.0f;
    double *o = doubles(lq * 2 * d);
    assert_int_equal(oracle_forward(&p, q, k, v, o, NULL), 0);
    for (int64_t i = 0; i < lq; ++i) {
        int64_t lo, hi;
        const double want = oracle_key_range(&p, i, &lo, &hi) ? 1.0 : 0.0;
        for (int64_t t = 0; t < 2 * d; ++t)
            assert_float_equal(o[i * 2 * d + t], want, 1e-14);
    }
    free(q), free(k), free(v), free(o);
}

/* softmax_scale 0 means 1/sqrt(head_dim). */
static void test_default_scale(void **state)
{
    (void)state;
    const int64_t lq = 4, lk = 5, d = 32;
    fa2_problem_t p;
    fa2_problem_init(&p, FA2_DTYPE_FP16, 1, lq, lk, 1, 1, d);
    assert_float_equal(oracle_softmax_scale(&p), 1.0 / sqrt(32.0), 0.0);
    oracle_rng_t rng = oracle_rng(7);
    float *q = random_floats(&rng, lq * d), *k = random_floats(&rng, lk * d);
    float *v = random_floats(&rng, lk * d);
    double o1[4 * 32], o2[4 * 32], l1[4], l2[4];
    assert_int_equal(oracle_forward(&p, q, k, v, o1, l1), 0);
    for (int64_t t = 0; t < lq * d; ++t)
        q[t] *= 2.0f; /* exact */
    p.softmax_scale = (float)(0.5 / sqrt(32.0));
    assert_int_equal(oracle_forward(&p, q, k, v, o2, l2), 0);
    for (int t = 0; t < lq * d; ++t)
        assert_float_equal(o1[t], o2[t], 1e-6); /* the float scale is rounded */
    for (int t = 0; t < lq; ++t)
        assert_float_equal(l1[t], l2[t], 1e-6);
    free(q), free(k), free(v);
}

/* d LSE / d q_i = scale * sum_j P_ij k_j, which is O when V = K: ties LSE and O
 * together, checked by central finite differences. */
static void test_lse_gradient_is_output(void **state)
{
    (void)state;
    const int64_t lq = 3, lk = 9, d = 8;
    fa2_problem_t p;
    fa2_problem_init(&p, FA2_DTYPE_FP16, 1, lq, lk, 1, 1, d);
    p.causal = 1;
    const double scale = oracle_softmax_scale(&p);
    oracle_rng_t rng = oracle_rng(8);
    float *q = random_floats(&rng, lq * d), *k = random_floats(&rng, lk * d);
    double o[3 * 8], lse[3], lp[3], lm[3];
    assert_int_equal(oracle_forward(&p, q, k, k, o, lse), 0);
    const float h = 0x1p-8f; /* q +- h stays exact in float */
    for (int64_t t = 0; t < lq * d; ++t) {
        const float q0 = q[t];
        q[t] = q0 + h;
        assert_int_equal(oracle_forward(&p, q, k, k, o + 0, lp), 0);
        q[t] = q0 - h;
        assert_int_equal(oracle_forward(&p, q, k, k, o + 0, lm), 0);
        q[t] = q0;
        assert_int_equal(oracle_forward(&p, q, k, k, o, lse), 0);
        const int64_t i = t / d;
        assert_float_equal((lp[i] - lm[i]) / (2.0 * h), scale * o[t], 1e-5);
    }
    free(q), free(k);
}

/* The same-precision reference is close to the oracle but not equal to it. */
static void test_rounded_reference(void **state)
{
    (void)state;
    const int64_t lq = 33, lk = 70, hq = 2, d = 64;
    const fa2_dtype_t dts[2] = {FA2_DTYPE_FP16, FA2_DTYPE_BF16};
    const double bounds[2] = {2e-3, 1.5e-2};
    oracle_rng_t rng = oracle_rng(9);
    for (int t = 0; t < 2; ++t) {
        fa2_problem_t p;
        fa2_problem_init(&p, dts[t], 1, lq, lk, hq, hq, d);
        p.causal = 1;
        const int64_t n = lq * hq * d;
        float *q = random_floats(&rng, n), *k = random_floats(&rng, lk * hq * d);
        float *v = random_floats(&rng, lk * hq * d);
        for (int64_t x = 0; x < n; ++x)
            q[x] = oracle_round(q[x], dts[t]);
        double *o = doubles(n), *r = doubles(n);
        assert_int_equal(oracle_forward(&p, q, k, v, o, NULL), 0);
        assert_int_equal(oracle_forward_rounded(&p, q, k, v, r), 0);
        const double err = oracle_rel_l2(r, o, (size_t)n);
        print_message("rounded reference, %s: rel L2 %.3g\n", t ? "bf16" : "fp16", err);
        assert_true(err > 0.0 && err < bounds[t]);
        for (int64_t x = 0; x < n; ++x)
            assert_true(r[x] == (double)oracle_round((float)r[x], dts[t]));
        free(q), free(k), free(v), free(o), free(r);
    }
}

/* ---- conversions, RNG, metrics ---------------------------------------------------- */

static void test_fp16_conversion(void **state)
{
    (void)state;
    assert_int_equal(oracle_fp16_from_float(1.0f), 0x3C00);
    assert_int_equal(oracle_fp16_from_float(-2.0f), 0xC000);
    assert_int_equal(oracle_fp16_from_float(65504.0f), 0x7BFF);
    assert_int_equal(oracle_fp16_from_float(65519.0f), 0x7BFF);
    assert_int_equal(oracle_fp16_from_float(65520.0f), 0x7C00);
    assert_int_equal(oracle_fp16_from_float(INFINITY), 0x7C00);
    assert_int_equal(oracle_fp16_from_float(-INFINITY), 0xFC00);
    assert_true((oracle_fp16_from_float(NAN) & 0x7FFF) > 0x7C00);
    assert_int_equal(oracle_fp16_from_float(0x1p-14f), 0x0400);  /* smallest normal */
    assert_int_equal(oracle_fp16_from_float(0x1p-24f), 0x0001);  /* smallest subnormal */
    assert_int_equal(oracle_fp16_from_float(0x1p-25f), 0x0000);  /* tie to even: 0 */
    assert_int_equal(oracle_fp16_from_float(0x1.8p-24f), 0x0002); /* tie to even: 2 */
    assert_int_equal(oracle_fp16_from_float(0x1.01p-25f), 0x0001);
    assert_int_equal(oracle_fp16_from_float(-0.0f), 0x8000);
    /* ties between 1 and 1 + 2^-10 */
    assert_int_equal(oracle_fp16_from_float(1.0f + 0x1p-11f), 0x3C00);
    assert_int_equal(oracle_fp16_from_float(1.0f + 3 * 0x1p-11f), 0x3C02);
    assert_int_equal(oracle_fp16_from_float(1.0f + 0x1.2p-11f), 0x3C01);
    assert_int_equal(oracle_fp16_from_float(2.0f - 0x1p-12f), 0x4000); /* carry */
    /* every finite fp16 survives the round trip */
    for (uint32_t h = 0; h < 0x10000; ++h) {
        if ((h & 0x7C00) == 0x7C00)
            continue;
        const float f = oracle_float_from_fp16((uint16_t)h);
        assert_int_equal(oracle_fp16_from_float(f), h);
    }
    assert_float_equal(oracle_float_from_fp16(0x0001), 0x1p-24, 0.0);
    assert_float_equal(oracle_float_from_fp16(0x3555), 0x1.554p-2, 0.0);
    assert_true(isinf(oracle_float_from_fp16(0xFC00)));
}

static void test_bf16_conversion(void **state)
{
    (void)state;
    assert_int_equal(oracle_bf16_from_float(1.0f), 0x3F80);
    assert_int_equal(oracle_bf16_from_float(-3.0f), 0xC040);
    assert_int_equal(oracle_bf16_from_float(1.0f + 0x1p-8f), 0x3F80); /* tie: even */
    assert_int_equal(oracle_bf16_from_float(1.0f + 3 * 0x1p-8f), 0x3F82);
    assert_int_equal(oracle_bf16_from_float(1.0f + 0x1.2p-8f), 0x3F81);
    assert_int_equal(oracle_bf16_from_float(0x1.fffffep+127f), 0x7F80); /* FLT_MAX to inf */
    assert_int_equal(oracle_bf16_from_float(INFINITY), 0x7F80);
    assert_true((oracle_bf16_from_float(NAN) & 0x7FFF) > 0x7F80);
    assert_int_equal(oracle_bf16_from_float(0x1p-133f), 0x0001); /* subnormal */
    for (uint32_t h = 0; h < 0x10000; ++h) {
        if ((h & 0x7F80) == 0x7F80)
            continue;
        assert_int_equal(oracle_bf16_from_float(oracle_float_from_bf16((uint16_t)h)), h);
    }
    assert_float_equal(oracle_round(1.0f + 0x1p-9f, FA2_DTYPE_BF16), 1.0, 0.0);
    assert_float_equal(oracle_round(1.0f + 0x1p-9f, FA2_DTYPE_FP16), 1.0 + 0x1p-9, 0.0);
}

static void test_rng(void **state)
{
    (void)state;
    oracle_rng_t a = oracle_rng(42), b = oracle_rng(42), c = oracle_rng(43);
    assert_true(oracle_rng_next(&a) == oracle_rng_next(&b));
    assert_true(oracle_rng_next(&a) != oracle_rng_next(&c));
    double sum = 0.0, sum2 = 0.0;
    float lo = 1.0f, hi = -1.0f;
    const int n = 100000;
    for (int t = 0; t < n; ++t) {
        const float u = oracle_rng_uniform(&a, -1.0f, 1.0f);
        lo = u < lo ? u : lo;
        hi = u > hi ? u : hi;
        sum += u;
        const float z = oracle_rng_normal(&a);
        sum2 += (double)z * z;
    }
    assert_true(lo >= -1.0f && hi < 1.0f && lo < -0.999f && hi > 0.999f);
    assert_float_equal(sum / n, 0.0, 0.01);
    assert_float_equal(sum2 / n, 1.0, 0.02);
}

static void test_metrics(void **state)
{
    (void)state;
    const double ref[3] = {3, 0, 4}, out[3] = {3, 1, 4}, zero[3] = {0, 0, 0};
    assert_float_equal(oracle_rel_l2(out, ref, 3), 0.2, 1e-15);
    assert_float_equal(oracle_rel_l2(ref, ref, 3), 0.0, 0.0);
    assert_float_equal(oracle_rel_l2(zero, zero, 3), 0.0, 0.0);
    assert_float_equal(oracle_rel_l2(out, zero, 3), sqrt(26.0), 1e-15);
    assert_float_equal(oracle_max_abs_err(out, ref, 3), 1.0, 0.0);
    const double bad[3] = {3, NAN, 4};
    assert_true(isnan(oracle_rel_l2(bad, ref, 3)));
    assert_true(isnan(oracle_max_abs_err(bad, ref, 3)));
    assert_int_equal(oracle_span(2, 3, 4, 8, 1000, 100, 10), 1000 + 200 + 30 + 8);
    assert_int_equal(oracle_span(2, 0, 4, 8, 1000, 100, 10), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_single_key_gives_v),
        cmocka_unit_test(test_uniform_scores_give_mean),
        cmocka_unit_test(test_causal_bottom_right_2x3),
        cmocka_unit_test(test_fully_masked_row),
        cmocka_unit_test(test_key_ranges),
        cmocka_unit_test(test_mask_equals_key_subrange),
        cmocka_unit_test(test_gqa_head_mapping),
        cmocka_unit_test(test_layouts_agree),
        cmocka_unit_test(test_softmax_rows_sum_to_one),
        cmocka_unit_test(test_default_scale),
        cmocka_unit_test(test_lse_gradient_is_output),
        cmocka_unit_test(test_rounded_reference),
        cmocka_unit_test(test_fp16_conversion),
        cmocka_unit_test(test_bf16_conversion),
        cmocka_unit_test(test_rng),
        cmocka_unit_test(test_metrics),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
