/* fa2_long_rows: how accurate are very long sums? The kernels add up a row's keys
 * (forward: O and the softmax sum) and a key's query rows (backward: dK, dV) in fp32
 * registers. This measures the error against a double reference as the length N grows,
 * to set FA2_MAX_SEQLEN (docs/reliability.md, "Limits").
 *
 * Inputs repeat with a period of P rows, so the exact answer over N rows follows from
 * one period in double: the forward's O over N periodic keys equals O over one period
 * (LSE + ln(N/P)), and the backward's dK, dV over N periodic query rows are N/P times
 * one period's. P = 1 is the worst case (every key, or every query, the same: every
 * addition to the accumulator is the same number).
 *
 *   fa2_long_rows [--max-log2 26] [--head-dim 64]
 * Prints one line per (direction, P, N): the worst relative error of O (forward) or of
 * dK and dV (backward), each relative to the largest |value| of its tensor. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "fa2.h"
#include "oracle.h"

#define CK(call)                                                                          \
    do {                                                                                  \
        const cudaError_t e_ = (call);                                                    \
        if (e_ != cudaSuccess) {                                                          \
            fprintf(stderr, "fa2_long_rows: %s: %s\n", #call, cudaGetErrorString(e_));    \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

#define FA(call)                                                                          \
    do {                                                                                  \
        const fa2_status_t s_ = (call);                                                   \
        if (s_ != FA2_SUCCESS) {                                                          \
            fprintf(stderr, "fa2_long_rows: %s: %s\n", #call, fa2_last_error());          \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

static const fa2_dtype_t kDtype = FA2_DTYPE_BF16;

/* n random bf16 values in [-1, 1] (bits) and their float values. */
static void random_rows(oracle_rng_t *rng, uint16_t *bits, float *vals, int64_t n)
{
    for (int64_t i = 0; i < n; ++i) {
        bits[i] = oracle_bits_from_float(oracle_rng_uniform(rng, -1.f, 1.f), kDtype);
        vals[i] = oracle_float_from_bits(bits[i], kDtype);
    }
}

/* Device buffer of `rows` rows of `row_elems` 16-bit values: `period` rows from `src`,
 * repeated (copies double each step). */
static void *tiled(const uint16_t *src, int64_t period, int64_t rows, int64_t row_elems)
{
    void *d = NULL;
    const size_t row_bytes = (size_t)row_elems * 2;
    CK(cudaMalloc(&d, (size_t)rows * row_bytes));
    CK(cudaMemcpy(d, src, (size_t)period * row_bytes, cudaMemcpyHostToDevice));
    for (int64_t have = period; have < rows;) {
        const int64_t n = have < rows - have ? have : rows - have;
        CK(cudaMemcpy((char *)d + have * row_bytes, d, (size_t)n * row_bytes,
                      cudaMemcpyDeviceToDevice));
        have += n;
    }
    return d;
}

static double to_double_bits(uint16_t b)
{
    return (double)oracle_float_from_bits(b, kDtype);
}

/* Forward: 4 query rows against N keys of period P. Returns the worst |O - ref| /
 * max|ref| over the rows. */
