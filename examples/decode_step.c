/*
 * fa2_decode_step: one decode step of a small paged-KV engine, the way serving engines
 * call attention. Planned once from the engine's fixed shape and bounds; a step (write
 * each sequence's new key and value into its page, then attention of its new token over
 * its cache) is captured in a CUDA graph once and replayed every step with new lengths,
 * slots and page tables, which live in device buffers the graph reads. After each step
 * the metadata checks are read back and the output is compared with a small CPU
 * reference. Exit 0 when every step passes; 77 without a CUDA device.
 *
 * A template to copy: it needs only fa2.h, libfa2 and the CUDA runtime.
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fa2.h"

enum {
    kSeqs = 4,        /* sequences in the batch */
    kHeadsQ = 8,      /* GQA 8:2 */
    kHeadsKV = 2,
    kHeadDim = 128,
    kPage = 16,       /* keys per page */
    kPagesPerSeq = 32, /* the longest sequence: 512 keys */
    kPages = kSeqs * kPagesPerSeq,
    kSteps = 5
};
#define ROW (kHeadsKV * kHeadDim) /* elements of one key (all KV heads) */

static int cuda_ok(cudaError_t err, const char *what)
{
    if (err == cudaSuccess) return 1;
    printf("fa2_decode_step: %s: %s\n", what, cudaGetErrorString(err));
    return 0;
}

static int fa2_ok(fa2_status_t st, const char *what)
{
    if (st == FA2_SUCCESS) return 1;
    printf("fa2_decode_step: %s: %s\n  %s\n", what, fa2_status_string(st), fa2_last_error());
    return 0;
}

/* ---- the check's helpers: bf16 bits, random numbers, a reference attention -------- */

