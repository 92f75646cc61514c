/* CUDA graph capture of fa2_forward + fa2_backward (label gpu; exit 77 without a
 * device). The header promises both are capturable: no synchronisation, no allocation,
 * no device query that breaks a capture.
 *
 * Four graphs (bf16, batch 2, seqlen_q 300, seqlen_k 517, heads 4 on 2 kv heads,
 * causal): head_dim 64 (Hopper kernels on sm_90) and 96 (mma.sync kernels), each in the
 * default mode (dQ by atomics) and in deterministic mode. The devices are queried and
 * the plans made first; then every libfa2 launch call of the process happens inside a
 * capture (cudaStreamCaptureModeGlobal, on a non-blocking stream): all four graphs are
 * captured before any of them runs, so no kernel has been launched or loaded outside a
 * capture. Checks at capture: fa2_forward and fa2_backward return FA2_SUCCESS, the
 * capture is still active after them, cudaStreamEndCapture and cudaGraphInstantiate
 * succeed. Then 3 rounds per graph: fresh random Q, K, V, dO (a new seed each round)
 * copied into the same device buffers, O/LSE/dQ/dK/dV/workspace poisoned (0xFF bytes:
 * NaN), cudaGraphLaunch, and every output compared to the double oracle with
 * test_forward_gpu's and test_backward_gpu's rules: rel L2 of O within
 * min(1e-2, max(2 x a same-precision naive attention's error, 4e-3)), LSE within
 * 1e-3 * max(1, |lse|), rel L2 of dQ/dK/dV within max(2 x a same-precision naive
 * backward's error, 1e-2); all finite, exactly 0 where the mask leaves no path, and
 * the guard after each output untouched. In the last round the graph is launched again
 * on the same inputs: dK and dV (and, deterministic, dQ) must be bit-identical.
 *
 * One line per capture and per round. FA2_TEST_SEED=<seed> replays a run. */
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "fa2.h"
#include "gpu_tensor.h"
#include "oracle.h"
#include "oracle_backward.h"

#define ROUNDS 3
#define O_MAX_REL_L2 1e-2 /* test_forward_gpu */
#define O_FLOOR 4e-3      /* bf16 */
#define LSE_TOL 1e-3
#define GRAD_FLOOR 1e-2   /* test_backward_gpu, bf16 */

static fa2_device_info_t g_info;
static uint64_t g_seed;

typedef struct graph_t {
    int64_t head_dim;
    int32_t deterministic;
    fa2_problem_t p;
    fa2_plan_t plan;
    tensor_t q, k, v, o, d_o, dq, dk, dv;
    float *lse;  /* device, n_lse + GPU_TENSOR_GUARD floats */
    void *ws;    /* device, plan.bwd_workspace_bytes */
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    int captured;
} graph_t;

static graph_t g_graphs[4] = {{.head_dim = 64, .deterministic = 0},
                               {.head_dim = 64, .deterministic = 1},
                               {.head_dim = 96, .deterministic = 0},
                               {.head_dim = 96, .deterministic = 1}};

static int64_t n_lse(const fa2_problem_t *p)
{
    return p->batch * p->heads_q * p->seqlen_q;
}

static void graph_name(const graph_t *g)
{
    printf("graph d=%" PRId64 " %s", g->head_dim, g->deterministic ? "deterministic" : "default");
}

