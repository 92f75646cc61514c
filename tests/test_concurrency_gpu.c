/* Concurrency (label gpu; exit 77 without a device): 8 host threads, each with its own
 * stream and its own problem, call fa2_forward and fa2_backward 100 times each at the
 * same time. Every iteration's O, LSE, dQ, dK and dV must be bit-identical to a serial
 * run of the same problem made first (deterministic = 1). Thread 7 fails on purpose on
 * every iteration (a misaligned q, then a plan with a bad struct_size): its
 * fa2_last_error() must name its own failure, while every other thread's message stays
 * "" after each of its successful calls. One line per thread. */
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "fa2.h"
#include "gpu_rows.h"

#define THREADS 8
#define ITERS 100
#define FAILING_THREAD 7

typedef struct job_t {
    int id;
    fa2_dtype_t dtype;
    int64_t batch, sq, sk, hq, hkv, d;
    int32_t causal;
    int64_t wl, wr;
    /* filled by setup */
    fa2_plan_t plan;
    size_t bq, bk, blse, bws;
    void *q, *k, *v, *o, *d_o, *dq, *dk, *dv, *ws;
    float *lse;
    unsigned char *ref[5], *got[5]; /* o, lse, dq, dk, dv */
    /* results */
    int mismatched_iters, status_errors, message_errors, cuda_errors;
    char first_problem[200];
} job_t;

static job_t jobs[THREADS] = {
    {0, FA2_DTYPE_BF16, 2, 130, 130, 4, 4, 64, 1, -1, -1},
    {1, FA2_DTYPE_FP16, 1, 257, 200, 8, 2, 128, 0, -1, -1},
    {2, FA2_DTYPE_BF16, 1, 100, 333, 4, 1, 256, 0, 40, 10},
    {3, FA2_DTYPE_FP16, 3, 77, 77, 2, 2, 32, 1, 16, -1},
    {4, FA2_DTYPE_BF16, 1, 200, 150, 6, 3, 96, 1, -1, -1},
    {5, FA2_DTYPE_FP16, 2, 64, 300, 4, 4, 192, 0, -1, -1},
    {6, FA2_DTYPE_BF16, 1, 333, 333, 2, 1, 40, 0, -1, 7},
    {7, FA2_DTYPE_FP16, 1, 128, 128, 2, 2, 64, 1, -1, -1},
};

static fa2_device_info_t g_info;

static void note(job_t *j, const char *what)
{
    if (!j->first_problem[0])
        snprintf(j->first_problem, sizeof j->first_problem, "%s", what);
}

/* forward + backward on `stream`, results copied into j->got; 0 on success */
static int run_once(job_t *j, cudaStream_t stream, int *status_error)
{
    void *outs[5] = {j->o, j->lse, j->dq, j->dk, j->dv};
    const size_t sizes[5] = {j->bq, j->blse, j->bq, j->bk, j->bk};
    for (int t = 0; t < 5; ++t)
        if (cudaMemsetAsync(outs[t], 0xFF, sizes[t], stream) != cudaSuccess)
            return -1;
    fa2_status_t s = fa2_forward(&j->plan, j->q, j->k, j->v, j->o, j->lse, NULL, 0, stream);
    if (s != FA2_SUCCESS || fa2_last_error()[0] != '\0') {
        *status_error = 1;
        return -1;
    }
    s = fa2_backward(&j->plan, j->q, j->k, j->v, j->o, j->d_o, j->lse, j->dq, j->dk, j->dv,
                     j->ws, j->bws, stream);
    if (s != FA2_SUCCESS || fa2_last_error()[0] != '\0') {
        *status_error = 1;
        return -1;
    }
    for (int t = 0; t < 5; ++t)
        if (cudaMemcpyAsync(j->got[t], outs[t], sizes[t], cudaMemcpyDeviceToHost, stream) !=
            cudaSuccess)
            return -1;
    return cudaStreamSynchronize(stream) == cudaSuccess ? 0 : -1;
}

