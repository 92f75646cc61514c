/* CUDA failures inside fa2_forward / fa2_backward (label gpu; exit 77 without a device).
 * Links the static library for its fault-injection hook (kernels/common/fault_hook.h).
 *
 *   - Every CUDA call site: for each route (Hopper and mma.sync kernels, the backward's
 *     atomic, deterministic and split routes), the k-th CUDA runtime call of the call is
 *     made to fail, for k = 1, 2, ... until a call runs clean. Each failure must give
 *     the right status (FA2_ERROR_NO_DEVICE for cudaGetDevice, else FA2_ERROR_CUDA with
 *     the CUDA error's text) and leave every output and the workspace untouched
 *     (poisoned buffers, compared after a sync). The one documented exception: a
 *     failing launch after a kernel that writes dQ/dK/dV was queued, which the message
 *     must say. The first sweep of the process also fails the device-property queries
 *     (cached afterwards).
 *   - A pending error the application left in the runtime: the call succeeds, its
 *     results are right, and the application's error is still pending afterwards.
 *   - `sticky` as argv[1] (its own ctest entry, since it ruins the CUDA context): after
 *     a kernel fault, fa2_forward and fa2_backward return FA2_ERROR_CUDA.
 *   - `reset` as argv[1] (its own ctest entry): cudaDeviceReset between two runs of each
 *     route. The new context's kernels are back at 48 KiB of shared memory, which the
 *     library must notice (it raises a kernel's limit once per context): both runs
 *     succeed, with bit-identical O. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "fa2.h"
#include "common/fault_hook.h"
#include "gpu_rows.h"

#define INJECTED cudaErrorNotPermitted /* what a failed call reports */

static int g_fail_at;   /* 1-based index of the call to fail; 0: none */
static int g_calls;     /* calls seen in the current libfa2 call */
static char g_failed_call[64];

static int fault_hook(const char *call)
{
    if (++g_calls == g_fail_at) {
        snprintf(g_failed_call, sizeof g_failed_call, "%s", call);
        return (int)INJECTED;
    }
    return 0;
}

typedef struct buffers_t {
    void *q, *k, *v, *o, *d_o, *dq, *dk, *dv, *ws;
    float *lse;
    size_t q_bytes, kv_bytes, lse_bytes, ws_bytes;
} buffers_t;

typedef struct route_t {
    const char *name;
    fa2_dtype_t dtype;
    int64_t head_dim;
    int deterministic;
} route_t;

static const route_t routes[] = {
    {"d64 (Hopper kernels, atomic dQ)", FA2_DTYPE_BF16, 64, 0},
    {"d64 deterministic (Hopper dQ kernel)", FA2_DTYPE_BF16, 64, 1},
    {"d256 (Hopper split dK/dV + dQ kernel)", FA2_DTYPE_FP16, 256, 0},
    {"d96 (mma.sync, atomic dQ)", FA2_DTYPE_FP16, 96, 0},
    {"d96 deterministic (mma.sync dQ kernel)", FA2_DTYPE_BF16, 96, 1},
};

static void *dev_alloc(size_t n)
{
    void *p = NULL;
    return cudaMalloc(&p, n) == cudaSuccess ? p : NULL;
}

static int make_buffers(const fa2_plan_t *plan, buffers_t *b)
{
    const fa2_problem_t *p = &plan->problem;
    const gpu_rows_table_t t = gpu_rows_table(p->dtype, 1.0f);
    memset(b, 0, sizeof *b);
    b->q_bytes = (size_t)(p->batch * p->seqlen_q * p->heads_q * p->head_dim * 2);
    b->kv_bytes = (size_t)(p->batch * p->seqlen_k * p->heads_kv * p->head_dim * 2);
    b->lse_bytes = (size_t)(p->batch * p->heads_q * p->seqlen_q * 4);
    b->ws_bytes = (size_t)plan->bwd_workspace_bytes;
    b->q = dev_alloc(b->q_bytes), b->o = dev_alloc(b->q_bytes), b->d_o = dev_alloc(b->q_bytes);
    b->dq = dev_alloc(b->q_bytes), b->k = dev_alloc(b->kv_bytes), b->v = dev_alloc(b->kv_bytes);
    b->dk = dev_alloc(b->kv_bytes), b->dv = dev_alloc(b->kv_bytes);
    b->lse = dev_alloc(b->lse_bytes), b->ws = dev_alloc(b->ws_bytes);
    if (!b->q || !b->o || !b->d_o || !b->dq || !b->k || !b->v || !b->dk || !b->dv || !b->lse ||
        !b->ws)
        return 0;
    /* random inputs (never zeros) */
    void *inputs[4] = {b->q, b->k, b->v, b->d_o};
    size_t sizes[4] = {b->q_bytes, b->kv_bytes, b->kv_bytes, b->q_bytes};
    for (int i = 0; i < 4; ++i) {
        uint16_t *h = malloc(sizes[i]);
        if (!h)
            return 0;
        gpu_rows_fill(h, (int64_t)(sizes[i] / 2), 1000u + (uint64_t)i, &t);
        const cudaError_t e = cudaMemcpy(inputs[i], h, sizes[i], cudaMemcpyHostToDevice);
        free(h);
        if (e != cudaSuccess)
            return 0;
    }
    return 1;
}