static uint16_t bf16_from_float(float x) /* round to nearest even (finite inputs) */
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static float float_from_bf16(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* A standard normal from a 64-bit LCG (Box-Muller): reproducible test data. */
static float random_normal(uint64_t *state)
{
    double u[2];
    for (int i = 0; i < 2; ++i) {
        *state = *state * 6364136223846793005ull + 1442695040888963407ull;
        u[i] = ((double)(*state >> 11) + 0.5) / 9007199254740992.0; /* (0, 1) */
    }
    return (float)(sqrt(-2.0 * log(u[0])) * cos(6.283185307179586 * u[1]));
}

/* One query token's attention over n keys, in double: q [kHeadsQ, d], k and v [n, ROW],
 * out [kHeadsQ, d]. Query head h reads kv head h / (kHeadsQ / kHeadsKV). */
static int reference_attention(const float *q, const float *k, const float *v, int n,
                               double *out)
{
    double *score = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
    if (!score) return -1;
    for (int h = 0; h < kHeadsQ; ++h) {
        const int kv = h / (kHeadsQ / kHeadsKV);
        double max = -INFINITY, sum = 0.0;
        for (int j = 0; j < n; ++j) {
            double dot = 0.0;
            for (int x = 0; x < kHeadDim; ++x)
                dot += (double)q[h * kHeadDim + x] * k[(size_t)j * ROW + kv * kHeadDim + x];
            score[j] = dot / sqrt((double)kHeadDim);
            max = score[j] > max ? score[j] : max;
        }
        for (int j = 0; j < n; ++j) sum += score[j] = exp(score[j] - max);
        for (int x = 0; x < kHeadDim; ++x) {
            double acc = 0.0;
            for (int j = 0; j < n; ++j) acc += score[j] * v[(size_t)j * ROW + kv * kHeadDim + x];
            out[h * kHeadDim + x] = acc / sum;
        }
    }
    free(score);
    return 0;
}

/* ---- the engine ------------------------------------------------------------------ */

/* The engine's host state: the cache's contents (as floats, for the check), each
 * sequence's length and page table, and a free-page counter. */
typedef struct engine_t {
    float *k, *v;                      /* [kPages * kPage, ROW] */
    int32_t len[kSeqs];
    int32_t table[kSeqs * kPagesPerSeq];
    int32_t next_free;
} engine_t;

/* Slot of sequence b's key `pos`, taking a new page when it starts one. */
static int32_t slot_for(engine_t *e, int b, int32_t pos)
{
    int32_t *page = &e->table[b * kPagesPerSeq + pos / kPage];
    if (pos % kPage == 0)
        *page = e->next_free++;
    return *page * kPage + pos % kPage;
}

/* n random keys and values (bf16 bits for the device, their float values recorded in
 * the host cache at `slots`). */
static void new_rows(engine_t *e, uint64_t *rng, const int32_t *slots, int n,
                     uint16_t *k_bits, uint16_t *v_bits)
{
    for (int t = 0; t < n; ++t)
        for (int x = 0; x < ROW; ++x) {
            k_bits[t * ROW + x] = bf16_from_float(random_normal(rng));
            v_bits[t * ROW + x] = bf16_from_float(random_normal(rng));
            e->k[(size_t)slots[t] * ROW + x] = float_from_bf16(k_bits[t * ROW + x]);
            e->v[(size_t)slots[t] * ROW + x] = float_from_bf16(v_bits[t * ROW + x]);
        }
}

/* The step's output against the reference on each sequence's keys gathered from its
 * pages: the worst relative L2 error over the sequences. */
static double check_step(const engine_t *e, const float *q, const uint16_t *o_bits)
{
    double worst = 0.0;
    float *ks = malloc(sizeof(float) * kPagesPerSeq * kPage * ROW),
          *vs = malloc(sizeof(float) * kPagesPerSeq * kPage * ROW);
    double want[kHeadsQ * kHeadDim];
    if (!ks || !vs) {
        free(ks), free(vs);
        return INFINITY;
    }
    for (int b = 0; b < kSeqs; ++b) {
        for (int32_t j = 0; j < e->len[b]; ++j) {
            const size_t at = (size_t)(e->table[b * kPagesPerSeq + j / kPage] * kPage +
                                       j % kPage) * ROW;
            memcpy(ks + (size_t)j * ROW, e->k + at, sizeof(float) * ROW);
            memcpy(vs + (size_t)j * ROW, e->v + at, sizeof(float) * ROW);
        }
        if (reference_attention(q + b * kHeadsQ * kHeadDim, ks, vs, e->len[b], want) != 0) {
            worst = INFINITY;
            break;
        }
        double diff = 0.0, norm = 0.0;
        for (int x = 0; x < kHeadsQ * kHeadDim; ++x) {
            const double d = float_from_bf16(o_bits[b * kHeadsQ * kHeadDim + x]) - want[x];
            diff += d * d;
            norm += want[x] * want[x];
        }
        const double err = sqrt(diff / norm);
        worst = isnan(err) || err > worst ? err : worst;
    }
    free(ks), free(vs);
    return worst;
}

int main(void)
{
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("fa2_decode_step: no CUDA device: nothing to run\n");
        return 77;
    }
    fa2_device_info_t dev;
    fa2_problem_t p;
    fa2_plan_t plan;
    /* Plan once: the engine's shape and bounds. Q/O: one token per sequence, packed
     * [kSeqs, heads_q, d]; K/V: the paged cache [kPages, kPage, heads_kv, d]. */
    fa2_problem_init_paged(&p, FA2_DTYPE_BF16, kSeqs, /*max_seqlen_q*/ 1,
                           /*max_seqlen_k*/ kPagesPerSeq * kPage, /*total_q*/ kSeqs, kHeadsQ,
                           kHeadsKV, kHeadDim, kPage, kPages, kPagesPerSeq);
    p.causal = 1;
    p.max_splits = 16; /* the decode kernel may split each sequence's keys over blocks */
    if (!fa2_ok(fa2_device_info_query(0, &dev), "fa2_device_info_query") ||
        !fa2_ok(fa2_plan(&p, &dev, &plan), "fa2_plan"))
        return 1;
    printf("fa2_decode_step: %d sequences, GQA %d:%d, d=%d, pages of %d keys; %s, %d key "
           "splits\n",
           kSeqs, kHeadsQ, kHeadsKV, kHeadDim, kPage,
           plan.splits ? "decode kernel"
                              : plan.fwd_arch == 90 ? "Hopper kernels" : "mma.sync kernels",
           (int)(plan.splits ? plan.splits : 1));

    engine_t e = {0};
    e.k = calloc((size_t)kPages * kPage * ROW, sizeof(float));
    e.v = calloc((size_t)kPages * kPage * ROW, sizeof(float));
    const int32_t prompt[kSeqs] = {37, 100, 1, 250};
    int max_prompt = 0;
    for (int b = 0; b < kSeqs; ++b)
        max_prompt = prompt[b] > max_prompt ? prompt[b] : max_prompt;
    uint16_t *k_bits = malloc(2 * (size_t)max_prompt * ROW),
             *v_bits = malloc(2 * (size_t)max_prompt * ROW),
             *q_bits = malloc(2 * kSeqs * kHeadsQ * kHeadDim),
             *o_bits = malloc(2 * kSeqs * kHeadsQ * kHeadDim);
    float *q = malloc(sizeof(float) * kSeqs * kHeadsQ * kHeadDim);
    int32_t slots[kSeqs], prompt_slots[250];
    if (!e.k || !e.v || !k_bits || !v_bits || !q_bits || !o_bits || !q)
        return 1;

    /* Device buffers: the cache, the step's tensors and its metadata (the graph reads
     * these addresses; each step rewrites their contents). */
    void *k_cache, *v_cache, *d_q, *d_o, *k_new, *v_new, *ws;
    int32_t *d_cu, *d_used, *d_slots, *d_table;
    const int32_t cu[kSeqs + 1] = {0, 1, 2, 3, 4};
    const size_t cache_bytes = 2 * (size_t)kPages * kPage * ROW;
    if (!cuda_ok(cudaMalloc(&k_cache, cache_bytes), "cudaMalloc") ||
        !cuda_ok(cudaMalloc(&v_cache, cache_bytes), "cudaMalloc") ||
        !cuda_ok(cudaMalloc(&d_q, 2 * kSeqs * kHeadsQ * kHeadDim), "cudaMalloc") ||
        !cuda_ok(cudaMalloc(&d_o, 2 * kSeqs * kHeadsQ * kHeadDim), "cudaMalloc") ||
        !cuda_ok(cudaMalloc(&k_new, 2 * (size_t)max_prompt * ROW), "cudaMalloc") ||
        !cuda_ok(cudaMalloc(&v_new, 2 * (size_t)max_prompt * ROW), "cudaMalloc") ||
        !cuda_ok(cudaMalloc(&ws, (size_t)plan.workspace_bytes), "cudaMalloc") ||
        !cuda_ok(cudaMalloc((void **)&d_cu, sizeof cu), "cudaMalloc") ||
        !cuda_ok(cudaMalloc((void **)&d_used, sizeof e.len), "cudaMalloc") ||
        !cuda_ok(cudaMalloc((void **)&d_slots, sizeof(prompt_slots)), "cudaMalloc") ||
        !cuda_ok(cudaMalloc((void **)&d_table, sizeof e.table), "cudaMalloc") ||
        !cuda_ok(cudaMemcpy(d_cu, cu, sizeof cu, cudaMemcpyHostToDevice), "cudaMemcpy"))
        return 1;

    /* Prefill the cache: each prompt's keys and values, written by slot. */
    uint64_t rng = 2026;
    memset(e.table, 0xFF, sizeof e.table); /* -1: no page yet */
    for (int b = 0; b < kSeqs; ++b) {
        for (int32_t j = 0; j < prompt[b]; ++j)
            prompt_slots[j] = slot_for(&e, b, j);
        e.len[b] = prompt[b];
        new_rows(&e, &rng, prompt_slots, prompt[b], k_bits, v_bits);
        if (!cuda_ok(cudaMemcpy(k_new, k_bits, 2 * (size_t)prompt[b] * ROW,
                                cudaMemcpyHostToDevice), "cudaMemcpy") ||
            !cuda_ok(cudaMemcpy(v_new, v_bits, 2 * (size_t)prompt[b] * ROW,
                                cudaMemcpyHostToDevice), "cudaMemcpy") ||
            !cuda_ok(cudaMemcpy(d_slots, prompt_slots, sizeof(int32_t) * prompt[b],
                                cudaMemcpyHostToDevice), "cudaMemcpy") ||
            !fa2_ok(fa2_cache_write(&plan, k_new, v_new, prompt[b], ROW, d_slots, k_cache,
                                    v_cache, NULL), "fa2_cache_write (prompt)"))
            return 1;
    }

    /* Capture one step: the new tokens' keys and values into their slots, then
     * attention of each new token over its sequence's pages. */
    cudaStream_t stream;
    cudaGraph_t graph;
    cudaGraphExec_t step;
    if (!cuda_ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream") ||
        !cuda_ok(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), "capture"))
        return 1;
    const fa2_status_t w = fa2_cache_write(&plan, k_new, v_new, kSeqs, ROW, d_slots, k_cache,
                                           v_cache, stream);
    const fa2_status_t a = fa2_forward_varlen(&plan, d_q, k_cache, v_cache, d_o, NULL, d_cu,
                                              NULL, d_used, d_table, ws,
                                              (size_t)plan.workspace_bytes, stream);
    if (!cuda_ok(cudaStreamEndCapture(stream, &graph), "end capture") ||
        !fa2_ok(w, "fa2_cache_write (capture)") || !fa2_ok(a, "fa2_forward_varlen (capture)") ||
        !cuda_ok(cudaGraphInstantiate(&step, graph, 0), "cudaGraphInstantiate"))
        return 1;

    int failed = 0;
    for (int s = 0; s < kSteps; ++s) {
        /* The engine's host work for a step: one new key per sequence, new pages as
         * needed, the query tokens; then the metadata into the graph's buffers. */
        for (int b = 0; b < kSeqs; ++b)
            slots[b] = slot_for(&e, b, e.len[b]++);
        new_rows(&e, &rng, slots, kSeqs, k_bits, v_bits);
        for (int x = 0; x < kSeqs * kHeadsQ * kHeadDim; ++x) {
            q_bits[x] = bf16_from_float(random_normal(&rng));
            q[x] = float_from_bf16(q_bits[x]);
        }
        if (!cuda_ok(cudaMemcpyAsync(d_used, e.len, sizeof e.len, cudaMemcpyHostToDevice,
                                     stream), "metadata") ||
            !cuda_ok(cudaMemcpyAsync(d_slots, slots, sizeof slots, cudaMemcpyHostToDevice,
                                     stream), "metadata") ||
            !cuda_ok(cudaMemcpyAsync(d_table, e.table, sizeof e.table,
                                     cudaMemcpyHostToDevice, stream), "metadata") ||
            !cuda_ok(cudaMemcpyAsync(d_q, q_bits, 2 * kSeqs * kHeadsQ * kHeadDim,
                                     cudaMemcpyHostToDevice, stream), "q") ||
            !cuda_ok(cudaMemcpyAsync(k_new, k_bits, 2 * kSeqs * ROW, cudaMemcpyHostToDevice,
                                     stream), "k_new") ||
            !cuda_ok(cudaMemcpyAsync(v_new, v_bits, 2 * kSeqs * ROW, cudaMemcpyHostToDevice,
                                     stream), "v_new") ||
            !cuda_ok(cudaGraphLaunch(step, stream), "cudaGraphLaunch") ||
            !cuda_ok(cudaMemcpyAsync(o_bits, d_o, 2 * kSeqs * kHeadsQ * kHeadDim,
                                     cudaMemcpyDeviceToHost, stream), "o") ||
            !cuda_ok(cudaStreamSynchronize(stream), "step"))
            return 1;
        /* Were the step's lengths and page ids sound? (the record the kernels wrote) */
        int64_t bad_seq;
        fa2_varlen_check_t check;
        const fa2_status_t c = fa2_varlen_check(&plan, ws, (size_t)plan.workspace_bytes,
                                                &bad_seq, &check);
        const double err = check_step(&e, q, o_bits);
        const int ok = c == FA2_SUCCESS && err <= 1e-2;
        failed += !ok;
        printf("step %d: lengths %d %d %d %d, metadata %s, max rel. error %.2e (limit 1e-2) "
               "%s\n", s, (int)e.len[0], (int)e.len[1], (int)e.len[2], (int)e.len[3],
               c == FA2_SUCCESS ? "ok" : fa2_last_error(), err, ok ? "PASS" : "FAIL");
    }
    cudaGraphExecDestroy(step), cudaGraphDestroy(graph), cudaStreamDestroy(stream);
    cudaFree(k_cache), cudaFree(v_cache), cudaFree(d_q), cudaFree(d_o), cudaFree(k_new);
    cudaFree(v_new), cudaFree(ws), cudaFree(d_cu), cudaFree(d_used), cudaFree(d_slots);
    cudaFree(d_table);
    free(e.k), free(e.v), free(k_bits), free(v_bits), free(q_bits), free(o_bits), free(q);
    printf("fa2_decode_step: %s\n", failed ? "FAIL" : "PASS");
    return failed ? 1 : 0;
}
