/*
 * fa2_bench: libfa2 forward TFLOP/s over the standard shapes, next to "standard
 * attention" (cuBLAS S = QK^T, a softmax kernel, cuBLAS O = PV), with the peak extra
 * memory each needs; then libfa2's backward (fa2_backward) and forward+backward
 * TFLOP/s on the same shapes (no baseline for the backward). Method:
 * docs/performance.md.
 *
 * Standard shapes: 16k tokens per batch (batch = 16384 / seqlen), hidden 2048
 * (heads = 2048 / head_dim), seqlen 512..16k, head_dim 64/128/256, causal off/on.
 *
 *   fa2_bench [--dtype bf16|fp16] [--seqlen N[,N...]] [--head-dim D[,D...]]
 *             [--causal 0|1] [--iters N] [--warmup N] [--csv FILE]
 *             [--no-baseline] [--baseline-max-gb X] [--no-backward] [--deterministic]
 *
 * Exit: 0 all ran and the spot checks passed (forward O vs the baseline; every dQ, dK,
 * dV element finite); 1 a failure; 2 no CUDA device.
 */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_kernels.h"
#include "fa2.h"

#define TOKENS 16384
#define HIDDEN 2048
#define MAX_LIST 16
#define SPOT_CHECK_MAX_REL_L2 2e-2

/* The one FLOP count: two matmuls of 2*Nq*Nk*d each per (batch, head); causal does
 * half the work. */
static double attention_flops(int64_t batch, int64_t heads, int64_t seqlen_q,
                              int64_t seqlen_k, int64_t head_dim, int causal)
{
    double flops = 4.0 * (double)batch * (double)heads * (double)seqlen_q *
                   (double)seqlen_k * (double)head_dim;
    return causal ? flops / 2.0 : flops;
}

/* Backward FLOPs: five matmuls (S recomputed, dV = P^T dO, dP = dO V^T, dQ = dS K,
 * dK = dS^T Q) against the forward's two: 2.5 x the forward's count. */
static double backward_flops(double forward_flops) { return 2.5 * forward_flops; }

static void check_cuda(cudaError_t err, const char *what)
{
    if (err != cudaSuccess) {
        fprintf(stderr, "fa2_bench: %s: %s\n", what, cudaGetErrorString(err));
        exit(1);
    }
}

static void check_cublas(cublasStatus_t st, const char *what)
{
    if (st != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "fa2_bench: %s: cuBLAS status %d\n", what, (int)st);
        exit(1);
    }
}

typedef struct options_t {
    fa2_dtype_t dtype;
    int64_t seqlens[MAX_LIST];
    int n_seqlens;
    int64_t head_dims[MAX_LIST];
    int n_head_dims;
    int causals[2];
    int n_causals;
    int iters;
    int warmup;
    const char *csv_path;
    int baseline;
    double baseline_max_gb;
    int backward;      /* time fa2_backward too (--no-backward: 0) */
    int deterministic; /* plan with problem.deterministic = 1 (--deterministic) */
} options_t;

static int parse_list(const char *text, int64_t *out, int max)
{
    int n = 0;
    const char *p = text;
    while (*p && n < max) {
        char *end;
        long long v = strtoll(p, &end, 10);
        if (end == p || v <= 0) return -1;
        out[n++] = v;
        p = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return -1;
    }
    return n;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: fa2_bench [--dtype bf16|fp16] [--seqlen N[,N...]] [--head-dim D[,D...]]\n"
            "                 [--causal 0|1] [--iters N] [--warmup N] [--csv FILE]\n"
            "                 [--no-baseline] [--baseline-max-gb X] [--no-backward]\n"
            "                 [--deterministic]\n");
}

