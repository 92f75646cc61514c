/* Helpers of the reliability GPU tests (test_hostile_gpu, test_concurrency_gpu,
 * test_sanitizer_subset): device probe, hashed tensors that are cheap to fill even
 * with more than 2^31 elements, and a reference for a chosen set of query rows
 * (double accumulation, forward and backward), so that huge problems can be checked
 * row by row. Header-only (static functions); host C, CUDA runtime API only.
 *
 * Tensors are contiguous BSHD (fa2_problem_init's strides): element (b, s, h, x) is
 * at ((b * seq + s) * heads + h) * d + x. */
#ifndef FA2_TESTS_GPU_ROWS_H
#define FA2_TESTS_GPU_ROWS_H

#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "fa2.h"
#include "oracle.h"

/* Exit status 77 (ctest: skipped) with a message when there is no usable device;
 * 0 with *info filled otherwise. `--probe` as argv[1]: return after the check. */
static inline int gpu_rows_probe(const char *test, fa2_device_info_t *info)
{
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        printf("SKIP: %s: no CUDA device (%s)\n", test,
               e != cudaSuccess ? cudaGetErrorString(e) : "device count is 0");
        return 77;
    }
    const fa2_status_t s = fa2_device_info_query(0, info);
    if (s != FA2_SUCCESS || cudaSetDevice(0) != cudaSuccess) {
        printf("%s: fa2_device_info_query(0): %s (%s)\n", test, fa2_status_string(s),
               fa2_last_error());
        return 1;
    }
    printf("%s: device 0 sm_%d%d, %d SMs\n", test, info->cc_major, info->cc_minor,
           info->sm_count);
    return 0;
}

/* Inside a case that prints one line: on a CUDA error, ends the line with the error and
 * FAIL and goes to the caller's `cleanup` label. */
#define CK(call)                                                                        \
    do {                                                                                \
        const cudaError_t e_ = (call);                                                  \
        if (e_ != cudaSuccess) {                                                        \
            printf(" : CUDA error at line %d: %s -> %s FAIL\n", __LINE__, #call,         \
                   cudaGetErrorString(e_));                                             \
            goto cleanup;                                                               \
        }                                                                               \
    } while (0)

/* The spacing of the dtype's values just above 1: 2^-8 (bf16), 2^-11 (fp16). */
static inline double gpu_rows_eps(fa2_dtype_t t)
{
    return t == FA2_DTYPE_BF16 ? 0x1p-8 : 0x1p-11;
}

/* max(floor, max |x[t]|). */
static inline double gpu_rows_maxabs(const double *x, int64_t n, double floor)
{
    double m = floor;
    for (int64_t t = 0; t < n; ++t)
        m = fmax(m, fabs(x[t]));
    return m;
}

/* ---- hashed tensors ----------------------------------------------------------------- */

static inline uint64_t gpu_rows_mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* 256 values uniform in [-amp, amp], rounded to the dtype, as bits. */
typedef struct gpu_rows_table_t {
    uint16_t bits[256];
} gpu_rows_table_t;

static inline gpu_rows_table_t gpu_rows_table(fa2_dtype_t dtype, float amp)
{
    gpu_rows_table_t t;
    for (int k = 0; k < 256; ++k)
        t.bits[k] = oracle_bits_from_float(amp * (2.0f * ((float)k + 0.5f) / 256.0f - 1.0f),
                                           dtype);
    return t;
}

/* n elements of a tensor, element e = table[hash(seed, e) % 256]. */
static inline void gpu_rows_fill(uint16_t *bits, int64_t n, uint64_t seed, const gpu_rows_table_t *t)
{
    for (int64_t e = 0; e < n; ++e)
        bits[e] = t->bits[gpu_rows_mix(seed + (uint64_t)e * 0x9E3779B97F4A7C15ull) & 255];
}

/* float of every 16-bit pattern, for fast reads of huge host tensors */
static float *gpu_rows_lut(fa2_dtype_t dtype)
{
    float *lut = malloc(sizeof(float) * 65536);
    if (lut)
        for (int b = 0; b < 65536; ++b)
            lut[b] = oracle_float_from_bits((uint16_t)b, dtype);
    return lut;
}

/* ---- reference for chosen rows ------------------------------------------------------ */

/* Inputs as host bits (contiguous BSHD) plus the LUT; d_o may be NULL (forward only). */
typedef struct gpu_rows_inputs_t {
    const fa2_problem_t *p;
    const uint16_t *q, *k, *v, *d_o;
    const float *lut;
} gpu_rows_inputs_t;