static void free_buffers(buffers_t *b)
{
    void *all[10] = {b->q, b->k, b->v, b->o, b->d_o, b->dq, b->dk, b->dv, b->ws, b->lse};
    for (int i = 0; i < 10; ++i)
        cudaFree(all[i]);
}

/* The outputs of a direction (and the backward's workspace), as host copies. */
typedef struct snapshot_t {
    void *part[5];
    size_t bytes[5];
    int n;
} snapshot_t;

static void output_list(const buffers_t *b, int backward, void **ptr, size_t *bytes, int *n)
{
    if (!backward) {
        ptr[0] = b->o, bytes[0] = b->q_bytes;
        ptr[1] = b->lse, bytes[1] = b->lse_bytes;
        *n = 2;
    } else {
        ptr[0] = b->dq, bytes[0] = b->q_bytes;
        ptr[1] = b->dk, bytes[1] = b->kv_bytes;
        ptr[2] = b->dv, bytes[2] = b->kv_bytes;
        *n = 3;
    }
}

static int poison_outputs(const buffers_t *b, int backward)
{
    void *ptr[5];
    size_t bytes[5];
    int n;
    output_list(b, backward, ptr, bytes, &n);
    for (int i = 0; i < n; ++i)
        if (cudaMemset(ptr[i], 0xFF, bytes[i]) != cudaSuccess)
            return 0;
    return cudaDeviceSynchronize() == cudaSuccess;
}

/* 1 when every output byte still holds the poison. */
static int outputs_poisoned(const buffers_t *b, int backward)
{
    void *ptr[5];
    size_t bytes[5];
    int n, ok = 1;
    output_list(b, backward, ptr, bytes, &n);
    for (int i = 0; i < n && ok; ++i) {
        unsigned char *h = malloc(bytes[i]);
        if (!h || cudaMemcpy(h, ptr[i], bytes[i], cudaMemcpyDeviceToHost) != cudaSuccess)
            ok = 0;
        for (size_t j = 0; ok && j < bytes[i]; ++j)
            ok = h[j] == 0xFF;
        free(h);
    }
    return ok;
}

static fa2_status_t run(const fa2_plan_t *plan, const buffers_t *b, int backward)
{
    if (!backward)
        return fa2_forward(plan, b->q, b->k, b->v, b->o, b->lse, NULL, 0, NULL);
    return fa2_backward(plan, b->q, b->k, b->v, b->o, b->d_o, b->lse, b->dq, b->dk, b->dv,
                        b->ws, b->ws_bytes, NULL);
}

/* Fails the 1st, 2nd, ... CUDA call of one direction until a call runs clean. Returns
 * the number of failed checks. */