/* Plan, device buffers (outputs all 0xFF), no launch. Returns 0 on failure. */
static int graph_setup(graph_t *g)
{
    fa2_problem_t *p = &g->p;
    fa2_problem_init(p, FA2_DTYPE_BF16, 2, 300, 517, 4, 2, g->head_dim);
    p->causal = 1;
    p->deterministic = g->deterministic;
    const fa2_status_t s = fa2_plan(p, &g_info, &g->plan);
    if (s != FA2_SUCCESS || !g->plan.bwd_supported) {
        graph_name(g);
        printf(": fa2_plan: %s (%s), bwd_supported %d FAIL\n", fa2_status_string(s),
               fa2_last_error(), s == FA2_SUCCESS ? g->plan.bwd_supported : -1);
        return 0;
    }
    const int64_t d = p->head_dim;
    g->q = tensor_new(p->batch, p->seqlen_q, p->heads_q, d, p->q_batch_stride, p->q_seq_stride,
                      p->q_head_stride);
    g->k = tensor_new(p->batch, p->seqlen_k, p->heads_kv, d, p->k_batch_stride, p->k_seq_stride,
                      p->k_head_stride);
    g->v = tensor_new(p->batch, p->seqlen_k, p->heads_kv, d, p->v_batch_stride, p->v_seq_stride,
                      p->v_head_stride);
    g->o = tensor_new(p->batch, p->seqlen_q, p->heads_q, d, p->o_batch_stride, p->o_seq_stride,
                      p->o_head_stride);
    g->d_o = tensor_new(p->batch, p->seqlen_q, p->heads_q, d, p->o_batch_stride,
                        p->o_seq_stride, p->o_head_stride);
    g->dq = tensor_new(p->batch, p->seqlen_q, p->heads_q, d, p->q_batch_stride, p->q_seq_stride,
                       p->q_head_stride);
    g->dk = tensor_new(p->batch, p->seqlen_k, p->heads_kv, d, p->k_batch_stride,
                       p->k_seq_stride, p->k_head_stride);
    g->dv = tensor_new(p->batch, p->seqlen_k, p->heads_kv, d, p->v_batch_stride,
                       p->v_seq_stride, p->v_head_stride);
    tensor_t *all[8] = {&g->q, &g->k, &g->v, &g->o, &g->d_o, &g->dq, &g->dk, &g->dv};
    for (int t = 0; t < 8; ++t)
        CUDA_CHECK(tensor_upload(all[t])); /* all 0xFFFF until the first round */
    CUDA_CHECK(cudaMalloc((void **)&g->lse, sizeof(float) * (size_t)(n_lse(p) + GPU_TENSOR_GUARD)));
    CUDA_CHECK(cudaMalloc(&g->ws, (size_t)g->plan.bwd_workspace_bytes));
    return 1;
cleanup:
    return 0;
}

static void graph_free(graph_t *g)
{
    if (g->exec)
        cudaGraphExecDestroy(g->exec);
    if (g->graph)
        cudaGraphDestroy(g->graph);
    tensor_t *all[8] = {&g->q, &g->k, &g->v, &g->o, &g->d_o, &g->dq, &g->dk, &g->dv};
    for (int t = 0; t < 8; ++t)
        if (all[t]->bits)
            tensor_free(all[t]);
    cudaFree(g->lse), cudaFree(g->ws);
    g->lse = NULL, g->ws = NULL;
}

/* Captures forward then backward on `stream` and instantiates; one line. */
static int graph_capture(graph_t *g, cudaStream_t stream)
{
    const size_t wsb = (size_t)g->plan.bwd_workspace_bytes;
    graph_name(g);
    printf(": capture");
    fflush(stdout);
    cudaError_t e = cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal);
    if (e != cudaSuccess) {
        printf(": cudaStreamBeginCapture: %s FAIL\n", cudaGetErrorString(e));
        return 0;
    }
    const fa2_status_t fs = fa2_forward(&g->plan, g->q.dev, g->k.dev, g->v.dev, g->o.dev,
                                        g->lse, NULL, 0, stream);
    char fmsg[256];
    snprintf(fmsg, sizeof fmsg, "%s", fa2_last_error());
    const fa2_status_t bs = fa2_backward(&g->plan, g->q.dev, g->k.dev, g->v.dev, g->o.dev,
                                         g->d_o.dev, g->lse, g->dq.dev, g->dk.dev, g->dv.dev,
                                         g->ws, wsb, stream);
    char bmsg[256];
    snprintf(bmsg, sizeof bmsg, "%s", fa2_last_error());
    enum cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    const cudaError_t ie = cudaStreamIsCapturing(stream, &status);
    const cudaError_t ee = cudaStreamEndCapture(stream, &g->graph);
    size_t nodes = 0;
    if (ee == cudaSuccess && g->graph)
        cudaGraphGetNodes(g->graph, NULL, &nodes);
    const cudaError_t xe = ee == cudaSuccess && g->graph
                               ? cudaGraphInstantiate(&g->exec, g->graph, 0)
                               : cudaErrorStreamCaptureInvalidated;
    cudaGetLastError(); /* a failed capture leaves its error pending: do not leak it */
    const int ok = fs == FA2_SUCCESS && bs == FA2_SUCCESS && ie == cudaSuccess &&
                   status == cudaStreamCaptureStatusActive && ee == cudaSuccess && nodes >= 2 &&
                   xe == cudaSuccess;
    printf(": fa2_forward %s%s%s, fa2_backward %s%s%s, capture %s after them, "
           "cudaStreamEndCapture %s (%zu nodes), cudaGraphInstantiate %s %s\n",
           fa2_status_string(fs), *fmsg ? " " : "", fmsg, fa2_status_string(bs),
           *bmsg ? " " : "", bmsg,
           ie != cudaSuccess ? cudaGetErrorString(ie)
           : status == cudaStreamCaptureStatusActive ? "active"
           : status == cudaStreamCaptureStatusInvalidated ? "INVALIDATED" : "NOT ACTIVE",
           cudaGetErrorString(ee), nodes, cudaGetErrorString(xe), ok ? "PASS" : "FAIL");
    fflush(stdout);
    g->captured = ok;
    return ok;
}