static inline int64_t gpu_rows_q_at(const fa2_problem_t *p, int64_t b, int64_t i, int64_t h)
{
    return ((b * p->seqlen_q + i) * p->heads_q + h) * p->head_dim;
}

static inline int64_t gpu_rows_k_at(const fa2_problem_t *p, int64_t b, int64_t j, int64_t h)
{
    return ((b * p->seqlen_k + j) * p->heads_kv + h) * p->head_dim;
}

/* Query row (b, i, h): o[d] and *lse; with d_o, also dq[d] and, when dk/dv are not
 * NULL, adds this row's contribution to the keys j in [j0, j1) of kv head h / group,
 * batch b: dk[(j - j0) * d + x] (caller-zeroed doubles). Returns 0, or -1 when out of
 * memory. */
static inline int gpu_rows_reference(const gpu_rows_inputs_t *in, int64_t b, int64_t i, int64_t h,
                              double *o, double *lse, double *dq, double *dk, double *dv,
                              int64_t j0, int64_t j1)
{
    const fa2_problem_t *p = in->p;
    const int64_t d = p->head_dim, hk = h / (p->heads_q / p->heads_kv);
    const double scale = oracle_softmax_scale(p);
    const uint16_t *qi = in->q + gpu_rows_q_at(p, b, i, h);
    int64_t lo, hi;
    for (int64_t x = 0; x < d; ++x)
        o[x] = 0.0, dq ? dq[x] = 0.0 : 0.0;
    if (!oracle_key_range(p, i, &lo, &hi)) {
        *lse = -INFINITY;
        return 0;
    }
    double *s = malloc(sizeof(double) * (size_t)(hi - lo + 1));
    if (!s)
        return -1;
    double m = -INFINITY, sum = 0.0;
    for (int64_t j = lo; j <= hi; ++j) {
        const uint16_t *kj = in->k + gpu_rows_k_at(p, b, j, hk);
        double acc = 0.0;
        for (int64_t x = 0; x < d; ++x)
            acc += (double)in->lut[qi[x]] * (double)in->lut[kj[x]];
        s[j - lo] = scale * acc;
        if (s[j - lo] > m)
            m = s[j - lo];
    }
    for (int64_t j = lo; j <= hi; ++j)
        sum += exp(s[j - lo] - m);
    *lse = m + log(sum);
    for (int64_t j = lo; j <= hi; ++j) {
        const uint16_t *vj = in->v + gpu_rows_k_at(p, b, j, hk);
        const double pj = exp(s[j - lo] - *lse);
        s[j - lo] = pj; /* s now holds P */
        for (int64_t x = 0; x < d; ++x)
            o[x] += pj * (double)in->lut[vj[x]];
    }
    if (in->d_o && dq) {
        const uint16_t *doi = in->d_o + gpu_rows_q_at(p, b, i, h);
        double dsum = 0.0;
        for (int64_t x = 0; x < d; ++x)
            dsum += (double)in->lut[doi[x]] * o[x];
        for (int64_t j = lo; j <= hi; ++j) {
            const uint16_t *kj = in->k + gpu_rows_k_at(p, b, j, hk);
            const uint16_t *vj = in->v + gpu_rows_k_at(p, b, j, hk);
            double dp = 0.0;
            for (int64_t x = 0; x < d; ++x)
                dp += (double)in->lut[doi[x]] * (double)in->lut[vj[x]];
            const double pj = s[j - lo], ds = pj * (dp - dsum);
            const int in_range = j >= j0 && j < j1;
            for (int64_t x = 0; x < d; ++x) {
                dq[x] += scale * ds * (double)in->lut[kj[x]];
                if (dk && in_range)
                    dk[(j - j0) * d + x] += scale * ds * (double)in->lut[qi[x]];
                if (dv && in_range)
                    dv[(j - j0) * d + x] += pj * (double)in->lut[doi[x]];
            }
        }
    }
    free(s);
    return 0;
}

/* |got - want| <= atol + rtol * |want| for n values of a row; NaN fails. Returns the
 * number of violations and the worst excess in *worst. */
static inline int64_t gpu_rows_compare(const float *got, const double *want, int64_t n, double atol,
                                double rtol, double *worst)
{
    int64_t bad = 0;
    for (int64_t x = 0; x < n; ++x) {
        const double e = fabs((double)got[x] - want[x]);
        const double allowed = atol + rtol * fabs(want[x]);
        if (!(e <= allowed))
            ++bad;
        if (!(e - allowed <= *worst))
            *worst = e - allowed;
    }
    return bad;
}

#endif