static int sweep(const route_t *r, const fa2_plan_t *plan, const buffers_t *b, int backward)
{
    int failures = 0;
    for (int k = 1;; ++k) {
        if (!poison_outputs(b, backward)) {
            printf("  cuda set-up failed\n");
            return failures + 1;
        }
        g_calls = 0, g_fail_at = k, g_failed_call[0] = '\0';
        const fa2_status_t s = run(plan, b, backward);
        const int made = g_calls;
        g_fail_at = 0;
        const cudaError_t synced = cudaDeviceSynchronize();
        if (k > made) { /* nothing injected: the clean run */
            const int ok = s == FA2_SUCCESS && synced == cudaSuccess && !outputs_poisoned(b, backward);
            printf("%-40s %s: clean run after %d CUDA calls: %s %s\n", r->name,
                   backward ? "backward" : "forward ", made, fa2_status_string(s),
                   ok ? "PASS" : "FAIL");
            return failures + !ok;
        }
        const int device_call = strcmp(g_failed_call, "cudaGetDevice") == 0;
        const fa2_status_t want = device_call ? FA2_ERROR_NO_DEVICE : FA2_ERROR_CUDA;
        const int names_error =
            strstr(fa2_last_error(), cudaGetErrorString(INJECTED)) != NULL;
        const int partial = strstr(fa2_last_error(), "may be partly written") != NULL;
        const int untouched = outputs_poisoned(b, backward);
        /* only a launch after the dQ/dK/dV writer may leave them touched, and then the
         * message must say so */
        const int ok = s == want && names_error && synced == cudaSuccess &&
                       (untouched || (backward && partial &&
                                      strcmp(g_failed_call, "cudaLaunchKernelEx") == 0));
        printf("%-40s %s: call %d (%s) fails -> %s, outputs %s%s %s\n", r->name,
               backward ? "backward" : "forward ", k, g_failed_call, fa2_status_string(s),
               untouched ? "untouched" : "written",
               partial ? " (message: dq/dk/dv may be partly written)" : "", ok ? "PASS" : "FAIL");
        if (!ok)
            printf("    message: %s\n", fa2_last_error());
        failures += !ok;
    }
}

/* Leaves an error of the application's pending in the runtime; returns it, or
 * cudaSuccess when none of the tries leaves one pending. */
static cudaError_t make_pending_error(void)
{
    void *huge = NULL;
    int count = 0;
    (void)cudaGetLastError(); /* start clean */
    (void)cudaMalloc(&huge, (size_t)1 << 62);
    if (cudaPeekAtLastError() != cudaSuccess)
        return cudaPeekAtLastError();
    (void)cudaSetDevice(1 << 20);
    if (cudaPeekAtLastError() != cudaSuccess)
        return cudaPeekAtLastError();
    (void)cudaGetDeviceCount(&count);
    (void)cudaMemcpy(NULL, NULL, 16, (enum cudaMemcpyKind)77);
    return cudaPeekAtLastError();
}

/* An error the application left pending is neither reported nor cleared. */
static int pending_error(const fa2_plan_t *plan, const buffers_t *b)
{
    unsigned char *want = malloc(b->q_bytes), *got = malloc(b->q_bytes);
    int ok = want && got;
    ok = ok && run(plan, b, 0) == FA2_SUCCESS && cudaDeviceSynchronize() == cudaSuccess &&
         cudaMemcpy(want, b->o, b->q_bytes, cudaMemcpyDeviceToHost) == cudaSuccess;
    ok = ok && poison_outputs(b, 0);
    const cudaError_t app = make_pending_error();
    const fa2_status_t s = run(plan, b, 0);
    const cudaError_t still = cudaPeekAtLastError();
    ok = ok && app != cudaSuccess && s == FA2_SUCCESS && still == app;
    (void)cudaGetLastError(); /* the test, as the application, takes its error */
    ok = ok && cudaDeviceSynchronize() == cudaSuccess &&
         cudaMemcpy(got, b->o, b->q_bytes, cudaMemcpyDeviceToHost) == cudaSuccess &&
         memcmp(want, got, b->q_bytes) == 0;
    printf("pending application error %s: fa2_forward -> %s, pending afterwards: %s, O "
           "bit-identical to a clean run: %s\n",
           cudaGetErrorName(app), fa2_status_string(s), cudaGetErrorName(still),
           ok ? "PASS" : "FAIL");
    free(want), free(got);
    return !ok;
}

static fa2_problem_t route_problem(const route_t *r)
{
    fa2_problem_t p;
    fa2_problem_init(&p, r->dtype, 2, 300, 517, 4, 2, r->head_dim);
    p.causal = 1;
    p.deterministic = r->deterministic;
    return p;
}

/* After a kernel fault (an out-of-bounds read), the context is unusable: both calls
 * must say FA2_ERROR_CUDA. */