static int setup_job(job_t *j)
{
    fa2_problem_t p;
    fa2_problem_init(&p, j->dtype, j->batch, j->sq, j->sk, j->hq, j->hkv, j->d);
    p.causal = j->causal;
    p.window_left = j->wl;
    p.window_right = j->wr;
    p.deterministic = 1;
    if (fa2_plan(&p, &g_info, &j->plan) != FA2_SUCCESS) {
        printf("thread %d: fa2_plan: %s\n", j->id, fa2_last_error());
        return -1;
    }
    j->bq = sizeof(uint16_t) * (size_t)(j->batch * j->sq * j->hq * j->d);
    j->bk = sizeof(uint16_t) * (size_t)(j->batch * j->sk * j->hkv * j->d);
    j->blse = sizeof(float) * (size_t)(j->batch * j->hq * j->sq);
    j->bws = (size_t)j->plan.bwd_workspace_bytes;
    void **bufs[9] = {&j->q, &j->k, &j->v, &j->o, &j->d_o, &j->dq, &j->dk, &j->dv, &j->ws};
    const size_t sizes[9] = {j->bq, j->bk, j->bk, j->bq, j->bq, j->bq, j->bk, j->bk,
                             j->bws + 16};
    for (int t = 0; t < 9; ++t)
        if (cudaMalloc(bufs[t], sizes[t]) != cudaSuccess)
            return -1;
    if (cudaMalloc((void **)&j->lse, j->blse) != cudaSuccess)
        return -1;
    const size_t osz[5] = {j->bq, j->blse, j->bq, j->bk, j->bk};
    for (int t = 0; t < 5; ++t) {
        j->ref[t] = malloc(osz[t]);
        j->got[t] = malloc(osz[t]);
        if (!j->ref[t] || !j->got[t])
            return -1;
    }
    const gpu_rows_table_t tab = gpu_rows_table(j->dtype, 1.0f);
    uint16_t *h = malloc(j->bq > j->bk ? j->bq : j->bk);
    if (!h)
        return -1;
    void *ins[4] = {j->q, j->k, j->v, j->d_o};
    const size_t isz[4] = {j->bq, j->bk, j->bk, j->bq};
    for (int t = 0; t < 4; ++t) {
        gpu_rows_fill(h, (int64_t)(isz[t] / 2), (uint64_t)(100 * j->id + t), &tab);
        if (cudaMemcpy(ins[t], h, isz[t], cudaMemcpyHostToDevice) != cudaSuccess) {
            free(h);
            return -1;
        }
    }
    free(h);
    return 0;
}

static void *worker(void *arg)
{
    job_t *j = arg;
    cudaStream_t stream;
    if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) {
        j->cuda_errors++;
        return NULL;
    }
    const size_t osz[5] = {j->bq, j->blse, j->bq, j->bk, j->bk};
    static const char *const names[5] = {"O", "LSE", "dQ", "dK", "dV"};
    for (int it = 0; it < ITERS; ++it) {
        if (j->id == FAILING_THREAD) {
            /* fails on purpose: its message is its own */
            char buf[200];
            fa2_status_t s = fa2_forward(&j->plan, (char *)j->q + 2, j->k, j->v, j->o, j->lse,
                                         NULL, 0, stream);
            if (s != FA2_ERROR_MISALIGNED)
                j->status_errors++, note(j, "misaligned q was not FA2_ERROR_MISALIGNED");
            snprintf(buf, sizeof buf, "q=%p is not 16-byte aligned", (void *)((char *)j->q + 2));
            if (strcmp(fa2_last_error(), buf) != 0) {
                j->message_errors++;
                snprintf(buf, sizeof buf, "iteration %d: message \"%s\"", it, fa2_last_error());
                note(j, buf);
            }
            fa2_plan_t bad = j->plan;
            bad.struct_size = 1;
            s = fa2_backward(&bad, j->q, j->k, j->v, j->o, j->d_o, j->lse, j->dq, j->dk, j->dv,
                             j->ws, j->bws, stream);
            if (s != FA2_ERROR_STRUCT_SIZE)
                j->status_errors++, note(j, "bad plan was not FA2_ERROR_STRUCT_SIZE");
            if (strncmp(fa2_last_error(), "plan->struct_size=1,", 20) != 0) {
                j->message_errors++;
                snprintf(buf, sizeof buf, "iteration %d: message \"%s\"", it, fa2_last_error());
                note(j, buf);
            }
            continue;
        }
        int status_error = 0;
        if (run_once(j, stream, &status_error) != 0) {
            if (status_error) {
                char buf[200];
                snprintf(buf, sizeof buf, "iteration %d: status/message \"%s\"", it,
                         fa2_last_error());
                j->status_errors++, note(j, buf);
            } else {
                j->cuda_errors++, note(j, "CUDA error");
            }
            continue;
        }
        int differ = 0;
        for (int t = 0; t < 5; ++t)
            if (memcmp(j->got[t], j->ref[t], osz[t]) != 0) {
                if (!differ) {
                    char buf[200];
                    snprintf(buf, sizeof buf, "iteration %d: %s differs from the serial run", it,
                             names[t]);
                    note(j, buf);
                }
                differ = 1;
            }
        j->mismatched_iters += differ;
    }
    cudaStreamSynchronize(stream);
    cudaStreamDestroy(stream);
    return NULL;
}