static double forward_error(const fa2_device_info_t *dev, int64_t n, int64_t period, int64_t d)
{
    oracle_rng_t rng = oracle_rng(1234 + (uint64_t)period);
    const int64_t sq = 4;
    uint16_t *q = malloc(sizeof(uint16_t) * sq * d), *k = malloc(sizeof(uint16_t) * period * d),
             *v = malloc(sizeof(uint16_t) * period * d), *o = malloc(sizeof(uint16_t) * sq * d);
    float *qf = malloc(sizeof(float) * sq * d), *kf = malloc(sizeof(float) * period * d),
          *vf = malloc(sizeof(float) * period * d);
    random_rows(&rng, q, qf, sq * d);
    random_rows(&rng, k, kf, period * d);
    random_rows(&rng, v, vf, period * d);

    fa2_problem_t p;
    fa2_plan_t plan;
    fa2_problem_init(&p, kDtype, 1, sq, n, 1, 1, d);
    FA(fa2_plan(&p, dev, &plan));
    void *dq = tiled(q, sq, sq, d), *dk = tiled(k, period, n, d), *dv = tiled(v, period, n, d);
    void *dout = NULL;
    CK(cudaMalloc(&dout, (size_t)(sq * d * 2)));
    FA(fa2_forward(&plan, dq, dk, dv, dout, NULL, NULL, 0, NULL));
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(o, dout, (size_t)(sq * d * 2), cudaMemcpyDeviceToHost));

    const double scale = 1.0 / sqrt((double)d);
    double worst = 0;
    double *w = malloc(sizeof(double) * period), *ref = malloc(sizeof(double) * d);
    for (int64_t i = 0; i < sq; ++i) {
        double mx = -INFINITY, sum = 0, refmax = 0, err = 0;
        for (int64_t j = 0; j < period; ++j) {
            double s = 0;
            for (int64_t c = 0; c < d; ++c)
                s += (double)qf[i * d + c] * kf[j * d + c];
            w[j] = s * scale;
            mx = fmax(mx, w[j]);
        }
        for (int64_t j = 0; j < period; ++j)
            sum += (w[j] = exp(w[j] - mx));
        for (int64_t c = 0; c < d; ++c) {
            double acc = 0;
            for (int64_t j = 0; j < period; ++j)
                acc += w[j] * vf[j * d + c];
            ref[c] = acc / sum;
            refmax = fmax(refmax, fabs(ref[c]));
        }
        for (int64_t c = 0; c < d; ++c)
            err = fmax(err, fabs(to_double_bits(o[i * d + c]) - ref[c]));
        worst = fmax(worst, err / fmax(refmax, 1e-30));
    }
    cudaFree(dq), cudaFree(dk), cudaFree(dv), cudaFree(dout);
    free(q), free(k), free(v), free(o), free(qf), free(kf), free(vf), free(w), free(ref);
    return worst;
}

/* Backward: N query rows of period P against 64 keys, full attention; returns the worst
 * of dK's and dV's errors (each relative to its largest |value|). */
