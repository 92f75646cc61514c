/* fa2_host_overhead: what the C API costs the host per call, beside an empty kernel
 * launch. A problem small enough that the GPU finishes each call's kernels before the
 * host issues the next (batch 1, 128 rows, 8 heads, d 64, bf16), so the CPU time to
 * issue N calls back to back is the call's host cost. Each row: the median of 7 rounds
 * of N calls after a warm-up, microseconds per call.
 *
 *     build/bench/fa2_host_overhead [N]        (default 2000)
 *
 * Exit 0, 1 on a failed call, 77 without a GPU. The Python twin: bench/host_overhead.py. */
#define _POSIX_C_SOURCE 199309L /* clock_gettime */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "bench_kernels.h"
#include "fa2.h"

enum { kRounds = 7 };

typedef struct {
    fa2_problem_t problem;
    fa2_device_info_t device;
    fa2_plan_t plan;
    void *q, *k, *v, *o, *d_o, *dq, *dk, *dv, *workspace;
    float *lse;
    cudaStream_t stream;
} calls_t;

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec * 1e-3;
}

static int call_plan(calls_t *c)
{
    fa2_plan_t plan;
    return (int)fa2_plan(&c->problem, &c->device, &plan);
}

static int call_forward(calls_t *c)
{
    return (int)fa2_forward(&c->plan, c->q, c->k, c->v, c->o, c->lse, NULL, 0, c->stream);
}

static int call_backward(calls_t *c)
{
    return (int)fa2_backward(&c->plan, c->q, c->k, c->v, c->o, c->d_o, c->lse, c->dq, c->dk,
                             c->dv, c->workspace, (size_t)c->plan.bwd_workspace_bytes,
                             c->stream);
}

static int call_empty(calls_t *c) { return bench_empty_launch(0, c->stream); }
static int call_empty_1k(calls_t *c) { return bench_empty_launch(1, c->stream); }
static int call_smem_attribute(calls_t *c)
{
    (void)c;
    return bench_set_smem_attribute(64 * 1024);
}

static int compare_doubles(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median over rounds of the host time per call; -1 if a call failed. */
static double host_us(int (*call)(calls_t *), calls_t *c, int n)
{
    double rounds[kRounds];
    for (int i = 0; i < 100; ++i)
        if (call(c)) return -1.0;
    cudaStreamSynchronize(c->stream);
    for (int r = 0; r < kRounds; ++r) {
        const double t0 = now_us();
        for (int i = 0; i < n; ++i)
            if (call(c)) return -1.0;
        rounds[r] = (now_us() - t0) / n;
        cudaStreamSynchronize(c->stream);
    }
    qsort(rounds, kRounds, sizeof rounds[0], compare_doubles);
    return rounds[kRounds / 2];
}

int main(int argc, char **argv)
{
    const int n = argc > 1 ? atoi(argv[1]) : 2000;
    calls_t c = {0};
    if (n < 1) {
        fprintf(stderr, "usage: fa2_host_overhead [calls per round >= 1]\n");
        return 2;
    }
    if (fa2_device_info_query(0, &c.device) != FA2_SUCCESS) {
        printf("fa2_host_overhead: no usable GPU (%s); nothing measured\n", fa2_last_error());
        return 77;
    }
    fa2_problem_init(&c.problem, FA2_DTYPE_BF16, 1, 128, 128, 8, 8, 64);
    if (fa2_plan(&c.problem, &c.device, &c.plan) != FA2_SUCCESS) {
        fprintf(stderr, "fa2_plan: %s\n", fa2_last_error());
        return 1;
    }
    const size_t bytes = (size_t)128 * 8 * 64 * 2;
    void **buffers[] = {&c.q, &c.k, &c.v, &c.o, &c.d_o, &c.dq, &c.dk, &c.dv};
    for (size_t i = 0; i < sizeof buffers / sizeof buffers[0]; ++i) {
        if (cudaMalloc(buffers[i], bytes) != cudaSuccess) return 1;
        bench_fill_uniform(*buffers[i], (int64_t)bytes / 2, 1, 11 + i, NULL);
    }
    if (cudaMalloc((void **)&c.lse, 8 * 128 * sizeof(float)) != cudaSuccess ||
        cudaMalloc(&c.workspace, (size_t)c.plan.bwd_workspace_bytes + 16) != cudaSuccess ||
        cudaStreamCreateWithFlags(&c.stream, cudaStreamNonBlocking) != cudaSuccess)
        return 1;
    cudaDeviceSynchronize();

    const struct {
        const char *name;
        int (*call)(calls_t *);
    } rows[] = {
        {"fa2_plan", call_plan},
        {"fa2_forward", call_forward},
        {"fa2_backward", call_backward},
        {"empty launch, 8-byte params", call_empty},
        {"empty launch, 1 KiB params", call_empty_1k},
        {"shared-memory attribute (get + set)", call_smem_attribute},
    };
    printf("host cost per call, us (median of %d rounds of %d calls; bf16 b1 s128 h8 d64)\n",
           kRounds, n);
    int failed = 0;
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; ++i) {
        const double us = host_us(rows[i].call, &c, n);
        if (us < 0) {
            printf("%-38s FAILED: %s\n", rows[i].name, fa2_last_error());
            failed = 1;
            continue;
        }
        printf("%-38s %8.2f\n", rows[i].name, us);
    }
    return failed;
}