int main(int argc, char **argv)
{
    const int probe = gpu_rows_probe("test_concurrency_gpu", &g_info);
    if (probe || (argc > 1 && strcmp(argv[1], "--probe") == 0))
        return probe;
    int failed = 0;
    /* serial reference runs, one stream, one problem after the other */
    cudaStream_t s0;
    if (cudaStreamCreate(&s0) != cudaSuccess)
        return 1;
    for (int t = 0; t < THREADS; ++t) {
        int se = 0;
        if (setup_job(&jobs[t]) != 0) {
            printf("thread %d: setup failed (%s)\n", t, cudaGetErrorString(cudaGetLastError()));
            return 1;
        }
        if (t == FAILING_THREAD)
            continue;
        if (run_once(&jobs[t], s0, &se) != 0) {
            printf("thread %d: serial run failed: %s\n", t, fa2_last_error());
            return 1;
        }
        for (int o = 0; o < 5; ++o) {
            unsigned char *x = jobs[t].ref[o];
            jobs[t].ref[o] = jobs[t].got[o];
            jobs[t].got[o] = x;
        }
    }
    cudaStreamDestroy(s0);
    pthread_t th[THREADS];
    for (int t = 0; t < THREADS; ++t)
        if (pthread_create(&th[t], NULL, worker, &jobs[t]) != 0) {
            printf("pthread_create failed\n");
            return 1;
        }
    for (int t = 0; t < THREADS; ++t)
        pthread_join(th[t], NULL);
    for (int t = 0; t < THREADS; ++t) {
        job_t *j = &jobs[t];
        const int pass = j->mismatched_iters == 0 && j->status_errors == 0 &&
                         j->message_errors == 0 && j->cuda_errors == 0;
        failed += !pass;
        printf("thread %d: %s b=%" PRId64 " q=%" PRId64 " k=%" PRId64 " hq=%" PRId64
               " hkv=%" PRId64 " d=%" PRId64 "%s wl=%" PRId64 " wr=%" PRId64 ", %d iterations %s: "
               "%d not bit-identical to serial, %d status, %d message, %d CUDA errors%s%s %s\n",
               t, j->dtype == FA2_DTYPE_BF16 ? "bf16" : "fp16", j->batch, j->sq, j->sk, j->hq,
               j->hkv, j->d, j->causal ? " causal" : "", j->wl, j->wr, ITERS,
               t == FAILING_THREAD ? "of failing calls (misaligned q; bad plan)"
                                   : "of forward+backward",
               j->mismatched_iters, j->status_errors, j->message_errors, j->cuda_errors,
               j->first_problem[0] ? "; first: " : "", j->first_problem, pass ? "PASS" : "FAIL");
    }
    printf("test_concurrency_gpu: %d of %d threads failed\n", failed, THREADS);
    return failed ? 1 : 0;
}