/* ---- comparisons ---------------------------------------------------------------------- */

/* Tensor t (downloaded) gathered into contiguous doubles; counts non-finite elements,
 * nonzero ones where zero0[i] (may be NULL) and written guard elements. */
static void gather(const tensor_t *t, double *out, const char *zero0, int64_t *nonfinite,
                   int64_t *nonzero, int64_t *guard_written)
{
    int64_t i = 0, span = 0;
    *nonfinite = *nonzero = *guard_written = 0;
    for (int64_t b = 0; b < t->batch; ++b)
        for (int64_t s = 0; s < t->seq; ++s)
            for (int64_t h = 0; h < t->heads; ++h)
                for (int64_t x = 0; x < t->d; ++x, ++i) {
                    const int64_t at = tensor_offset(t, b, s, h) + x;
                    out[i] = oracle_float_from_bits(t->bits[at], FA2_DTYPE_BF16);
                    *nonfinite += !isfinite(out[i]);
                    *nonzero += zero0 && zero0[i] && isfinite(out[i]) && out[i] != 0.0;
                    span = at + 1 > span ? at + 1 : span;
                }
    for (int64_t at = span; at < t->alloc; ++at) /* the guard after the tensor */
        *guard_written += t->bits[at] != 0xFFFFu;
}

/* One replay of graph g on fresh inputs (seed `seed`); prints the round's line. */
static int graph_round(graph_t *g, cudaStream_t stream, int round, uint64_t seed)
{
    const fa2_problem_t *p = &g->p;
    const int64_t d = p->head_dim, nl = n_lse(p);
    const int64_t nq = p->batch * p->seqlen_q * p->heads_q * d;
    const int64_t nk = p->batch * p->seqlen_k * p->heads_kv * d;
    const size_t wsb = (size_t)g->plan.bwd_workspace_bytes;
    int pass = 0;
    double *want_o = malloc(sizeof(double) * (size_t)nq), *ref_o = malloc(sizeof(double) * (size_t)nq);
    double *want_lse = malloc(sizeof(double) * (size_t)nl);
    double *got = malloc(sizeof(double) * (size_t)(nq > nk ? nq : nk));
    double *want[3], *ref[3];
    float *lse = malloc(sizeof(float) * (size_t)(nl + GPU_TENSOR_GUARD));
    char *zq = calloc((size_t)nq, 1), *zkv = calloc((size_t)nk, 1);
    uint16_t *first[3] = {NULL, NULL, NULL};
    const int64_t n3[3] = {nq, nk, nk};
    for (int t = 0; t < 3; ++t) {
        want[t] = malloc(sizeof(double) * (size_t)n3[t]);
        ref[t] = malloc(sizeof(double) * (size_t)n3[t]);
    }
    int oom = !want_o || !ref_o || !want_lse || !got || !lse || !zq || !zkv;
    for (int t = 0; t < 3; ++t)
        oom |= !want[t] || !ref[t];
    graph_name(g);
    printf(" round %d:", round);
    fflush(stdout);
    if (oom) {
        printf(" host out of memory FAIL\n");
        goto cleanup;
    }

    /* fresh inputs into the same device buffers; every output poisoned */
    oracle_rng_t rng = oracle_rng(seed);
    tensor_t *ins[4] = {&g->q, &g->k, &g->v, &g->d_o};
    for (int t = 0; t < 4; ++t) {
        tensor_fill(ins[t], &rng, FA2_DTYPE_BF16, 1.0f, 1);
        CUDA_CHECK(cudaMemcpy(ins[t]->dev, ins[t]->bits, sizeof(uint16_t) * (size_t)ins[t]->alloc,
                              cudaMemcpyHostToDevice));
    }
    tensor_t *outs[4] = {&g->o, &g->dq, &g->dk, &g->dv};
    for (int t = 0; t < 4; ++t)
        CUDA_CHECK(cudaMemset(outs[t]->dev, 0xFF, sizeof(uint16_t) * (size_t)outs[t]->alloc));
    CUDA_CHECK(cudaMemset(g->lse, 0xFF, sizeof(float) * (size_t)(nl + GPU_TENSOR_GUARD)));
    CUDA_CHECK(cudaMemset(g->ws, 0xFF, wsb));
    /* the copies and memsets ran on the legacy stream, which `stream` (non-blocking)
     * does not wait for */
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaGraphLaunch(g->exec, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    for (int t = 0; t < 4; ++t)
        CUDA_CHECK(tensor_download(outs[t]));
    CUDA_CHECK(cudaMemcpy(lse, g->lse, sizeof(float) * (size_t)(nl + GPU_TENSOR_GUARD),
                          cudaMemcpyDeviceToHost));

    /* forward: O rel L2 and LSE */
    int64_t nonfinite, nonzero, guard;
    if (oracle_forward(p, g->q.vals, g->k.vals, g->v.vals, want_o, want_lse) ||
        oracle_forward_rounded(p, g->q.vals, g->k.vals, g->v.vals, ref_o)) {
        printf(" oracle out of memory FAIL\n");
        goto cleanup;
    }
    if (structural_zeros(p, zq, zkv)) {
        printf(" out of memory FAIL\n");
        goto cleanup;
    }
    gather(&g->o, got, zq, &nonfinite, &nonzero, &guard);
    const double o_err = oracle_rel_l2(got, want_o, (size_t)nq);
    const double o_bound = fmin(O_MAX_REL_L2, fmax(2.0 * oracle_rel_l2(ref_o, want_o, (size_t)nq),
                                                   O_FLOOR));
    double lse_err = 0.0;
    int64_t lse_bad = 0, lse_guard = 0;
    for (int64_t t = 0; t < nl; ++t) {
        const double w = want_lse[t], e = isinf(w) ? (lse[t] == w ? 0.0 : INFINITY)
                                                   : fabs(lse[t] - w) / fmax(1.0, fabs(w));
        lse_bad += !(e <= LSE_TOL);
        lse_err = e > lse_err || isnan(e) ? e : lse_err;
    }
    for (int64_t t = nl; t < nl + GPU_TENSOR_GUARD; ++t) {
        uint32_t u;
        memcpy(&u, &lse[t], sizeof u);
        lse_guard += u != 0xFFFFFFFFu;
    }
    int ok = o_err <= o_bound && nonfinite == 0 && nonzero == 0 && guard == 0 && lse_bad == 0 &&
             lse_guard == 0;
    printf(" O %.2e (bound %.2e)%s LSE %.2e%s", o_err, o_bound,
           nonfinite || nonzero || guard ? " [not finite / masked not 0 / guard written]" : "",
           lse_err, lse_bad || lse_guard ? " <-" : "");

    /* backward: dQ, dK, dV rel L2 */
    if (oracle_backward(p, g->q.vals, g->k.vals, g->v.vals, g->d_o.vals, want[0], want[1],
                        want[2]) ||
        oracle_backward_rounded(p, g->q.vals, g->k.vals, g->v.vals, g->d_o.vals, ref[0], ref[1],
                                ref[2])) {
        printf(" oracle out of memory FAIL\n");
        goto cleanup;
    }
    const char *names[3] = {"dQ", "dK", "dV"};
    tensor_t *grads[3] = {&g->dq, &g->dk, &g->dv};
    for (int t = 0; t < 3; ++t) {
        gather(grads[t], got, t ? zkv : zq, &nonfinite, &nonzero, &guard);
        const double err = oracle_rel_l2(got, want[t], (size_t)n3[t]);
        const double bound = fmax(2.0 * oracle_rel_l2(ref[t], want[t], (size_t)n3[t]), GRAD_FLOOR);
        const int this_ok = err <= bound && nonfinite == 0 && nonzero == 0 && guard == 0;
        printf(" %s %.2e (bound %.2e)%s", names[t], err, bound, this_ok ? "" : " <-");
        if (nonfinite || nonzero || guard)
            printf(" [%" PRId64 " not finite, %" PRId64 " masked not 0, %" PRId64
                   " guard written]", nonfinite, nonzero, guard);
        ok &= this_ok;
    }

    /* last round: the same inputs again, bit-identical dK/dV (and dQ, deterministic) */
    if (round == ROUNDS - 1) {
        int64_t differ[3] = {0, 0, 0};
        for (int t = 0; t < 3; ++t) {
            first[t] = malloc(sizeof(uint16_t) * (size_t)grads[t]->alloc);
            if (!first[t]) {
                printf(" host out of memory FAIL\n");
                goto cleanup;
            }
            memcpy(first[t], grads[t]->bits, sizeof(uint16_t) * (size_t)grads[t]->alloc);
            CUDA_CHECK(cudaMemset(grads[t]->dev, 0xFF, sizeof(uint16_t) * (size_t)grads[t]->alloc));
        }
        CUDA_CHECK(cudaMemset(g->ws, 0xFF, wsb));
        CUDA_CHECK(cudaDeviceSynchronize());
        CUDA_CHECK(cudaGraphLaunch(g->exec, stream));
        CUDA_CHECK(cudaStreamSynchronize(stream));
        for (int t = 0; t < 3; ++t) {
            CUDA_CHECK(tensor_download(grads[t]));
            for (int64_t x = 0; x < grads[t]->alloc; ++x)
                differ[t] += first[t][x] != grads[t]->bits[x];
        }
        const int same = (!g->deterministic || differ[0] == 0) && differ[1] == 0 && differ[2] == 0;
        printf("; replayed again: %" PRId64 " dQ%s, %" PRId64 " dK, %" PRId64
               " dV elements differ%s", differ[0], g->deterministic ? "" : " (allowed)",
               differ[1], differ[2], same ? "" : " <-");
        ok &= same;
    }
    pass = ok;
    printf(" %s\n", pass ? "PASS" : "FAIL");

cleanup:
    fflush(stdout);
    free(want_o), free(ref_o), free(want_lse), free(got), free(lse), free(zq), free(zkv);
    for (int t = 0; t < 3; ++t)
        free(want[t]), free(ref[t]), free(first[t]);
    return pass;
}

int main(void)
{
    long unused_case = -1;
    const int setup = gpu_test_setup("graph", &g_info, &g_seed, &unused_case);
    if (setup != 0)
        return setup;
    const int n = (int)(sizeof g_graphs / sizeof g_graphs[0]);
    int failed = 0, run = 0;
    cudaStream_t stream = NULL;
    if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) {
        printf("cudaStreamCreateWithFlags failed\n");
        return 1;
    }
    /* plans and buffers first (no launch), then every capture, then the replays */
    int ready[4] = {0, 0, 0, 0};
    for (int t = 0; t < n; ++t)
        ready[t] = graph_setup(&g_graphs[t]);
    for (int t = 0; t < n; ++t) {
        ++run;
        failed += !(ready[t] && graph_capture(&g_graphs[t], stream));
    }
    for (int t = 0; t < n; ++t)
        for (int r = 0; r < ROUNDS; ++r) {
            if (!g_graphs[t].captured)
                break;
            ++run;
            failed += !graph_round(&g_graphs[t], stream, r,
                                   g_seed ^ (0x9E3779B97F4A7C15ull * (uint64_t)(t * ROUNDS + r + 1)));
        }
    for (int t = 0; t < n; ++t)
        graph_free(&g_graphs[t]);
    cudaStreamDestroy(stream);
    printf("test_graph_gpu: %d of %d checks failed (seed %" PRIu64 ")\n", failed, run, g_seed);
    return failed ? 1 : 0;
}