static int parse_options(int argc, char **argv, options_t *o)
{
    static const int64_t seqlens[] = {512, 1024, 2048, 4096, 8192, 16384};
    static const int64_t head_dims[] = {64, 128, 256};
    memset(o, 0, sizeof *o);
    o->dtype = FA2_DTYPE_BF16;
    o->n_seqlens = 6;
    memcpy(o->seqlens, seqlens, sizeof seqlens);
    o->n_head_dims = 3;
    memcpy(o->head_dims, head_dims, sizeof head_dims);
    o->causals[0] = 0;
    o->causals[1] = 1;
    o->n_causals = 2;
    o->iters = 30;
    o->warmup = 5;
    o->baseline = 1;
    o->baseline_max_gb = 40.0;
    o->backward = 1;
    for (int i = 1; i < argc; ++i) {
        const char *arg = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(arg, "--no-baseline")) {
            o->baseline = 0;
            continue;
        }
        if (!strcmp(arg, "--no-backward")) {
            o->backward = 0;
            continue;
        }
        if (!strcmp(arg, "--deterministic")) {
            o->deterministic = 1;
            continue;
        }
        if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) return -1;
        static const char *const valued[] = {"--dtype",  "--seqlen", "--head-dim",
                                             "--causal", "--iters",  "--warmup",
                                             "--csv",    "--baseline-max-gb"};
        int known = 0;
        for (size_t j = 0; j < sizeof valued / sizeof valued[0]; ++j)
            known |= !strcmp(arg, valued[j]);
        if (!known) {
            fprintf(stderr, "fa2_bench: unknown option %s\n", arg);
            return -1;
        }
        if (!val) {
            fprintf(stderr, "fa2_bench: %s needs a value\n", arg);
            return -1;
        }
        ++i;
        if (!strcmp(arg, "--dtype")) {
            if (!strcmp(val, "bf16")) o->dtype = FA2_DTYPE_BF16;
            else if (!strcmp(val, "fp16")) o->dtype = FA2_DTYPE_FP16;
            else return -1;
        } else if (!strcmp(arg, "--seqlen")) {
            if ((o->n_seqlens = parse_list(val, o->seqlens, MAX_LIST)) <= 0) return -1;
        } else if (!strcmp(arg, "--head-dim")) {
            if ((o->n_head_dims = parse_list(val, o->head_dims, MAX_LIST)) <= 0) return -1;
        } else if (!strcmp(arg, "--causal")) {
            if (strcmp(val, "0") && strcmp(val, "1")) return -1;
            o->causals[0] = atoi(val);
            o->n_causals = 1;
        } else if (!strcmp(arg, "--iters")) {
            if ((o->iters = atoi(val)) < 1) return -1;
        } else if (!strcmp(arg, "--warmup")) {
            if ((o->warmup = atoi(val)) < 0) return -1;
        } else if (!strcmp(arg, "--csv")) {
            o->csv_path = val;
        } else if (!strcmp(arg, "--baseline-max-gb")) {
            if ((o->baseline_max_gb = atof(val)) <= 0.0) return -1;
        }
    }
    return 0;
}

/* ---- timing ---------------------------------------------------------------------- */

