/* Scaffolding shared by test_forward_gpu and test_backward_gpu: see gpu_tensor.h. */
#include "gpu_tensor.h"

#include <inttypes.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

const char *const layout_names[] = {"bshd", "bhsd", "padded"};

void layout_strides(layout_t layout, int64_t seq, int64_t heads, int64_t d, int64_t *bs,
                    int64_t *ss, int64_t *hs)
{
    switch (layout) {
    case BSHD:
        *hs = d, *ss = heads * d, *bs = seq * heads * d;
        break;
    case BHSD:
        *ss = d, *hs = seq * d, *bs = heads * seq * d;
        break;
    case PADDED:
        *hs = d + 8, *ss = heads * (d + 8) + 8, *bs = seq * *ss + 16;
        break;
    }
}

void apply_layout(fa2_problem_t *p, layout_t layout)
{
    layout_strides(layout, p->seqlen_q, p->heads_q, p->head_dim, &p->q_batch_stride,
                   &p->q_seq_stride, &p->q_head_stride);
    layout_strides(layout, p->seqlen_k, p->heads_kv, p->head_dim, &p->k_batch_stride,
                   &p->k_seq_stride, &p->k_head_stride);
    layout_strides(layout, p->seqlen_k, p->heads_kv, p->head_dim, &p->v_batch_stride,
                   &p->v_seq_stride, &p->v_head_stride);
    layout_strides(layout, p->seqlen_q, p->heads_q, p->head_dim, &p->o_batch_stride,
                   &p->o_seq_stride, &p->o_head_stride);
}

tensor_t tensor_new(int64_t batch, int64_t seq, int64_t heads, int64_t d, int64_t bs,
                    int64_t ss, int64_t hs)
{
    tensor_t t = {batch, seq, heads, d, bs, ss, hs, 0, NULL, NULL, NULL};
    t.alloc = oracle_span(batch, seq, heads, d, bs, ss, hs) + GPU_TENSOR_GUARD;
    t.bits = malloc(sizeof(uint16_t) * (size_t)t.alloc);
    t.vals = malloc(sizeof(float) * (size_t)t.alloc);
    assert_true(t.bits && t.vals);
    memset(t.bits, 0xFF, sizeof(uint16_t) * (size_t)t.alloc); /* NaN in fp16 and bf16 */
    for (int64_t x = 0; x < t.alloc; ++x)
        t.vals[x] = NAN;
    return t;
}

void tensor_free(tensor_t *t)
{
    free(t->bits);
    free(t->vals);
    cudaFree(t->dev);
    t->bits = NULL, t->vals = NULL, t->dev = NULL;
}

int64_t tensor_offset(const tensor_t *t, int64_t b, int64_t s, int64_t h)
{
    return b * t->bs + s * t->ss + h * t->hs;
}

void tensor_fill(tensor_t *t, oracle_rng_t *rng, fa2_dtype_t dtype, float amp, int nonzero)
{
    for (int64_t b = 0; b < t->batch; ++b)
        for (int64_t s = 0; s < t->seq; ++s)
            for (int64_t h = 0; h < t->heads; ++h)
                for (int64_t x = 0; x < t->d; ++x) {
                    const int64_t at = tensor_offset(t, b, s, h) + x;
                    do
                        t->bits[at] = oracle_bits_from_float(
                            oracle_rng_uniform(rng, -amp, amp), dtype);
                    while (nonzero && (t->bits[at] & 0x7FFFu) == 0);
                    t->vals[at] = oracle_float_from_bits(t->bits[at], dtype);
                }
}

cudaError_t tensor_upload(tensor_t *t)
{
    cudaError_t e = cudaMalloc(&t->dev, sizeof(uint16_t) * (size_t)t->alloc);
    if (e == cudaSuccess)
        e = cudaMemcpy(t->dev, t->bits, sizeof(uint16_t) * (size_t)t->alloc,
                       cudaMemcpyHostToDevice);
    return e;
}

cudaError_t tensor_download(tensor_t *t)
{
    return cudaMemcpy(t->bits, t->dev, sizeof(uint16_t) * (size_t)t->alloc,
                      cudaMemcpyDeviceToHost);
}

void *device_buffer(const void *host, size_t bytes)
{
    void *dev = NULL;
    const size_t n = bytes > 0 ? bytes : 1;
    assert_int_equal(cudaMalloc(&dev, n), cudaSuccess);
    if (host)
        assert_int_equal(cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice), cudaSuccess);
    else
        assert_int_equal(cudaMemset(dev, 0xFF, n), cudaSuccess);
    return dev;
}