static int sticky(const fa2_device_info_t *info)
{
    fa2_problem_t p = route_problem(&routes[0]);
    fa2_plan_t plan;
    buffers_t b;
    if (fa2_plan(&p, info, &plan) != FA2_SUCCESS || !make_buffers(&plan, &b)) {
        printf("sticky: set-up failed: %s\n", fa2_last_error());
        return 1;
    }
    buffers_t bad = b;
    bad.k = (void *)(uintptr_t)0x7ff000000000ull; /* aligned, not device memory */
    const fa2_status_t first = run(&plan, &bad, 0);
    const cudaError_t fault = cudaDeviceSynchronize();
    const fa2_status_t fwd = run(&plan, &b, 0);
    char fwd_msg[512];
    snprintf(fwd_msg, sizeof fwd_msg, "%s", fa2_last_error());
    const fa2_status_t bwd = run(&plan, &b, 1);
    const int ok = first == FA2_SUCCESS && fault != cudaSuccess && fwd == FA2_ERROR_CUDA &&
                   bwd == FA2_ERROR_CUDA;
    printf("sticky: bad read -> %s; then fa2_forward -> %s (\"%s\"), fa2_backward -> %s "
           "(\"%s\") %s\n",
           cudaGetErrorName(fault), fa2_status_string(fwd), fwd_msg, fa2_status_string(bwd),
           fa2_last_error(), ok ? "PASS" : "FAIL");
    return !ok;
}

/* One route's forward and backward, synchronized; O copied to `o` (q_bytes). */
static int run_both(const fa2_plan_t *plan, const buffers_t *b, unsigned char *o)
{
    const fa2_status_t fwd = run(plan, b, 0);
    const fa2_status_t bwd = fwd == FA2_SUCCESS ? run(plan, b, 1) : fwd;
    if (fwd != FA2_SUCCESS || bwd != FA2_SUCCESS) {
        printf("  %s: %s\n", fa2_status_string(fwd != FA2_SUCCESS ? fwd : bwd), fa2_last_error());
        return 0;
    }
    return cudaDeviceSynchronize() == cudaSuccess &&
           cudaMemcpy(o, b->o, b->q_bytes, cudaMemcpyDeviceToHost) == cudaSuccess;
}

static int reset_between_runs(const fa2_device_info_t *info)
{
    int failures = 0;
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; ++i) {
        const route_t *r = &routes[i];
        fa2_problem_t p = route_problem(r);
        fa2_plan_t plan;
        buffers_t b;
        unsigned char *before = NULL, *after = NULL;
        int ok = fa2_plan(&p, info, &plan) == FA2_SUCCESS && make_buffers(&plan, &b);
        ok = ok && (before = malloc(b.q_bytes)) && (after = malloc(b.q_bytes)) &&
             run_both(&plan, &b, before);
        free_buffers(&b);
        ok = ok && cudaDeviceReset() == cudaSuccess && make_buffers(&plan, &b) &&
             run_both(&plan, &b, after) && memcmp(before, after, b.q_bytes) == 0;
        free_buffers(&b);
        printf("reset: %-40s both runs succeed, O bit-identical: %s\n", r->name,
               ok ? "PASS" : "FAIL");
        failures += !ok;
        free(before), free(after);
    }
    return failures ? 1 : 0;
}

int main(int argc, char **argv)
{
    fa2_device_info_t info;
    int failures = 0;
    const int status = gpu_rows_probe("test_faults_gpu", &info);
    if (status != 0)
        return status;
    if (argc > 1 && strcmp(argv[1], "sticky") == 0)
        return sticky(&info);
    if (argc > 1 && strcmp(argv[1], "reset") == 0)
        return reset_between_runs(&info);

    fa2_fault_hook = fault_hook;
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; ++i) {
        const route_t *r = &routes[i];
        fa2_problem_t p = route_problem(r);
        fa2_plan_t plan;
        buffers_t b;
        if (fa2_plan(&p, &info, &plan) != FA2_SUCCESS || !make_buffers(&plan, &b)) {
            printf("%s: set-up failed: %s FAIL\n", r->name, fa2_last_error());
            return 1;
        }
        failures += sweep(r, &plan, &b, 0);
        failures += sweep(r, &plan, &b, 1);
        if (i == 0)
            failures += pending_error(&plan, &b);
        free_buffers(&b);
    }
    fa2_fault_hook = NULL;
    printf("test_faults_gpu: %s (%d failed checks)\n", failures ? "FAIL" : "PASS", failures);
    return failures ? 1 : 0;
}