static int compare_floats(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* One timed run: `run(ctx, set)` enqueues one call (fa2_forward, fa2_backward or the
 * baseline) on `stream` using input set `set`; returns 0 on success. */
typedef int (*run_fn)(void *ctx, int set, cudaStream_t stream);

/* Median milliseconds of `iters` runs (each between its own pair of events), after
 * `warmup` untimed runs, rotating over `n_sets` input sets. Negative on failure. */
static double time_median_ms(run_fn run, void *ctx, int n_sets, int warmup, int iters,
                             cudaStream_t stream)
{
    cudaEvent_t *events = malloc(sizeof(cudaEvent_t) * 2 * (size_t)iters);
    float *ms = malloc(sizeof(float) * (size_t)iters);
    if (!events || !ms) {
        fprintf(stderr, "fa2_bench: out of host memory\n");
        exit(1);
    }
    for (int i = 0; i < 2 * iters; ++i) check_cuda(cudaEventCreate(&events[i]), "cudaEventCreate");
    double median = -1.0;
    for (int i = 0; i < warmup; ++i)
        if (run(ctx, i % n_sets, stream)) goto done;
    for (int i = 0; i < iters; ++i) {
        check_cuda(cudaEventRecord(events[2 * i], stream), "cudaEventRecord");
        if (run(ctx, (warmup + i) % n_sets, stream)) goto done;
        check_cuda(cudaEventRecord(events[2 * i + 1], stream), "cudaEventRecord");
    }
    check_cuda(cudaStreamSynchronize(stream), "timed runs");
    for (int i = 0; i < iters; ++i)
        check_cuda(cudaEventElapsedTime(&ms[i], events[2 * i], events[2 * i + 1]),
                   "cudaEventElapsedTime");
    qsort(ms, (size_t)iters, sizeof(float), compare_floats);
    median = iters % 2 ? ms[iters / 2] : 0.5 * ((double)ms[iters / 2 - 1] + ms[iters / 2]);
done:
    for (int i = 0; i < 2 * iters; ++i) cudaEventDestroy(events[i]);
    free(events);
    free(ms);
    return median;
}

/* ---- the two contestants ------------------------------------------------------- */

#define MAX_SETS 8

typedef struct shape_ctx_t {
    fa2_plan_t plan;
    int64_t batch, heads, seqlen, head_dim;
    int causal, is_bf16;
    void *q[MAX_SETS], *k[MAX_SETS], *v[MAX_SETS];
    void *o[MAX_SETS];                  /* libfa2's O of each set (the backward's input) */
    float *lse[MAX_SETS];               /* and its LSE */
    /* backward */
    void *d_o[MAX_SETS];                /* dO of each set, random like the inputs */
    void *dq, *dk, *dv;                 /* outputs, shared by the sets */
    void *bwd_workspace;                /* plan.bwd_workspace_bytes */
    void *o_base;
    /* baseline */
    cublasHandle_t cublas;
    void *s, *p;                        /* [batch*heads, seqlen, seqlen] each */
    void **ptrs[MAX_SETS];              /* device: K, Q, S, V, P, O pointer arrays */
    const char *error;                  /* first failure message */
} shape_ctx_t;

static int run_fa2(void *opaque, int set, cudaStream_t stream)
{
    shape_ctx_t *c = opaque;
    fa2_status_t st = fa2_forward(&c->plan, c->q[set], c->k[set], c->v[set], c->o[set],
                                  c->lse[set], NULL, 0, stream);
    if (st != FA2_SUCCESS) {
        fprintf(stderr, "fa2_bench: fa2_forward: %s: %s\n", fa2_status_string(st),
                fa2_last_error());
        return 1;
    }
    return 0;
}

/* The backward of set `set`: its Q, K, V, the forward's O and LSE of that set, its dO. */
static int run_fa2_backward(void *opaque, int set, cudaStream_t stream)
{
    shape_ctx_t *c = opaque;
    fa2_status_t st = fa2_backward(&c->plan, c->q[set], c->k[set], c->v[set], c->o[set],
                                   c->d_o[set], c->lse[set], c->dq, c->dk, c->dv,
                                   c->bwd_workspace, (size_t)c->plan.bwd_workspace_bytes,
                                   stream);
    if (st != FA2_SUCCESS) {
        fprintf(stderr, "fa2_bench: fa2_backward: %s: %s\n", fa2_status_string(st),
                fa2_last_error());
        return 1;
    }
    return 0;
}

/* Standard attention on BSHD tensors, batched over (batch, head) with pointer arrays
 * (one cuBLAS call per matmul). cuBLAS is column-major: a row-major [N, d] matrix with
 * row stride heads*d is a column-major d x N matrix with ld = heads*d.
 *   S^T (Nk x Nq) = K (Nk x d) . Q^T        -> gemm(T, N, Nk, Nq, d)
 *   O^T (d x Nq)  = V^T (d x Nk) . P^T      -> gemm(N, N, d, Nq, Nk) */
static int run_baseline(void *opaque, int set, cudaStream_t stream)
{
    shape_ctx_t *c = opaque;
    const int n = (int)c->seqlen, d = (int)c->head_dim, ld = (int)(c->heads * c->head_dim);
    const int count = (int)(c->batch * c->heads);
    const cudaDataType dt = c->is_bf16 ? CUDA_R_16BF : CUDA_R_16F;
    const float scale = c->plan.problem.softmax_scale, one = 1.0f, zero = 0.0f;
    void **ptr = c->ptrs[set];
    const size_t m = (size_t)count;
    cublasStatus_t st = cublasGemmBatchedEx(
        c->cublas, CUBLAS_OP_T, CUBLAS_OP_N, n, n, d, &scale, (const void *const *)ptr, dt,
        ld, (const void *const *)(ptr + m), dt, ld, &zero, ptr + 2 * m, dt, n, count,
        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (st != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "fa2_bench: baseline S = QK^T: cuBLAS status %d\n", (int)st);
        return 1;
    }
    int err = bench_softmax_rows(c->s, c->p, c->batch * c->heads, c->seqlen, c->seqlen,
                                 c->causal, c->is_bf16, stream);
    if (err) {
        fprintf(stderr, "fa2_bench: baseline softmax: %s\n", cudaGetErrorString(err));
        return 1;
    }
    st = cublasGemmBatchedEx(c->cublas, CUBLAS_OP_N, CUBLAS_OP_N, d, n, n, &one,
                             (const void *const *)(ptr + 3 * m), dt, ld,
                             (const void *const *)(ptr + 4 * m), dt, n, &zero, ptr + 5 * m,
                             dt, ld, count, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (st != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "fa2_bench: baseline O = PV: cuBLAS status %d\n", (int)st);
        return 1;
    }
    return 0;
}

/* Device pointer arrays for run_baseline: K, Q, S, V, P, O, one entry per (b, h). */
static void make_pointer_arrays(shape_ctx_t *c, int set)
{
    const size_t count = (size_t)(c->batch * c->heads);
    const size_t elem = 2;
    void **host = malloc(6 * count * sizeof(void *));
    if (!host) exit(1);
    for (int64_t b = 0; b < c->batch; ++b)
        for (int64_t h = 0; h < c->heads; ++h) {
            size_t i = (size_t)(b * c->heads + h);
            size_t tensor_off = (size_t)((b * c->seqlen * c->heads + h) * c->head_dim) * elem;
            size_t score_off = i * (size_t)(c->seqlen * c->seqlen) * elem;
            host[0 * count + i] = (char *)c->k[set] + tensor_off;
            host[1 * count + i] = (char *)c->q[set] + tensor_off;
            host[2 * count + i] = (char *)c->s + score_off;
            host[3 * count + i] = (char *)c->v[set] + tensor_off;
            host[4 * count + i] = (char *)c->p + score_off;
            host[5 * count + i] = (char *)c->o_base + tensor_off;
        }
    check_cuda(cudaMalloc((void **)&c->ptrs[set], 6 * count * sizeof(void *)), "cudaMalloc");
    check_cuda(cudaMemcpy(c->ptrs[set], host, 6 * count * sizeof(void *),
                          cudaMemcpyHostToDevice),
               "cudaMemcpy");
    free(host);
}

/* ---- one shape -------------------------------------------------------------------- */

typedef struct result_t {
    int64_t batch, heads, seqlen, head_dim;
    int causal;
    int ok;                  /* fa2 ran */
    double fa2_ms, fa2_tflops;
    int base_state;          /* 1 ran, 0 skipped (--no-baseline), -1 too big, -2 failed */
    double base_ms, base_tflops;
    double base_extra_bytes; /* S and P */
    int64_t fa2_extra_bytes; /* workspace */
    int64_t lse_bytes;       /* output, listed for reference */
    int block_m, block_n;
    int spot_state;          /* 0 not checked, 1 ok, -1 mismatch or failed */
    double spot_rel_l2;      /* libfa2 O vs baseline O */
    int bwd_state;           /* 1 ran and all finite, 0 skipped, -1 failed, -2 non-finite */
    double bwd_ms, bwd_tflops, fwdbwd_tflops;
    int64_t bwd_workspace_bytes; /* plan.bwd_workspace_bytes */
    int64_t bwd_nonfinite;   /* non-finite elements in dQ, dK, dV together */
} result_t;

static double gb(double bytes) { return bytes / 1e9; }

/* Non-finite (Inf or NaN: all exponent bits set) elements among n 16-bit values (bf16
 * or fp16) on the device; copies them back, synchronously. */
static int64_t count_nonfinite(const void *data, int64_t n, int is_bf16)
{
    const uint16_t exponent = is_bf16 ? 0x7f80 : 0x7c00;
    uint16_t *host = malloc((size_t)n * sizeof(uint16_t));
    if (!host) {
        fprintf(stderr, "fa2_bench: out of host memory\n");
        exit(1);
    }
    check_cuda(cudaMemcpy(host, data, (size_t)n * sizeof(uint16_t), cudaMemcpyDeviceToHost),
               "copy back a gradient");
    int64_t bad = 0;
    for (int64_t i = 0; i < n; ++i) bad += (host[i] & exponent) == exponent;
    free(host);
    return bad;
}

/* The backward of one shape, after its forward: dO per input set, a forward per set
 * for the O and LSE its backward reads, dQ/dK/dV poisoned with NaN (0xff bytes) so
 * an element left unwritten fails the check, then the timed fa2_backward runs, then
 * (untimed) every element of dQ, dK and dV must be finite. Fills r->bwd_*; the buffers
 * stay in `c` for bench_shape to free. `elems`: elements of each of Q, K, V (the
 * shapes are self-attention with heads_kv = heads_q, so also of dQ, dK, dV). */
static void bench_backward(const options_t *opt, shape_ctx_t *c, int n_sets, int64_t elems,
                           double forward_flops, cudaStream_t stream, result_t *r)
{
    const size_t tensor_bytes = (size_t)elems * 2;
    r->bwd_state = -1;
    if (!c->plan.bwd_supported) {
        fprintf(stderr, "fa2_bench: no backward for seqlen %lld, d %lld: %s\n",
                (long long)r->seqlen, (long long)r->head_dim,
                fa2_status_string((fa2_status_t)c->plan.bwd_status));
        return;
    }
    for (int s = 0; s < n_sets; ++s) {
        check_cuda(cudaMalloc(&c->d_o[s], tensor_bytes), "cudaMalloc dO");
        check_cuda((cudaError_t)bench_fill_uniform(c->d_o[s], elems, c->is_bf16,
                                                   3 * MAX_SETS + s + 1, stream),
                   "fill dO");
        if (run_fa2(c, s, stream)) return;
    }
    check_cuda(cudaMalloc(&c->dq, tensor_bytes), "cudaMalloc dQ");
    check_cuda(cudaMalloc(&c->dk, tensor_bytes), "cudaMalloc dK");
    check_cuda(cudaMalloc(&c->dv, tensor_bytes), "cudaMalloc dV");
    check_cuda(cudaMemsetAsync(c->dq, 0xff, tensor_bytes, stream), "poison dQ");
    check_cuda(cudaMemsetAsync(c->dk, 0xff, tensor_bytes, stream), "poison dK");
    check_cuda(cudaMemsetAsync(c->dv, 0xff, tensor_bytes, stream), "poison dV");
    if (c->plan.bwd_workspace_bytes > 0)
        check_cuda(cudaMalloc(&c->bwd_workspace, (size_t)c->plan.bwd_workspace_bytes),
                   "cudaMalloc backward workspace");
    check_cuda(cudaStreamSynchronize(stream), "backward inputs");

    r->bwd_ms =
        time_median_ms(run_fa2_backward, c, n_sets, opt->warmup, opt->iters, stream);
    if (r->bwd_ms <= 0.0) return;
    const double flops = backward_flops(forward_flops);
    r->bwd_tflops = flops / (r->bwd_ms * 1e-3) / 1e12;
    r->fwdbwd_tflops = (forward_flops + flops) / ((r->fa2_ms + r->bwd_ms) * 1e-3) / 1e12;

    const char *names[3] = {"dQ", "dK", "dV"};
    const void *grads[3] = {c->dq, c->dk, c->dv};
    for (int i = 0; i < 3; ++i) {
        int64_t bad = count_nonfinite(grads[i], elems, c->is_bf16);
        if (bad)
            fprintf(stderr, "fa2_bench: seqlen %lld, d %lld, causal %d: %lld non-finite "
                            "elements in %s\n",
                    (long long)r->seqlen, (long long)r->head_dim, r->causal, (long long)bad,
                    names[i]);
        r->bwd_nonfinite += bad;
    }
    r->bwd_state = r->bwd_nonfinite ? -2 : 1;
}

static result_t bench_shape(const options_t *opt, const fa2_device_info_t *dev,
                            int64_t seqlen, int64_t head_dim, int causal, size_t l2_bytes,
                            cublasHandle_t cublas, cudaStream_t stream, int spot_check,
                            int *spot_failed)
{
    result_t r;
    memset(&r, 0, sizeof r);
    r.batch = TOKENS / seqlen > 0 ? TOKENS / seqlen : 1;
    r.heads = HIDDEN / head_dim > 0 ? HIDDEN / head_dim : 1;
    r.seqlen = seqlen;
    r.head_dim = head_dim;
    r.causal = causal;
    r.base_state = 0;

    shape_ctx_t c;
    memset(&c, 0, sizeof c);
    c.batch = r.batch;
    c.heads = r.heads;
    c.seqlen = seqlen;
    c.head_dim = head_dim;
    c.causal = causal;
    c.is_bf16 = opt->dtype == FA2_DTYPE_BF16;
    c.cublas = cublas;

    fa2_problem_t problem;
    fa2_problem_init(&problem, opt->dtype, r.batch, seqlen, seqlen, r.heads, r.heads,
                     head_dim);
    problem.causal = causal;
    problem.deterministic = opt->deterministic;
    fa2_status_t st = fa2_plan(&problem, dev, &c.plan);
    if (st != FA2_SUCCESS) {
        fprintf(stderr, "fa2_bench: fa2_plan (seqlen %lld, d %lld): %s: %s\n",
                (long long)seqlen, (long long)head_dim, fa2_status_string(st),
                fa2_last_error());
        return r;
    }
    r.block_m = c.plan.block_m;
    r.block_n = c.plan.block_n;
    r.fa2_extra_bytes = c.plan.workspace_bytes;
    r.bwd_workspace_bytes = c.plan.bwd_workspace_bytes;
    r.lse_bytes = r.batch * r.heads * seqlen * (int64_t)sizeof(float);

    /* Input sets: enough that together they are >= 3x the L2 cache. */
    const int64_t elems = r.batch * seqlen * r.heads * head_dim;
    const size_t tensor_bytes = (size_t)elems * 2;
    int n_sets = (int)((3 * l2_bytes + 3 * tensor_bytes - 1) / (3 * tensor_bytes));
    if (n_sets < 2) n_sets = 2;
    if (n_sets > MAX_SETS) n_sets = MAX_SETS;
    for (int s = 0; s < n_sets; ++s) {
        check_cuda(cudaMalloc(&c.q[s], tensor_bytes), "cudaMalloc Q");
        check_cuda(cudaMalloc(&c.k[s], tensor_bytes), "cudaMalloc K");
        check_cuda(cudaMalloc(&c.v[s], tensor_bytes), "cudaMalloc V");
        check_cuda((cudaError_t)bench_fill_uniform(c.q[s], elems, c.is_bf16, 3 * s + 1, stream), "fill Q");
        check_cuda((cudaError_t)bench_fill_uniform(c.k[s], elems, c.is_bf16, 3 * s + 2, stream), "fill K");
        check_cuda((cudaError_t)bench_fill_uniform(c.v[s], elems, c.is_bf16, 3 * s + 3, stream), "fill V");
        check_cuda(cudaMalloc(&c.o[s], tensor_bytes), "cudaMalloc O");
        check_cuda(cudaMalloc((void **)&c.lse[s], (size_t)r.lse_bytes), "cudaMalloc LSE");
    }
    check_cuda(cudaStreamSynchronize(stream), "fill inputs");

    const double flops = attention_flops(r.batch, r.heads, seqlen, seqlen, head_dim, causal);
    r.fa2_ms = time_median_ms(run_fa2, &c, n_sets, opt->warmup, opt->iters, stream);
    r.ok = r.fa2_ms > 0.0;
    if (r.ok) r.fa2_tflops = flops / (r.fa2_ms * 1e-3) / 1e12;
    if (r.ok && opt->backward) bench_backward(opt, &c, n_sets, elems, flops, stream, &r);

    /* Baseline: S and P, [batch*heads, seqlen, seqlen] each. */
    r.base_extra_bytes = 2.0 * (double)r.batch * (double)r.heads * (double)seqlen *
                         (double)seqlen * 2.0;
    if (opt->baseline && r.base_extra_bytes > opt->baseline_max_gb * 1e9) {
        r.base_state = -1;
    } else if (opt->baseline) {
        size_t score_bytes = (size_t)(r.base_extra_bytes / 2.0);
        if (cudaMalloc(&c.s, score_bytes) != cudaSuccess ||
            cudaMalloc(&c.p, score_bytes) != cudaSuccess ||
            cudaMalloc(&c.o_base, tensor_bytes) != cudaSuccess) {
            cudaGetLastError(); /* clear the allocation error */
            r.base_state = -1;
        } else {
            for (int s = 0; s < n_sets; ++s) make_pointer_arrays(&c, s);
            r.base_ms = time_median_ms(run_baseline, &c, n_sets, opt->warmup, opt->iters,
                                       stream);
            r.base_state = r.base_ms > 0.0 ? 1 : -2;
            if (r.base_state == 1) r.base_tflops = flops / (r.base_ms * 1e-3) / 1e12;
        }
    }

    /* Spot check: both on input set 0, compare O (every shape that ran both). */
    if (spot_check && r.ok && r.base_state == 1) {
        double rel = NAN;
        if (!run_fa2(&c, 0, stream) && !run_baseline(&c, 0, stream))
            check_cuda((cudaError_t)bench_rel_l2(c.o[0], c.o_base, elems, c.is_bf16, &rel,
                                                 stream),
                       "rel L2");
        r.spot_rel_l2 = rel;
        r.spot_state = rel <= SPOT_CHECK_MAX_REL_L2 ? 1 : -1; /* NaN fails */
        if (r.spot_state < 0) *spot_failed = 1;
    }

    check_cuda(cudaStreamSynchronize(stream), "shape");
    for (int s = 0; s < n_sets; ++s) {
        cudaFree(c.q[s]);
        cudaFree(c.k[s]);
        cudaFree(c.v[s]);
        cudaFree(c.ptrs[s]);
        cudaFree(c.o[s]);
        cudaFree(c.lse[s]);
        cudaFree(c.d_o[s]);
    }
    cudaFree(c.dq);
    cudaFree(c.dk);
    cudaFree(c.dv);
    cudaFree(c.bwd_workspace);
    cudaFree(c.s);
    cudaFree(c.p);
    cudaFree(c.o_base);
    return r;
}

/* ---- output ------------------------------------------------------------------------ */

static void print_row(const result_t *r)
{
    printf("%7lld %5lld %6s %5lld %5lld |", (long long)r->seqlen, (long long)r->head_dim,
           r->causal ? "yes" : "no", (long long)r->batch, (long long)r->heads);
    if (r->ok) printf(" %9.3f %8.1f |", r->fa2_ms, r->fa2_tflops);
    else printf(" %9s %8s |", "FAILED", "-");
    if (r->bwd_state == 1 || r->bwd_state == -2)
        printf(" %9.3f %8.1f | %8.1f |", r->bwd_ms, r->bwd_tflops, r->fwdbwd_tflops);
    else printf(" %9s %8s | %8s |", r->bwd_state ? "FAILED" : "-", "-", "-");
    if (r->base_state == 1)
        printf(" %9.3f %8.1f | %7.2fx | %9.2e%s", r->base_ms, r->base_tflops,
               r->ok ? r->base_ms / r->fa2_ms : 0.0, r->spot_rel_l2,
               r->spot_state < 0 ? " MISMATCH" : "");
    else if (r->base_state == -1)
        printf(" n/a (OOM: needs %.1f GB)", gb(r->base_extra_bytes));
    else if (r->base_state == -2)
        printf(" %9s %8s | %8s", "FAILED", "-", "-");
    else
        printf(" %9s %8s | %8s", "-", "-", "-");
    printf("%s\n", r->bwd_state == -2 ? " NON-FINITE GRADIENT" : "");
    fflush(stdout);
}

static void write_csv_row(FILE *f, const char *dtype, int deterministic, const result_t *r)
{
    if (!f) return;
    fprintf(f, "%s,%lld,%lld,%lld,%lld,%d,%d,%d,", dtype, (long long)r->batch,
            (long long)r->heads, (long long)r->seqlen, (long long)r->head_dim, r->causal,
            r->block_m, r->block_n);
    if (r->ok) fprintf(f, "%.4f,%.2f,", r->fa2_ms, r->fa2_tflops);
    else fprintf(f, "nan,nan,");
    if (r->base_state == 1)
        fprintf(f, "%.4f,%.2f,%.3f,", r->base_ms, r->base_tflops,
                r->ok ? r->base_ms / r->fa2_ms : NAN);
    else fprintf(f, "nan,nan,nan,");
    fprintf(f, "%s,%.0f,%lld,%lld,%.3e,",
            r->base_state == 1 ? "ran" : r->base_state == -1 ? "oom" :
            r->base_state == -2 ? "failed" : "skipped",
            r->base_extra_bytes, (long long)r->fa2_extra_bytes, (long long)r->lse_bytes,
            r->spot_state ? r->spot_rel_l2 : NAN);
    fprintf(f, "%s,",
            r->bwd_state == 1 ? "ran" : r->bwd_state == -1 ? "failed" :
            r->bwd_state == -2 ? "nonfinite" : "skipped");
    if (r->bwd_state == 1 || r->bwd_state == -2)
        fprintf(f, "%.4f,%.2f,%.2f,", r->bwd_ms, r->bwd_tflops, r->fwdbwd_tflops);
    else fprintf(f, "nan,nan,nan,");
    fprintf(f, "%lld,%d\n", (long long)r->bwd_workspace_bytes, deterministic);
    fflush(f);
}

int main(int argc, char **argv)
{
    options_t opt;
    if (parse_options(argc, argv, &opt)) {
        usage();
        return 1;
    }

    int n_devices = 0;
    cudaError_t err = cudaGetDeviceCount(&n_devices);
    if (err != cudaSuccess || n_devices == 0) {
        printf("fa2_bench: no CUDA device: %s\n",
               err != cudaSuccess ? cudaGetErrorString(err) : "no device found");
        return 2;
    }
    fa2_device_info_t dev;
    fa2_status_t st = fa2_device_info_query(0, &dev);
    if (st != FA2_SUCCESS) {
        printf("fa2_bench: no CUDA device: %s\n", fa2_last_error());
        return 2;
    }
    struct cudaDeviceProp prop;
    check_cuda(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
    check_cuda(cudaSetDevice(0), "cudaSetDevice");

    cudaStream_t stream;
    check_cuda(cudaStreamCreate(&stream), "cudaStreamCreate");
    cublasHandle_t cublas;
    check_cublas(cublasCreate(&cublas), "cublasCreate");
    check_cublas(cublasSetStream(cublas, stream), "cublasSetStream");

    const char *dtype = opt.dtype == FA2_DTYPE_BF16 ? "bf16" : "fp16";
    unsigned v = fa2_version();
    printf("fa2_bench: libfa2 %u.%u.%u on %s (sm_%d%d, %d SMs, L2 %.0f MB, %.1f GB)\n",
           v / 10000, v / 100 % 100, v % 100, prop.name, prop.major, prop.minor,
           prop.multiProcessorCount, prop.l2CacheSize / 1e6, prop.totalGlobalMem / 1e9);
    printf("forward, %s, %d tokens per batch, hidden %d; median of %d runs after %d "
           "warm-up, CUDA events, inputs rotated over >= 2 sets (>= 3x L2)\n",
           dtype, TOKENS, HIDDEN, opt.iters, opt.warmup);
    printf("FLOPs = 4*B*H*N*N*d (halved when causal); baseline = cuBLAS QK^T + softmax + "
           "PV, S and P in %s\n", dtype);
    if (opt.backward)
        printf("backward: fa2_backward, %s; FLOPs = 2.5x forward; fwd+bwd TFLOP/s = "
               "3.5x forward FLOPs / (fwd ms + bwd ms)\n"
               "no cuBLAS baseline for the backward: speed-up and rel L2 are the "
               "forward's\n\n",
               opt.deterministic
                   ? "deterministic (problem.deterministic = 1: dQ by its own kernel, "
                     "no atomics)"
                   : "default mode (problem.deterministic = 0: dQ by fp32 atomics, except "
                     "head dims above 192 on sm_90 (plan.bwd_arch 90): a dQ kernel there)");
    else
        printf("backward: skipped (--no-backward)\n\n");
    printf("%7s %5s %6s %5s %5s | %9s %8s | %9s %8s | %8s | %9s %8s | %8s | %9s\n",
           "seqlen", "hdim", "causal", "batch", "heads", "fwd ms", "TFLOP/s", "bwd ms",
           "TFLOP/s", "fwd+bwd", "base ms", "TFLOP/s", "speed-up", "rel L2");
    printf("---------------------------------+--------------------+--------------------+"
           "----------+--------------------+----------+----------\n");

    FILE *csv = NULL;
    if (opt.csv_path) {
        csv = fopen(opt.csv_path, "w");
        if (!csv) {
            fprintf(stderr, "fa2_bench: cannot write %s\n", opt.csv_path);
            return 1;
        }
        fprintf(csv, "dtype,batch,heads,seqlen,head_dim,causal,block_m,block_n,fa2_ms,"
                     "fa2_tflops,base_ms,base_tflops,speedup,base_state,base_extra_bytes,"
                     "fa2_workspace_bytes,fa2_lse_bytes,rel_l2_vs_baseline,bwd_state,"
                     "bwd_ms,bwd_tflops,fwdbwd_tflops,bwd_workspace_bytes,deterministic\n");
    }

    result_t results[MAX_LIST * MAX_LIST * 2];
    /* Spot check the first shape of each causal setting that runs both. */
    int n_results = 0, failed = 0, spot_failed = 0, bwd_failed = 0;
    for (int ci = 0; ci < opt.n_causals; ++ci)
        for (int di = 0; di < opt.n_head_dims; ++di)
            for (int si = 0; si < opt.n_seqlens; ++si) {
                result_t r = bench_shape(&opt, &dev, opt.seqlens[si], opt.head_dims[di],
                                         opt.causals[ci], (size_t)prop.l2CacheSize, cublas,
                                         stream, 1, &spot_failed);
                if (!r.ok || r.base_state == -2 || r.bwd_state == -1) failed = 1;
                if (r.bwd_state == -2) bwd_failed = 1;
                print_row(&r);
                write_csv_row(csv, dtype, opt.deterministic, &r);
                results[n_results++] = r;
            }

    printf("\npeak extra device memory beyond inputs and outputs (Q, K, V, O, dO, dQ, dK, "
           "dV; GB = 1e9 bytes)\n");
    printf("%7s %5s %5s %5s | %16s | %16s | %14s | %14s\n", "seqlen", "hdim", "batch",
           "heads", "baseline S+P", "libfa2 workspace", "libfa2 LSE out", "bwd workspace");
    for (int i = 0; i < n_results; ++i) {
        const result_t *r = &results[i];
        if (r->causal != results[0].causal) continue; /* same memory either way */
        printf("%7lld %5lld %5lld %5lld | %13.2f GB | %13.2f MB | %11.2f MB | %11.2f MB\n",
               (long long)r->seqlen, (long long)r->head_dim, (long long)r->batch,
               (long long)r->heads, gb(r->base_extra_bytes), r->fa2_extra_bytes / 1e6,
               r->lse_bytes / 1e6, r->bwd_workspace_bytes / 1e6);
    }
    if (opt.deterministic)
        printf("bwd workspace (plan.bwd_workspace_bytes, deterministic): fp32 D, "
               "batch*heads*seqlen_q floats; grows with batch*heads*seqlen_q (at most "
               "batch*heads*seqlen_q*head_dim), never with seqlen_q*seqlen_k\n");
    else
        printf("bwd workspace (plan.bwd_workspace_bytes): fp32 D (batch*heads*seqlen_q) + "
               "fp32 dQ accumulator (batch*heads*seqlen_q*head_dim) where dQ goes by "
               "atomics; grows with batch*heads*seqlen_q*head_dim, never with "
               "seqlen_q*seqlen_k\n");
    int checked = 0, mismatched = 0, worst = -1;
    for (int i = 0; i < n_results; ++i) {
        const result_t *r = &results[i];
        if (!r->spot_state) continue;
        ++checked;
        if (r->spot_state < 0) ++mismatched;
        if (worst < 0 || !(r->spot_rel_l2 <= results[worst].spot_rel_l2)) worst = i;
    }
    printf("\n");
    if (checked)
        printf("spot check: libfa2 O vs cuBLAS baseline O on %d shapes: %s; worst rel L2 "
               "%.3e (seqlen %lld, d %lld, causal %d; limit %.0e)\n",
               checked, mismatched ? "MISMATCH" : "all ok", results[worst].spot_rel_l2,
               (long long)results[worst].seqlen, (long long)results[worst].head_dim,
               results[worst].causal, SPOT_CHECK_MAX_REL_L2);
    else if (opt.baseline)
        printf("spot check: not run (no shape ran both)\n");
    if (opt.backward) {
        int bwd_ran = 0, bwd_bad = 0;
        for (int i = 0; i < n_results; ++i) {
            bwd_ran += results[i].bwd_state == 1 || results[i].bwd_state == -2;
            bwd_bad += results[i].bwd_state == -2;
        }
        printf("backward check: dQ, dK, dV every element finite on %d of %d shapes "
               "that ran the backward%s\n",
               bwd_ran - bwd_bad, bwd_ran, bwd_bad ? ": NON-FINITE" : "");
    }

    if (csv) fclose(csv);
    cublasDestroy(cublas);
    cudaStreamDestroy(stream);
    if (failed) printf("fa2_bench: some shapes FAILED (see above)\n");
    if (spot_failed) printf("fa2_bench: spot check FAILED\n");
    if (bwd_failed) printf("fa2_bench: backward check FAILED (non-finite gradients)\n");
    return failed || spot_failed || bwd_failed ? 1 : 0;
}