void fill_rounded(float *vals, uint16_t *bits, int64_t n, oracle_rng_t *rng, fa2_dtype_t dt)
{
    for (int64_t i = 0; i < n; ++i) {
        vals[i] = oracle_round(oracle_rng_uniform(rng, -1.0f, 1.0f), dt);
        bits[i] = oracle_bits_from_float(vals[i], dt);
    }
}

oracle_rng_t case_rng(uint64_t seed, long index)
{
    return oracle_rng(seed ^ (0x9E3779B97F4A7C15ull * (uint64_t)(index + 1)));
}

void describe_problem(long index, const fa2_problem_t *p, layout_t layout)
{
    char mask[64] = "none";
    int n = 0;
    if (p->causal)
        n += snprintf(mask + n, sizeof mask - (size_t)n, "causal");
    if (p->window_left >= 0)
        n += snprintf(mask + n, sizeof mask - (size_t)n, "%sleft=%" PRId64, n ? "," : "",
                      p->window_left);
    if (p->window_right >= 0)
        n += snprintf(mask + n, sizeof mask - (size_t)n, "%sright=%" PRId64, n ? "," : "",
                      p->window_right);
    printf("case %ld: %s b=%" PRId64 " q=%" PRId64 " k=%" PRId64 " hq=%" PRId64
           " hkv=%" PRId64 " d=%" PRId64 " mask=%s scale=%.4g %s",
           index, p->dtype == FA2_DTYPE_BF16 ? "bf16" : "fp16", p->batch, p->seqlen_q,
           p->seqlen_k, p->heads_q, p->heads_kv, p->head_dim, mask, oracle_softmax_scale(p),
           layout_names[layout]);
}

int gpu_test_setup(const char *what, fa2_device_info_t *info, uint64_t *seed, long *only)
{
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        printf("SKIP: no CUDA device (%s): GPU %s tests not run\n",
               e != cudaSuccess ? cudaGetErrorString(e) : "device count is 0", what);
        return 77;
    }
    const fa2_status_t st = fa2_device_info_query(0, info);
    if (st != FA2_SUCCESS) {
        printf("fa2_device_info_query(0) failed: %s (%s)\n", fa2_status_string(st),
               fa2_last_error());
        return 1;
    }
    if (cudaSetDevice(0) != cudaSuccess) {
        printf("cudaSetDevice(0) failed\n");
        return 1;
    }
    const char *s = getenv("FA2_TEST_SEED");
    *seed = s && *s ? strtoull(s, NULL, 0) : (uint64_t)time(NULL);
    const char *o = getenv("FA2_TEST_CASE");
    if (o && *o)
        *only = strtol(o, NULL, 10);
    printf("device 0: sm_%d%d, %d SMs, %" PRId64 " bytes shared memory per block\n",
           info->cc_major, info->cc_minor, info->sm_count, info->smem_per_block_optin);
    printf("seed %" PRIu64 " (replay: FA2_TEST_SEED=%" PRIu64 ", one case: FA2_TEST_CASE=n)\n",
           *seed, *seed);
    return 0;
}

int structural_zeros(const fa2_problem_t *p, char *zq, char *zkv)
{
    const int64_t d = p->head_dim, hq = p->heads_q, hkv = p->heads_kv;
    char *seen = calloc((size_t)(p->seqlen_k > 0 ? p->seqlen_k : 1), 1);
    if (!seen)
        return -1;
    for (int64_t i = 0; i < p->seqlen_q; ++i) {
        int64_t lo, hi;
        const int any = oracle_key_range(p, i, &lo, &hi);
        for (int64_t j = lo; any && j <= hi; ++j)
            seen[j] = 1;
        for (int64_t b = 0; b < p->batch; ++b)
            memset(zq + (b * p->seqlen_q + i) * hq * d, !any, (size_t)(hq * d));
    }
    for (int64_t j = 0; j < p->seqlen_k; ++j)
        for (int64_t b = 0; b < p->batch; ++b)
            memset(zkv + (b * p->seqlen_k + j) * hkv * d, !seen[j], (size_t)(hkv * d));
    free(seen);
    return 0;
}

fa2_device_info_t consumer_device_info(const fa2_device_info_t *real)
{
    fa2_device_info_t d = *real;
    d.cc_major = 8;
    d.cc_minor = 9;
    d.smem_per_block_optin = 101376;
    d.smem_per_sm = 102400;
    return d;
}