static double backward_error(const fa2_device_info_t *dev, int64_t n, int64_t period, int64_t d)
{
    oracle_rng_t rng = oracle_rng(777 + (uint64_t)period);
    const int64_t sk = 64;
    const double scale = 1.0 / sqrt((double)d), reps = (double)n / (double)period;
    uint16_t *q = malloc(sizeof(uint16_t) * period * d), *dob = malloc(sizeof(uint16_t) * period * d),
             *k = malloc(sizeof(uint16_t) * sk * d), *v = malloc(sizeof(uint16_t) * sk * d),
             *gk = malloc(sizeof(uint16_t) * sk * d), *gv = malloc(sizeof(uint16_t) * sk * d),
             *ob = malloc(sizeof(uint16_t) * period * d);
    float *qf = malloc(sizeof(float) * period * d), *dof = malloc(sizeof(float) * period * d),
          *kf = malloc(sizeof(float) * sk * d), *vf = malloc(sizeof(float) * sk * d);
    random_rows(&rng, q, qf, period * d);
    random_rows(&rng, dob, dof, period * d);
    random_rows(&rng, k, kf, sk * d);
    random_rows(&rng, v, vf, sk * d);

    fa2_problem_t p;
    fa2_plan_t plan;
    fa2_problem_init(&p, kDtype, 1, n, sk, 1, 1, d);
    FA(fa2_plan(&p, dev, &plan));
    void *d_q = tiled(q, period, n, d), *d_do = tiled(dob, period, n, d);
    void *d_k = tiled(k, sk, sk, d), *d_v = tiled(v, sk, sk, d);
    void *d_o = NULL, *d_dq = NULL, *d_dk = NULL, *d_dv = NULL, *ws = NULL;
    float *d_lse = NULL;
    CK(cudaMalloc(&d_o, (size_t)(n * d * 2)));
    CK(cudaMalloc(&d_dq, (size_t)(n * d * 2)));
    CK(cudaMalloc(&d_dk, (size_t)(sk * d * 2)));
    CK(cudaMalloc(&d_dv, (size_t)(sk * d * 2)));
    CK(cudaMalloc((void **)&d_lse, (size_t)(n * 4)));
    CK(cudaMalloc(&ws, (size_t)plan.bwd_workspace_bytes));
    FA(fa2_forward(&plan, d_q, d_k, d_v, d_o, d_lse, NULL, 0, NULL));
    FA(fa2_backward(&plan, d_q, d_k, d_v, d_o, d_do, d_lse, d_dq, d_dk, d_dv, ws,
                    (size_t)plan.bwd_workspace_bytes, NULL));
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(gk, d_dk, (size_t)(sk * d * 2), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(gv, d_dv, (size_t)(sk * d * 2), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(ob, d_o, (size_t)(period * d * 2), cudaMemcpyDeviceToHost));

    /* one period in double; D from the kernels' rounded O, as the backward uses it */
    double *rk = calloc((size_t)(sk * d), sizeof(double)), *rv = calloc((size_t)(sk * d), sizeof(double));
    double *pr = malloc(sizeof(double) * sk);
    for (int64_t i = 0; i < period; ++i) {
        double mx = -INFINITY, sum = 0, dsum = 0;
        for (int64_t j = 0; j < sk; ++j) {
            double s = 0;
            for (int64_t c = 0; c < d; ++c)
                s += (double)qf[i * d + c] * kf[j * d + c];
            pr[j] = s * scale;
            mx = fmax(mx, pr[j]);
        }
        for (int64_t j = 0; j < sk; ++j)
            sum += (pr[j] = exp(pr[j] - mx));
        for (int64_t c = 0; c < d; ++c)
            dsum += (double)dof[i * d + c] * to_double_bits(ob[i * d + c]);
        for (int64_t j = 0; j < sk; ++j) {
            double dp = 0;
            pr[j] /= sum;
            for (int64_t c = 0; c < d; ++c)
                dp += (double)dof[i * d + c] * vf[j * d + c];
            const double ds = pr[j] * (dp - dsum);
            for (int64_t c = 0; c < d; ++c) {
                rv[j * d + c] += pr[j] * dof[i * d + c];
                rk[j * d + c] += scale * ds * qf[i * d + c];
            }
        }
    }
    double kmax = 0, vmax = 0, kerr = 0, verr = 0;
    for (int64_t e = 0; e < sk * d; ++e) {
        rk[e] *= reps, rv[e] *= reps;
        kmax = fmax(kmax, fabs(rk[e])), vmax = fmax(vmax, fabs(rv[e]));
        kerr = fmax(kerr, fabs(to_double_bits(gk[e]) - rk[e]));
        verr = fmax(verr, fabs(to_double_bits(gv[e]) - rv[e]));
    }
    cudaFree(d_q), cudaFree(d_do), cudaFree(d_k), cudaFree(d_v), cudaFree(d_o);
    cudaFree(d_dq), cudaFree(d_dk), cudaFree(d_dv), cudaFree(d_lse), cudaFree(ws);
    free(q), free(dob), free(k), free(v), free(gk), free(gv), free(ob), free(qf), free(dof);
    free(kf), free(vf), free(rk), free(rv), free(pr);
    return fmax(kerr / fmax(kmax, 1e-30), verr / fmax(vmax, 1e-30));
}

int main(int argc, char **argv)
{
    int max_log2 = 26;
    int64_t d = 64;
    fa2_device_info_t dev;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--max-log2") == 0)
            max_log2 = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--head-dim") == 0)
            d = atoll(argv[i + 1]);
    }
    if (fa2_device_info_query(0, &dev) != FA2_SUCCESS) {
        printf("fa2_long_rows: no usable GPU: %s\n", fa2_last_error());
        return 1;
    }
    printf("fa2_long_rows: bf16, head_dim %lld, sm_%d%d; relative error vs a double "
           "reference (bf16 output rounding alone: ~4e-3)\n",
           (long long)d, dev.cc_major, dev.cc_minor);
    printf("%-9s %7s %6s %10s\n", "direction", "period", "log2N", "rel.error");
    static const int64_t periods[] = {1, 4096};
    for (int pi = 0; pi < 2; ++pi)
        for (int l = 20; l <= max_log2; l += 2) {
            const int64_t n = INT64_C(1) << l;
            printf("%-9s %7lld %6d %10.2e\n", "forward", (long long)periods[pi], l,
                   forward_error(&dev, n, periods[pi], d));
            fflush(stdout);
        }
    /* N query rows: Q, O, dO, dQ of N * d * 2 bytes each, the dQ accumulator 2x that */
    for (int pi = 0; pi < 2; ++pi)
        for (int l = 20; l <= (max_log2 < 26 ? max_log2 : 26); l += 2) {
            const int64_t n = INT64_C(1) << l;
            printf("%-9s %7lld %6d %10.2e\n", "backward", (long long)periods[pi], l,
                   backward_error(&dev, n, periods[pi], d));
            fflush(stdout);
        }
    return 0;
}
