/* fa2_forward_varlen and fa2_backward_varlen on the GPU against the double oracle,
 * sequence by sequence.
 *
 * For each case: a packed batch of sequences of given (query, key) lengths, lengths 0
 * and 1 included, q < k and q > k; Q, K, V random in [-1, 1] rounded to the dtype;
 * O and the LSE [heads_q, total_q] poisoned (NaN) before the call, with spare rows
 * after the last sequence that must stay poisoned. Each sequence is compared to
 * oracle_forward on that sequence alone (a dense problem of batch 1): rel L2 error of
 * all of O within max(2 x a same-precision naive attention's, floor: 2e-3 fp16, 1e-2
 * bf16), rows with no visible key exactly 0, LSE within 1e-3 (relative, -inf exact).
 * Options per case: seqused_k (sequences use fewer keys than cu_seqlens_k holds),
 * padding sequences of length 0, planned maxima above the actual lengths, a sequence
 * past the planned maxima (skipped: its rows stay poisoned), planning for a 99 KiB
 * device (the mma.sync kernels instead of the Hopper ones on the H200), and the score
 * variants (against oracle_forward_scored). Then the backward of each case in both modes
 * (check_backward). Then paged K/V caches (run_paged_case): page sizes 1, 16, 17, 24, 32,
 * 64, 128 and 256 (each of the Hopper forward's ways to copy pages: cp.async, the
 * producer warpgroup, TMA), shuffled and shared pages, padded pages, the
 * score variants; a paged cache at the edge of the kernels' 32-bit row indices, d = 64
 * and 128 (run_paged_row_limit). Then the accepted limits: total_q and total_k of 2^31 - 1,
 * sequences ending on the last rows, and a batch without keys (total_k = 0); hostile
 * metadata (run_hostile; paged at d = 64 and 128): each check failed once, recorded for
 * the right sequence, whose rows stay untouched while the intact ones match a clean run
 * bit for bit. Every call's metadata records are checked (records_ok).
 *
 * FA2_TEST_SEED=<seed> replays a run. Without a CUDA device: exit 77 (skipped);
 * `--probe` only checks for one. */
#include <inttypes.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <cuda_runtime_api.h>

#include "fa2.h"
#include "gpu_tensor.h"
#include "oracle.h"
#include "oracle_backward.h"

#define FLOOR_FP16 2e-3
#define FLOOR_BF16 1e-2
#define LSE_TOL 1e-3
#define SPARE_ROWS 5   /* rows after the last sequence: never written */
#define MAX_SEQS 16

typedef struct varlen_case_t {
    const char *name;
    fa2_dtype_t dtype;
    int64_t heads_q, heads_kv, head_dim;
    int32_t causal;
    int64_t window_left, window_right;
    int n;                     /* sequences */
    int64_t len_q[MAX_SEQS];   /* query rows of each */
    int64_t len_k[MAX_SEQS];   /* keys each uses */
    int64_t extra_k;           /* > 0: cu_seqlens_k holds this many more keys per
                                  sequence than it uses, seqused_k gives the use */
    int64_t slack;             /* planned maxima this much above the longest sequence */
    int skipped;               /* index of a sequence past the planned query maximum, or -1 */
    int consumer;              /* plan for a 99 KiB sm_89 device */
    int scored;                /* the score variants on: softcap 10, ALiBi, sinks */
} varlen_case_t;

static uint64_t g_seed;
static long g_only = -1;
static fa2_device_info_t g_info;

/* The score variants of a scored case: softcap 10, per-head ALiBi slopes in [0, 0.3)
 * and sink logits in [-3, 6) drawn from `rng` (hq <= 16). */
static oracle_score_t score_variants_case(oracle_rng_t *rng, int64_t hq, float slopes[16],
                                          float sinks[16])
{
    assert_true(hq <= 16);
    for (int64_t h = 0; h < hq; ++h) {
        slopes[h] = oracle_rng_uniform(rng, 0.0f, 0.3f);
        sinks[h] = oracle_rng_uniform(rng, -3.0f, 6.0f);
    }
    return (oracle_score_t){10.0, slopes, sinks};
}

static int64_t max_of(const int64_t *x, int n, int skip)
{
    int64_t m = 0;
    for (int i = 0; i < n; ++i)
        if (i != skip && x[i] > m)
            m = x[i];
    return m;
}

/* Random values rounded to the dtype: `vals` (float) and `bits` (device format). */
static const char *check_label(int32_t check)
{
    static const char *names[] = {"OK", "CU_SEQLENS_Q", "SEQLEN_Q", "CU_SEQLENS_K",
                                  "SEQLEN_K", "SEQUSED_K", "PAGE_ID"};
    return check >= 0 && check < 7 ? names[check] : "not written";
}

/* The metadata checks a forward wrote into `ws` (poisoned with 0xFF before the call, so
 * an unwritten record reads -1): 1 when sequence `bad` has check `want` (bad < 0: no
 * sequence failed), every other one FA2_VARLEN_OK, and fa2_varlen_check agrees. */
static int records_ok(const fa2_plan_t *plan, const void *ws, int bad, int32_t want)
{
    const int64_t n = plan->problem.batch;
    int32_t *got = malloc(sizeof(int32_t) * (size_t)n);
    assert_non_null(got);
    assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
    assert_int_equal(cudaMemcpy(got, ws, sizeof(int32_t) * (size_t)n, cudaMemcpyDeviceToHost),
                     cudaSuccess);
    int wrong = 0;
    for (int64_t b = 0; b < n; ++b) {
        const int32_t w = b == bad ? want : FA2_VARLEN_OK;
        if (got[b] != w && wrong++ < 3)
            printf(" [record of sequence %" PRId64 ": %s, want %s]", b, check_label(got[b]),
                   check_label(w));
    }
    free(got);
    int64_t seq = -2;
    fa2_varlen_check_t check = (fa2_varlen_check_t)-2;
    const fa2_status_t st = fa2_varlen_check(plan, ws, (size_t)plan->workspace_bytes, &seq,
                                             &check);
    const int agrees = bad < 0 ? st == FA2_SUCCESS && seq == -1 && check == FA2_VARLEN_OK
                               : st == FA2_ERROR_BAD_METADATA && seq == bad &&
                                     (int32_t)check == want;
    if (!agrees)
        printf(" [fa2_varlen_check: %s, sequence %" PRId64 ", check %d: \"%s\"]",
               fa2_status_string(st), seq, (int)check, fa2_last_error());
    return wrong == 0 && agrees;
}

/* fa2_forward_varlen (fa2_forward_with when the score variants' slopes or sinks are
 * given), then O and the LSE back to the host (ob: nq elements, lse: n_lse). 0 (and a
 * FAIL line) when the call is refused. */
static int forward_and_download(const fa2_plan_t *plan, const void *dq, const void *dk,
                                const void *dv, void *d_o, float *dlse, const int32_t *dcu_q,
                                const int32_t *dcu_k, const int32_t *dused,
                                const int32_t *dtable, void *ws, const float *dslopes,
                                const float *dsinks, uint16_t *ob, float *lse, int64_t nq,
                                int64_t n_lse)
{
    fa2_forward_args_t a;
    fa2_forward_args_init(&a);
    a.q = dq, a.k = dk, a.v = dv, a.o = d_o, a.lse = dlse;
    a.cu_seqlens_q = dcu_q, a.cu_seqlens_k = dcu_k, a.seqused_k = dused, a.page_table = dtable;
    a.alibi_slopes = dslopes, a.sinks = dsinks;
    a.workspace = ws, a.workspace_bytes = (size_t)plan->workspace_bytes;
    const fa2_status_t st =
        dslopes || dsinks
            ? fa2_forward_with(plan, &a)
            : fa2_forward_varlen(plan, dq, dk, dv, d_o, dlse, dcu_q, dcu_k, dused, dtable, ws,
                                 (size_t)plan->workspace_bytes, NULL);
    if (st != FA2_SUCCESS) {
        printf(" : fa2_forward_varlen: %s (%s) FAIL\n", fa2_status_string(st),
               fa2_last_error());
        return 0;
    }
    assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
    assert_int_equal(cudaMemcpy(ob, d_o, 2 * (size_t)nq, cudaMemcpyDeviceToHost), cudaSuccess);
    assert_int_equal(cudaMemcpy(lse, dlse, sizeof(float) * (size_t)n_lse,
                                cudaMemcpyDeviceToHost),
                     cudaSuccess);
    return 1;
}

/* A packed batch on the device after its forward, for the backward check. */
typedef struct packed_t {
    const varlen_case_t *c;
    const int32_t *cu_q, *cu_k;  /* host offsets */
    int64_t total_q, total_k;
    const float *qv, *kv, *vv;   /* host inputs, rounded to the dtype */
    void *q, *k, *v, *o;         /* device tensors (o: the forward's output) */
    float *lse;
    const int32_t *dcu_q, *dcu_k, *dused;
    const oracle_score_t *mod;   /* the score variants (NULL: none) */
    const float *dslopes, *dsinks; /* their device tensors */
} packed_t;

/* fa2_backward_varlen (deterministic or not; with the score variants fa2_backward_with)
 * against oracle_backward_scored per sequence: rel L2 of each gradient within max(2 x
 * the same-precision reference's, floor), and with sinks dsinks (summed over the
 * sequences) within one rounding of its terms' scale; every sequence's rows finite; dK
 * and dV rows no sequence uses untouched (poison), dQ rows no sequence has untouched
 * or 0 (the default mode's conversion writes every row). */
static int check_backward(const packed_t *b, const fa2_plan_t *fwd_plan, int deterministic)
{
    const varlen_case_t *c = b->c;
    const int64_t hq = c->heads_q, hkv = c->heads_kv, d = c->head_dim;
    const int64_t nq = b->total_q * hq * d, nk = b->total_k * hkv * d;
    fa2_problem_t p = fwd_plan->problem;
    fa2_plan_t plan;
    p.deterministic = deterministic;
    p.softmax_scale = 0.0f;
    const fa2_device_info_t device = fwd_plan->device;
    assert_int_equal(fa2_plan(&p, &device, &plan), FA2_SUCCESS);
    printf("  backward%s [sm%d %dx%d]", deterministic ? " det" : "", (int)plan.bwd_arch,
           (int)plan.bwd_block_n, (int)plan.bwd_block_m);
    float *dov = malloc(sizeof(float) * (size_t)nq);
    uint16_t *dob = malloc(2 * (size_t)nq), *gb[3] = {malloc(2 * (size_t)nq),
                                                      malloc(2 * (size_t)nk),
                                                      malloc(2 * (size_t)nk)};
    double *want[3], *ref[3], *got[3];
    const int64_t len[3] = {nq, nk, nk};
    for (int t = 0; t < 3; ++t) {
        want[t] = calloc((size_t)len[t], sizeof(double));
        ref[t] = calloc((size_t)len[t], sizeof(double));
        got[t] = calloc((size_t)len[t], sizeof(double));
        assert_true(gb[t] && want[t] && ref[t] && got[t]);
    }
    assert_true(dov && dob);
    oracle_rng_t rng = case_rng(g_seed, 5000 + deterministic);
    fill_rounded(dov, dob, nq, &rng, c->dtype);
    void *d_o = device_buffer(dob, 2 * (size_t)nq), *grad[3] = {device_buffer(NULL, 2 * (size_t)nq),
                                                         device_buffer(NULL, 2 * (size_t)nk),
                                                         device_buffer(NULL, 2 * (size_t)nk)};
    void *ws = device_buffer(NULL, (size_t)plan.bwd_workspace_bytes);
    float *dds = b->dsinks ? device_buffer(NULL, sizeof(float) * (size_t)hq) : NULL;
    double want_ds[16] = {0};
    int pass = 0;
    fa2_backward_args_t a;
    fa2_backward_args_init(&a);
    a.q = b->q, a.k = b->k, a.v = b->v, a.o = b->o, a.d_o = d_o, a.lse = b->lse;
    a.dq = grad[0], a.dk = grad[1], a.dv = grad[2];
    a.cu_seqlens_q = b->dcu_q, a.cu_seqlens_k = b->dcu_k;
    a.seqused_k = c->extra_k ? b->dused : NULL;
    a.alibi_slopes = b->dslopes, a.sinks = b->dsinks, a.dsinks = dds;
    a.workspace = ws, a.workspace_bytes = (size_t)plan.bwd_workspace_bytes;
    fa2_status_t st = fa2_backward_with(&plan, &a);
    if (st != FA2_SUCCESS) {
        printf(" : fa2_backward_varlen: %s (%s) FAIL\n", fa2_status_string(st),
               fa2_last_error());
        goto cleanup;
    }
    assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
    for (int t = 0; t < 3; ++t)
        assert_int_equal(cudaMemcpy(gb[t], grad[t], 2 * (size_t)len[t], cudaMemcpyDeviceToHost),
                         cudaSuccess);

    /* which rows belong to a sequence (the skipped one's rows do not) */
    char *q_used = calloc((size_t)b->total_q, 1), *k_used = calloc((size_t)b->total_k, 1);
    assert_true(q_used && k_used);
    for (int s = 0; s < c->n; ++s) {
        const int64_t lq = c->len_q[s], lk = c->len_k[s], q0 = b->cu_q[s], k0 = b->cu_k[s];
        if (s == c->skipped || lq == 0)
            continue;
        memset(q_used + q0, 1, (size_t)lq);
        memset(k_used + k0, 1, (size_t)lk);
        fa2_problem_t one;
        fa2_problem_init(&one, c->dtype, 1, lq, lk, hq, hkv, d);
        one.causal = c->causal;
        one.window_left = c->window_left;
        one.window_right = c->window_right;
        double seq_ds[16], seq_ref_ds[16];
        assert_int_equal(oracle_backward_scored(&one, b->mod, b->qv + q0 * hq * d,
                                                b->kv + k0 * hkv * d, b->vv + k0 * hkv * d,
                                                dov + q0 * hq * d, want[0] + q0 * hq * d,
                                                want[1] + k0 * hkv * d, want[2] + k0 * hkv * d,
                                                seq_ds),
                         0);
        assert_int_equal(oracle_backward_scored_rounded(
                             &one, b->mod, b->qv + q0 * hq * d, b->kv + k0 * hkv * d,
                             b->vv + k0 * hkv * d, dov + q0 * hq * d, ref[0] + q0 * hq * d,
                             ref[1] + k0 * hkv * d, ref[2] + k0 * hkv * d, seq_ref_ds),
                         0);
        for (int64_t h = 0; h < hq; ++h)
            want_ds[h] += seq_ds[h];
    }
    int64_t nonfinite = 0, outside = 0;
    const char *used[3] = {q_used, k_used, k_used};
    const int64_t row_len[3] = {hq * d, hkv * d, hkv * d};
    for (int t = 0; t < 3; ++t)
        for (int64_t i = 0; i < len[t]; ++i) {
            if (used[t][i / row_len[t]]) {
                got[t][i] = oracle_float_from_bits(gb[t][i], c->dtype);
                nonfinite += !isfinite(got[t][i]);
            } else {
                /* untouched; dQ may be 0 (default mode) */
                outside += gb[t][i] != 0xFFFFu && !(t == 0 && (gb[t][i] & 0x7FFF) == 0);
            }
        }
    pass = nonfinite == 0 && outside == 0;
    const char *names[3] = {"dQ", "dK", "dV"};
    printf(" :");
    for (int t = 0; t < 3; ++t) {
        const double err = oracle_rel_l2(got[t], want[t], (size_t)len[t]);
        const double r = oracle_rel_l2(ref[t], want[t], (size_t)len[t]);
        const double bound = fmax(2.0 * r, c->dtype == FA2_DTYPE_BF16 ? FLOOR_BF16 : FLOOR_FP16);
        pass &= err <= bound;
        printf(" %s %.2e (bound %.2e)", names[t], err, bound);
    }
    if (dds) { /* dsinks against O's rounding (as test_scored_gpu explains) */
        float ds[16];
        assert_int_equal(cudaMemcpy(ds, dds, sizeof(float) * (size_t)hq, cudaMemcpyDeviceToHost),
                         cudaSuccess);
        uint16_t *o_bits = malloc(2 * (size_t)nq);
        float *lse = malloc(sizeof(float) * (size_t)(hq * b->total_q));
        assert_true(o_bits && lse);
        assert_int_equal(cudaMemcpy(o_bits, b->o, 2 * (size_t)nq, cudaMemcpyDeviceToHost),
                         cudaSuccess);
        assert_int_equal(cudaMemcpy(lse, b->lse, sizeof(float) * (size_t)(hq * b->total_q),
                                    cudaMemcpyDeviceToHost),
                         cudaSuccess);
        double worst = 0.0;
        for (int64_t h = 0; h < hq; ++h) {
            double bound = 0.0;
            for (int64_t row = 0; row < b->total_q; ++row)
                if (q_used[row])
                    bound += oracle_dsink_row_rounding(
                        c->dtype, d, dov + (row * hq + h) * d, o_bits + (row * hq + h) * d,
                        exp((double)b->mod->sinks[h] - lse[h * b->total_q + row]));
            const double e = fabs(ds[h] - want_ds[h]);
            worst = fmax(worst, bound > 0.0 ? e / bound : (e > 0.0 ? INFINITY : 0.0));
        }
        pass &= worst <= 1.0;
        printf(" dsinks error %.2e of O's rounding (bound 1)", worst);
        free(o_bits), free(lse);
    }
    printf(" nonfinite=%" PRId64 " written_outside=%" PRId64 " %s\n", nonfinite, outside,
           pass ? "PASS" : "FAIL");
    free(q_used), free(k_used);

cleanup:
    fflush(stdout);
    cudaFree(d_o), cudaFree(ws), cudaFree(dds);
    for (int t = 0; t < 3; ++t)
        cudaFree(grad[t]), free(gb[t]), free(want[t]), free(ref[t]), free(got[t]);
    free(dov), free(dob);
    return pass;
}

static int run_case(long index, const varlen_case_t *c)
{
    const int n = c->n;
    const int64_t hq = c->heads_q, hkv = c->heads_kv, d = c->head_dim;
    int32_t cu_q[MAX_SEQS + 1], cu_k[MAX_SEQS + 1], used[MAX_SEQS];
    cu_q[0] = cu_k[0] = 0;
    for (int b = 0; b < n; ++b) {
        cu_q[b + 1] = cu_q[b] + (int32_t)c->len_q[b];
        cu_k[b + 1] = cu_k[b] + (int32_t)(c->len_k[b] + c->extra_k);
        used[b] = (int32_t)c->len_k[b];
    }
    const int64_t total_q = cu_q[n] + SPARE_ROWS, total_k = cu_k[n] + SPARE_ROWS;
    const int64_t max_q = max_of(c->len_q, n, c->skipped) + c->slack;
    const int64_t max_k = max_of(c->len_k, n, -1) + c->extra_k + c->slack;

    fa2_problem_t p;
    fa2_problem_init(&p, c->dtype, n, max_q > 0 ? max_q : 1, max_k, hq, hkv, d);
    p.total_q = total_q;
    p.total_k = total_k;
    p.q_batch_stride = p.k_batch_stride = p.v_batch_stride = p.o_batch_stride = 0;
    p.causal = c->causal;
    p.window_left = c->window_left;
    p.window_right = c->window_right;
    if (c->scored)
        p.softcap = 10.0f, p.alibi = 1, p.sinks = 1;
    const fa2_device_info_t device = c->consumer ? consumer_device_info(&g_info) : g_info;
    printf("case %ld: %s %s %d seqs hq=%" PRId64 " hkv=%" PRId64 " d=%" PRId64 "%s%s", index,
           c->name, c->dtype == FA2_DTYPE_BF16 ? "bf16" : "fp16", n, hq, hkv, d,
           c->consumer ? " (planned for 99 KiB)" : "",
           c->scored ? " softcap=10 alibi sinks" : "");
    fa2_plan_t plan;
    fa2_status_t st = fa2_plan(&p, &device, &plan);
    if (st != FA2_SUCCESS) {
        printf(" : fa2_plan: %s (%s) FAIL\n", fa2_status_string(st), fa2_last_error());
        return 0;
    }
    printf(" [sm%d %dx%d]", (int)plan.fwd_arch, (int)plan.block_m, (int)plan.block_n);

    const int64_t nq = total_q * hq * d, nk = total_k * hkv * d, n_lse = hq * total_q;
    float *qv = malloc(sizeof(float) * (size_t)nq), *kv = malloc(sizeof(float) * (size_t)nk),
          *vv = malloc(sizeof(float) * (size_t)nk), *lse = malloc(sizeof(float) * (size_t)n_lse);
    uint16_t *qb = malloc(2 * (size_t)nq), *kb = malloc(2 * (size_t)nk),
             *vb = malloc(2 * (size_t)nk), *ob = malloc(2 * (size_t)nq);
    double *want = calloc((size_t)nq, sizeof(double)), *ref = calloc((size_t)nq, sizeof(double)),
           *got = calloc((size_t)nq, sizeof(double)),
           *want_lse = malloc(sizeof(double) * (size_t)(hq * (max_q + 1)));
    assert_true(qv && kv && vv && lse && qb && kb && vb && ob && want && ref && got && want_lse);
    oracle_rng_t rng = case_rng(g_seed, index);
    fill_rounded(qv, qb, nq, &rng, c->dtype);
    fill_rounded(kv, kb, nk, &rng, c->dtype);
    fill_rounded(vv, vb, nk, &rng, c->dtype);
    /* K/V rows no sequence uses (past a sequence's seqused_k, the spare rows) hold NaN,
     * as an engine's stale rows may: no kernel may let them reach an output. */
    for (int b = 0; b <= n; ++b) {
        const int64_t first = b < n ? cu_k[b] + c->len_k[b] : cu_k[n];
        const int64_t end = b < n ? cu_k[b + 1] : total_k;
        for (int64_t x = first * hkv * d; x < end * hkv * d; ++x)
            kb[x] = vb[x] = 0xFFFFu;
    }
    float slopes[16], sinks[16];
    const oracle_score_t mod = score_variants_case(&rng, hq, slopes, sinks);

    void *dq = device_buffer(qb, 2 * (size_t)nq), *dk = device_buffer(kb, 2 * (size_t)nk),
         *dv = device_buffer(vb, 2 * (size_t)nk), *d_o = device_buffer(NULL, 2 * (size_t)nq);
    float *dslopes = c->scored ? device_buffer(slopes, sizeof slopes) : NULL,
          *dsinks = c->scored ? device_buffer(sinks, sizeof sinks) : NULL;
    float *dlse = device_buffer(NULL, sizeof(float) * (size_t)n_lse);
    int32_t *dcu_q = device_buffer(cu_q, sizeof cu_q), *dcu_k = device_buffer(cu_k, sizeof cu_k),
            *dused = device_buffer(used, sizeof used);
    void *ws = device_buffer(NULL, (size_t)plan.workspace_bytes);
    int pass = 0;
    if (!forward_and_download(&plan, dq, dk, dv, d_o, dlse, dcu_q, dcu_k,
                              c->extra_k ? dused : NULL, NULL, ws, dslopes, dsinks, ob, lse, nq,
                              n_lse))
        goto cleanup;

    /* Per sequence: the oracle on that sequence alone; O gathered into packed order. */
    int64_t nonfinite = 0, masked_nonzero = 0, poison_lost = 0, lse_bad = 0;
    for (int b = 0; b < n; ++b) {
        const int64_t lq = c->len_q[b], lk = c->len_k[b], q0 = cu_q[b], k0 = cu_k[b];
        const int skip = b == c->skipped;
        if (lq == 0)
            continue;
        fa2_problem_t one;
        fa2_problem_init(&one, c->dtype, 1, lq, lk, hq, hkv, d);
        one.causal = c->causal;
        one.window_left = c->window_left;
        one.window_right = c->window_right;
        if (!skip) {
            assert_int_equal(oracle_forward_scored(&one, c->scored ? &mod : NULL,
                                                   qv + q0 * hq * d, kv + k0 * hkv * d,
                                                   vv + k0 * hkv * d, want + q0 * hq * d,
                                                   want_lse),
                             0);
            assert_int_equal(oracle_forward_scored_rounded(
                                 &one, c->scored ? &mod : NULL, qv + q0 * hq * d,
                                 kv + k0 * hkv * d, vv + k0 * hkv * d, ref + q0 * hq * d),
                             0);
        }
        for (int64_t i = 0; i < lq; ++i)
            for (int64_t h = 0; h < hq; ++h) {
                const int64_t row = q0 + i;
                const float g_lse = lse[h * total_q + row];
                uint32_t lse_bits;
                memcpy(&lse_bits, &g_lse, sizeof lse_bits);
                if (skip) { /* past the planned bounds: nothing written */
                    poison_lost += lse_bits != 0xFFFFFFFFu;
                    for (int64_t x = 0; x < d; ++x)
                        poison_lost += ob[(row * hq + h) * d + x] != 0xFFFFu;
                    continue;
                }
                const double w_lse = want_lse[h * lq + i];
                const double e = isinf(w_lse) ? (g_lse == w_lse ? 0.0 : INFINITY)
                                              : fabs(g_lse - w_lse) / fmax(1.0, fabs(w_lse));
                lse_bad += !(e <= LSE_TOL);
                for (int64_t x = 0; x < d; ++x) {
                    const int64_t t = (row * hq + h) * d + x;
                    got[t] = oracle_float_from_bits(ob[t], c->dtype);
                    if (!isfinite(got[t]))
                        nonfinite++;
                    else if (isinf(w_lse) && got[t] != 0.0)
                        masked_nonzero++;
                }
            }
    }
    for (int64_t row = cu_q[n]; row < total_q; ++row) /* spare rows */
        for (int64_t h = 0; h < hq; ++h) {
            uint32_t bits;
            memcpy(&bits, &lse[h * total_q + row], sizeof bits);
            poison_lost += bits != 0xFFFFFFFFu;
            for (int64_t x = 0; x < d; ++x)
                poison_lost += ob[(row * hq + h) * d + x] != 0xFFFFu;
        }
    const double err = oracle_rel_l2(got, want, (size_t)nq);
    const double ref_err = oracle_rel_l2(ref, want, (size_t)nq);
    /* (the same-precision reference has no score variants: their cases, the floor) */
    const double bound = fmax(c->scored ? 0.0 : 2.0 * ref_err,
                              c->dtype == FA2_DTYPE_BF16 ? FLOOR_BF16 : FLOOR_FP16);
    const int records = records_ok(&plan, ws, c->skipped, FA2_VARLEN_SEQLEN_Q);
    pass = err <= bound && nonfinite == 0 && masked_nonzero == 0 && poison_lost == 0 &&
           lse_bad == 0 && records;
    printf(" : err=%.3e ref=%.3e bound=%.3e nonfinite=%" PRId64 " masked_nonzero=%" PRId64
           " written_outside=%" PRId64 " lse_bad=%" PRId64 " %s\n",
           err, ref_err, bound, nonfinite, masked_nonzero, poison_lost, lse_bad,
           pass ? "PASS" : "FAIL");
    if (pass && plan.bwd_supported) {
        const packed_t b = {c, cu_q, cu_k, total_q, total_k, qv, kv, vv, dq, dk, dv, d_o,
                            dlse, dcu_q, dcu_k, dused, c->scored ? &mod : NULL, dslopes, dsinks};
        pass = check_backward(&b, &plan, 0) & check_backward(&b, &plan, 1);
    }

cleanup:
    fflush(stdout);
    cudaFree(dq), cudaFree(dk), cudaFree(dv), cudaFree(d_o), cudaFree(dlse), cudaFree(ws);
    cudaFree(dcu_q), cudaFree(dcu_k), cudaFree(dused), cudaFree(dslopes), cudaFree(dsinks);
    free(qv), free(kv), free(vv), free(lse), free(qb), free(kb), free(vb), free(ob);
    free(want), free(ref), free(got), free(want_lse);
    return pass;
}

#define FP16 FA2_DTYPE_FP16
#define BF16 FA2_DTYPE_BF16

/* name, dtype, hq, hkv, d, causal, left, right, n, len_q, len_k, extra_k, slack,
 * skipped, consumer, scored */
static const varlen_case_t cases[] = {
    {"mixed lengths causal GQA", BF16, 4, 2, 128, 1, -1, -1, 7,
     {1, 17, 0, 300, 1000, 5, 64}, {1, 17, 0, 300, 1000, 200, 64}, 0, 16, -1, 0, 0},
    {"mixed lengths causal GQA", BF16, 4, 2, 128, 1, -1, -1, 7,
     {1, 17, 0, 300, 1000, 5, 64}, {1, 17, 0, 300, 1000, 200, 64}, 0, 16, -1, 1, 0},
    {"q > k, seqused_k", FP16, 2, 2, 64, 0, -1, -1, 4,
     {100, 1, 250, 33}, {37, 500, 250, 0}, 13, 0, -1, 0, 0},
    {"MQA window", BF16, 8, 1, 256, 1, 32, -1, 3, {129, 64, 2}, {129, 300, 2}, 0, 7, -1, 0, 0},
    {"d 96 chunked prefill", FP16, 3, 3, 96, 1, -1, -1, 8,
     {1, 1, 1, 40, 130, 0, 1, 77}, {900, 45, 1, 40, 260, 0, 2, 77}, 0, 0, -1, 0, 0},
    {"d 32 windows", BF16, 2, 1, 32, 0, 20, 10, 5, {16, 64, 65, 1, 200},
     {16, 64, 65, 1, 180}, 0, 100, -1, 0, 0},
    {"padding and a skipped sequence", BF16, 4, 4, 64, 1, -1, -1, 6,
     {50, 0, 400, 0, 0, 20}, {50, 0, 400, 0, 0, 20}, 0, 0, 2, 0, 0},
    {"score variants, mixed lengths", BF16, 4, 2, 128, 1, -1, -1, 7,
     {1, 17, 0, 300, 1000, 5, 64}, {1, 17, 0, 300, 1000, 200, 64}, 0, 16, -1, 0, 1},
    {"score variants, q > k, 99 KiB", FP16, 2, 2, 64, 1, -1, -1, 4,
     {100, 1, 250, 33}, {37, 500, 250, 1}, 0, 0, -1, 1, 1},
};

/* ---- the accepted limits: total_q, total_k = 2^31 - 1; total_k = 0 -------------------- */

typedef struct limit_case_t {
    const char *name;
    int64_t head_dim;          /* 8: the mma.sync kernels; 64: the Hopper ones on sm_90 */
    int64_t total_q, total_k;  /* rows of Q/O and K/V */
    int64_t max_q;             /* the planned longest query sequence */
    int n;
    int64_t cu_q[4];           /* query offsets; a sequence longer than max_q is skipped */
    int64_t k0[3], len_k[3];   /* each sequence's first key row and key count (seqused_k) */
} limit_case_t;

/* A packed batch at the largest total_q or total_k fa2_plan accepts, with sequences
 * at the very end of the rows, or with no keys at all. Q, K and V repeat one random row
 * (row stride 0; K/V at d = 64, for the Hopper kernels' TMA, which cannot step
 * by 0: rows 8 elements apart over a buffer repeating 8 values, 32 GiB each at 2^31 - 1
 * rows), so every score of a row is the same: O = v and LSE = s + ln(keys the
 * row sees), exactly computable (O = 0, LSE = -inf for a row that sees none). O and the
 * LSE (poisoned) are real: rows outside the sequences must stay poisoned (a skipped
 * sequence's and the spare rows, sampled). V's values are signed powers of two, so that
 * a sum of 2^22 of them is exact in fp32. Causal, bottom-right.
 * 1: passed, 0: failed, 2: skipped (not enough device memory). */
/* Fills `bytes` (a multiple of unit) at dev with the host's first `unit` bytes of
 * `pattern`, by doubling copies on the device. */
static cudaError_t repeat_on_device(void *dev, const void *pattern, size_t unit, size_t bytes)
{
    cudaError_t e = cudaMemcpy(dev, pattern, unit, cudaMemcpyHostToDevice);
    for (size_t have = unit; e == cudaSuccess && have < bytes;) {
        const size_t n = have < bytes - have ? have : bytes - have;
        e = cudaMemcpy((char *)dev + have, dev, n, cudaMemcpyDeviceToDevice);
        have += n;
    }
    return e;
}

static int run_limit_case(long index, const limit_case_t *c)
{
    const int64_t d = c->head_dim, n_o = c->total_q * d;
    int64_t max_k = 0, len_q[3];
    int32_t cu_q[4], cu_k[4], used[3];
    for (int b = 0; b < c->n; ++b) {
        len_q[b] = c->cu_q[b + 1] - c->cu_q[b];
        max_k = c->len_k[b] > max_k ? c->len_k[b] : max_k;
        cu_q[b] = (int32_t)c->cu_q[b];
        cu_k[b] = (int32_t)c->k0[b];
        used[b] = (int32_t)c->len_k[b];
    }
    cu_q[c->n] = (int32_t)c->cu_q[c->n];
    cu_k[c->n] = (int32_t)(c->k0[c->n - 1] + c->len_k[c->n - 1]);
    printf("case %ld: limit %s: total_q=%" PRId64 " total_k=%" PRId64 " d=%" PRId64, index,
           c->name, c->total_q, c->total_k, d);
    fa2_problem_t p;
    fa2_problem_init(&p, FA2_DTYPE_BF16, c->n, c->max_q, max_k, 1, 1, d);
    p.total_q = c->total_q;
    p.total_k = c->total_k;
    p.q_batch_stride = p.k_batch_stride = p.v_batch_stride = p.o_batch_stride = 0;
    const int overlap = d == 64 && c->total_k > 1; /* K/V rows 8 elements apart */
    p.q_seq_stride = 0;                             /* one row, repeated */
    p.k_seq_stride = p.v_seq_stride = overlap ? 8 : 0;
    p.causal = 1;
    fa2_plan_t plan;
    fa2_status_t st = fa2_plan(&p, &g_info, &plan);
    if (st != FA2_SUCCESS) {
        printf(" : fa2_plan: %s (%s) FAIL\n", fa2_status_string(st), fa2_last_error());
        return 0;
    }
    printf(" [sm%d %dx%d]", (int)plan.fwd_arch, (int)plan.block_m, (int)plan.block_n);
    const size_t o_bytes = 2 * (size_t)n_o, lse_bytes = 4 * (size_t)c->total_q;
    const size_t kv_bytes = 2 * (size_t)(overlap ? (c->total_k - 1) * 8 + d : d);
    const double need = (double)(o_bytes + lse_bytes + 2 * kv_bytes);
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess ||
        (double)free_b < need + (double)(1ull << 30)) {
        printf(" : SKIP (needs %.1f GiB + 1 GiB, %.1f GiB free)\n", need / (1ull << 30),
               (double)free_b / (1ull << 30));
        return 2;
    }
    oracle_rng_t rng = case_rng(g_seed, index);
    float qv[64], kv[64], vv[64];
    uint16_t qb[64], kb[64], vb[64];
    fill_rounded(qv, qb, d, &rng, FA2_DTYPE_BF16);
    fill_rounded(kv, kb, d, &rng, FA2_DTYPE_BF16);
    for (int64_t x = 0; x < d; ++x) { /* signed powers of two: sums of up to 2^22 exact */
        const uint64_t r = oracle_rng_next(&rng);
        vv[x] = ldexpf(r & 1 ? -1.0f : 1.0f, (int)((r >> 1) % 5) - 2);
        vb[x] = oracle_bits_from_float(vv[x], FA2_DTYPE_BF16);
    }
    for (int64_t x = 8; overlap && x < d; ++x) /* rows 8 apart: 8 values, repeated */
        kv[x] = kv[x % 8], kb[x] = kb[x % 8], vv[x] = vv[x % 8], vb[x] = vb[x % 8];
    double s = 0.0; /* the one score: scale * q.k */
    for (int64_t x = 0; x < d; ++x)
        s += (double)qv[x] * kv[x];
    s *= oracle_softmax_scale(&p);
    void *dq = device_buffer(qb, 2 * (size_t)d), *dk = device_buffer(NULL, kv_bytes),
         *dv = device_buffer(NULL, kv_bytes), *d_o = device_buffer(NULL, o_bytes);
    assert_int_equal(repeat_on_device(dk, kb, 2 * (size_t)(overlap ? 8 : d), kv_bytes),
                     cudaSuccess);
    assert_int_equal(repeat_on_device(dv, vb, 2 * (size_t)(overlap ? 8 : d), kv_bytes),
                     cudaSuccess);
    float *dlse = device_buffer(NULL, lse_bytes);
    int32_t *dcu_q = device_buffer(cu_q, sizeof cu_q), *dcu_k = device_buffer(cu_k, sizeof cu_k),
            *dused = device_buffer(used, sizeof used);
    int pass = 0;
    void *ws = device_buffer(NULL, (size_t)plan.workspace_bytes);
    st = fa2_forward_varlen(&plan, dq, dk, dv, d_o, dlse, dcu_q, dcu_k, dused, NULL, ws,
                            (size_t)plan.workspace_bytes, NULL);
    if (st != FA2_SUCCESS) {
        printf(" : fa2_forward_varlen: %s (%s) FAIL\n", fa2_status_string(st),
               fa2_last_error());
        goto cleanup;
    }
    assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
    int64_t o_bad = 0, lse_bad = 0, poison_lost = 0;
    uint16_t row[64];
    float lse;
    for (int b = 0; b < c->n; ++b) { /* every row of every sequence */
        const int skipped = len_q[b] > c->max_q; /* past the plan: nothing written */
        for (int64_t i = 0; i < len_q[b]; i += skipped ? len_q[b] / 3 : 1) {
            const int64_t r = c->cu_q[b] + i;
            uint32_t lse_bits;
            assert_int_equal(cudaMemcpy(row, (uint16_t *)d_o + r * d, 2 * (size_t)d,
                                        cudaMemcpyDeviceToHost),
                             cudaSuccess);
            assert_int_equal(cudaMemcpy(&lse, dlse + r, 4, cudaMemcpyDeviceToHost), cudaSuccess);
            if (skipped) {
                memcpy(&lse_bits, &lse, 4);
                poison_lost += lse_bits != 0xFFFFFFFFu;
                for (int64_t x = 0; x < d; ++x)
                    poison_lost += row[x] != 0xFFFFu;
                continue;
            }
            const int64_t seen = i + c->len_k[b] - len_q[b] + 1; /* causal, bottom-right */
            const double want = seen > 0 ? s + log((double)seen) : -INFINITY;
            lse_bad += seen > 0 ? !(fabs(lse - want) <= LSE_TOL * fmax(1.0, fabs(want)))
                                : !(isinf(lse) && lse < 0);
            for (int64_t x = 0; x < d; ++x) {
                const double got = oracle_float_from_bits(row[x], FA2_DTYPE_BF16);
                const double w = seen > 0 ? vv[x] : 0.0;
                o_bad += !(fabs(got - w) <= 0x1p-8 * fabs(w) + 1e-6);
            }
        }
    }
    /* rows past the last offset (spare rows) stay poisoned too */
    for (int64_t r = c->cu_q[c->n]; r < c->total_q; r += (c->total_q - c->cu_q[c->n]) / 3 + 1) {
        uint32_t lse_bits;
        assert_int_equal(cudaMemcpy(row, (uint16_t *)d_o + r * d, 2 * (size_t)d,
                                    cudaMemcpyDeviceToHost),
                         cudaSuccess);
        assert_int_equal(cudaMemcpy(&lse_bits, dlse + r, 4, cudaMemcpyDeviceToHost),
                         cudaSuccess);
        poison_lost += lse_bits != 0xFFFFFFFFu;
        for (int64_t x = 0; x < d; ++x)
            poison_lost += row[x] != 0xFFFFu;
    }
    int too_long = -1; /* the sequence past the planned seqlen_q */
    for (int b = c->n - 1; b >= 0; --b)
        too_long = len_q[b] > c->max_q ? b : too_long;
    const int records = records_ok(&plan, ws, too_long, FA2_VARLEN_SEQLEN_Q);
    pass = o_bad == 0 && lse_bad == 0 && poison_lost == 0 && records;
    printf(" : o_bad=%" PRId64 " lse_bad=%" PRId64 " written_outside=%" PRId64 " %s\n", o_bad,
           lse_bad, poison_lost, pass ? "PASS" : "FAIL");

cleanup:
    fflush(stdout);
    cudaFree(dq), cudaFree(dk), cudaFree(dv), cudaFree(d_o), cudaFree(dlse), cudaFree(ws);
    cudaFree(dcu_q), cudaFree(dcu_k), cudaFree(dused);
    return pass;
}

#define MAX_ROWS INT32_MAX

/* name, d, total_q, total_k, max_q, n, cu_q, k0, len_k */
static const limit_case_t limit_cases[] = {
    /* Q and O at 2^31 - 1 rows (O: 32 GiB at d = 8), the last sequence ending on the last
     * row and the one before it too long for the plan (skipped); K/V at their limit too,
     * the last sequence's keys ending on the last key row, FA2_MAX_SEQLEN of them */
    {"rows of Q and K", 8, MAX_ROWS, MAX_ROWS, 1000, 3, {0, 17, MAX_ROWS - 1000, MAX_ROWS},
     {0, 40, MAX_ROWS - FA2_MAX_SEQLEN}, {40, 0, FA2_MAX_SEQLEN}},
    /* K/V at 2^31 - 1 rows on the Hopper kernels (d = 64), Q small with spare rows */
    {"rows of K, Hopper kernels", 64, 2000, MAX_ROWS, 1000, 2, {0, 300, 1300},
     {0, MAX_ROWS - 5000}, {300, 5000}},
    /* total_k = 0, its lower limit: no keys in the batch (the Hopper kernels make no
     * tensor map then), every row O = 0 and LSE = -inf */
    {"no keys, Hopper kernels", 64, 100, 0, 64, 2, {0, 5, 40}, {0, 0}, {0, 0}},
    {"no keys, mma.sync kernels", 8, 100, 0, 64, 2, {0, 17, 60}, {0, 0}, {0, 0}},
};

static void test_packed_limits(void **state)
{
    (void)state;
    long failed = 0, run = 0, skipped = 0;
    for (size_t i = 0; i < sizeof limit_cases / sizeof limit_cases[0]; ++i)
        if (g_only < 0 || g_only == 200 + (long)i) {
            const int r = run_limit_case(200 + (long)i, &limit_cases[i]);
            failed += r == 0, skipped += r == 2, ++run;
        }
    printf("%ld of %ld limit cases failed, %ld skipped (seed %" PRIu64 ")\n", failed, run,
           skipped, g_seed);
    assert_int_equal(failed, 0);
    if (skipped) /* not enough device memory: reported as skipped, not passed */
        skip();
}


/* ---- hostile metadata ------------------------------------------------------------- */

enum { H_SEQS = 4, H_PAGE = 16, H_PER_SEQ = 16, H_MAX_Q = 128, H_MAX_K = 256 };
static const int32_t h_len_q[H_SEQS] = {5, 40, 70, 17}, h_len_k[H_SEQS] = {9, 100, 130, 33};

typedef struct hostile_case_t {
    const char *name;
    int paged;
    int edit;           /* which value to corrupt (see hostile_edit) */
    int bad;            /* the sequence that must fail, or -1 */
    int32_t check;      /* and its check */
    int rows_untouched; /* the failing sequence's rows belong to no other sequence */
    unsigned unchanged; /* sequences whose offsets are intact: output bit-identical */
} hostile_case_t;

static void hostile_edit(int edit, int32_t *cu_q, int32_t *cu_k, int32_t *used, int32_t *table,
                         int64_t total_q, int64_t num_pages)
{
    switch (edit) {
    case 1: cu_q[0] = 1; break;
    case 2: cu_q[2] = cu_q[3] + 1; break;
    case 3: cu_q[4] = (int32_t)total_q + 1; break;
    case 4: cu_k[3] = cu_k[2] - 1; break;
    case 5: used[1] = h_len_k[1] + 1; break;
    case 6: used[3] = -1; break;
    case 7: used[2] = H_MAX_K + 1; break;
    case 8: table[1 * H_PER_SEQ + 2] = (int32_t)num_pages; break;
    case 9: table[2 * H_PER_SEQ] = -7; break;
    case 10: table[3 * H_PER_SEQ + 10] = 999; break; /* past sequence 3's keys: not read */
    case 11: used[0] = H_MAX_K + 1; break;
    }
}

static const hostile_case_t hostile_cases[] = {
    {"cu_seqlens_q[0] = 1", 0, 1, 0, FA2_VARLEN_CU_SEQLENS_Q, 1, 0xE},
    /* sequence 1 then ends past sequence 3's first row: those rows are both's */
    {"cu_seqlens_q decreasing", 0, 2, 2, FA2_VARLEN_CU_SEQLENS_Q, 0, 0x1},
    {"cu_seqlens_q past total_q", 0, 3, 3, FA2_VARLEN_CU_SEQLENS_Q, 1, 0x7},
    {"cu_seqlens_k decreasing", 0, 4, 2, FA2_VARLEN_CU_SEQLENS_K, 1, 0x3},
    {"seqused_k above its keys", 0, 5, 1, FA2_VARLEN_SEQUSED_K, 1, 0xD},
    {"seqused_k negative", 0, 6, 3, FA2_VARLEN_SEQLEN_K, 1, 0x7},
    {"seqused_k above the planned seqlen_k", 0, 7, 2, FA2_VARLEN_SEQLEN_K, 1, 0xB},
    {"page id = num_pages", 1, 8, 1, FA2_VARLEN_PAGE_ID, 1, 0xD},
    {"page id negative", 1, 9, 2, FA2_VARLEN_PAGE_ID, 1, 0xB},
    {"a bad page-table entry past the keys", 1, 10, -1, FA2_VARLEN_OK, 0, 0xF},
    {"paged seqused_k above the planned seqlen_k", 1, 11, 0, FA2_VARLEN_SEQLEN_K, 1, 0xE},
};

/* One batch (paged or packed K/V), run clean and then with each of its hostile edits:
 * the failing sequence and check recorded, its rows untouched, the intact sequences'
 * O and LSE bit-identical to the clean run. */
static long run_hostile(int paged, int64_t d)
{
    const int64_t hq = 2, hkv = 1, spare = 8;
    int32_t cu_q[H_SEQS + 1] = {0}, cu_k[H_SEQS + 1] = {0}, used[H_SEQS];
    int32_t table[H_SEQS * H_PER_SEQ];
    int64_t num_pages = 2;
    for (int b = 0; b < H_SEQS; ++b) {
        cu_q[b + 1] = cu_q[b] + h_len_q[b];
        cu_k[b + 1] = cu_k[b] + h_len_k[b];
        used[b] = h_len_k[b];
        num_pages += (h_len_k[b] + H_PAGE - 1) / H_PAGE;
    }
    const int64_t total_q = cu_q[H_SEQS] + spare, total_k = cu_k[H_SEQS] + spare;
    for (int b = 0, next = 0; b < H_SEQS; ++b) /* pages dealt in reverse, -1 past the keys */
        for (int j = 0; j < H_PER_SEQ; ++j)
            table[b * H_PER_SEQ + j] =
                j < (h_len_k[b] + H_PAGE - 1) / H_PAGE ? (int32_t)(num_pages - 1 - next++) : -1;
    fa2_problem_t p;
    fa2_problem_init(&p, FA2_DTYPE_BF16, H_SEQS, H_MAX_Q, H_MAX_K, hq, hkv, d);
    p.total_q = total_q;
    p.total_k = paged ? 0 : total_k;
    p.q_batch_stride = p.k_batch_stride = p.v_batch_stride = p.o_batch_stride = 0;
    if (paged) {
        p.page_size = H_PAGE;
        p.num_pages = num_pages;
        p.pages_per_seq = H_PER_SEQ;
        p.k_batch_stride = p.v_batch_stride = H_PAGE * hkv * d;
    }
    p.causal = 1;
    fa2_plan_t plan;
    assert_int_equal(fa2_plan(&p, &g_info, &plan), FA2_SUCCESS);
    const int64_t k_rows = paged ? num_pages * H_PAGE : total_k;
    const int64_t nq = total_q * hq * d, nk = k_rows * hkv * d, n_lse = hq * total_q;
    oracle_rng_t rng = case_rng(g_seed, 5000 + paged + d);
    float *vals = malloc(sizeof(float) * (size_t)(nq > nk ? nq : nk));
    uint16_t *qb = malloc(2 * (size_t)nq), *kb = malloc(2 * (size_t)nk),
             *vb = malloc(2 * (size_t)nk), *clean_o = malloc(2 * (size_t)nq),
             *o = malloc(2 * (size_t)nq);
    uint32_t *clean_lse = malloc(4 * (size_t)n_lse), *lse = malloc(4 * (size_t)n_lse);
    assert_true(vals && qb && kb && vb && clean_o && o && clean_lse && lse);
    fill_rounded(vals, qb, nq, &rng, FA2_DTYPE_BF16);
    fill_rounded(vals, kb, nk, &rng, FA2_DTYPE_BF16);
    fill_rounded(vals, vb, nk, &rng, FA2_DTYPE_BF16);
    void *dq = device_buffer(qb, 2 * (size_t)nq), *dk = device_buffer(kb, 2 * (size_t)nk),
         *dv = device_buffer(vb, 2 * (size_t)nk), *d_o = device_buffer(NULL, 2 * (size_t)nq),
         *dlse = device_buffer(NULL, 4 * (size_t)n_lse),
         *ws = device_buffer(NULL, (size_t)plan.workspace_bytes);
    int32_t *dcu_q = device_buffer(NULL, sizeof cu_q), *dcu_k = device_buffer(NULL, sizeof cu_k),
            *dused = device_buffer(NULL, sizeof used), *dtable = device_buffer(NULL, sizeof table);
    long failed = 0;
    for (size_t i = 0; i <= sizeof hostile_cases / sizeof hostile_cases[0]; ++i) {
        const hostile_case_t *c = i ? &hostile_cases[i - 1] : NULL; /* 0: the clean run */
        if (c && c->paged != paged)
            continue;
        int32_t hcu_q[H_SEQS + 1], hcu_k[H_SEQS + 1], hused[H_SEQS], htable[H_SEQS * H_PER_SEQ];
        memcpy(hcu_q, cu_q, sizeof cu_q), memcpy(hcu_k, cu_k, sizeof cu_k);
        memcpy(hused, used, sizeof used), memcpy(htable, table, sizeof table);
        if (c)
            hostile_edit(c->edit, hcu_q, hcu_k, hused, htable, total_q, num_pages);
        assert_int_equal(cudaMemcpy(dcu_q, hcu_q, sizeof hcu_q, cudaMemcpyHostToDevice), 0);
        assert_int_equal(cudaMemcpy(dcu_k, hcu_k, sizeof hcu_k, cudaMemcpyHostToDevice), 0);
        assert_int_equal(cudaMemcpy(dused, hused, sizeof hused, cudaMemcpyHostToDevice), 0);
        assert_int_equal(cudaMemcpy(dtable, htable, sizeof htable, cudaMemcpyHostToDevice), 0);
        assert_int_equal(cudaMemset(d_o, 0xFF, 2 * (size_t)nq), 0);
        assert_int_equal(cudaMemset(dlse, 0xFF, 4 * (size_t)n_lse), 0);
        assert_int_equal(cudaMemset(ws, 0xFF, (size_t)plan.workspace_bytes), 0);
        printf("hostile %s d=%" PRId64 ": %s", paged ? "paged" : "packed", d,
               c ? c->name : "clean run");
        const fa2_status_t st =
            fa2_forward_varlen(&plan, dq, dk, dv, d_o, dlse, dcu_q, paged ? NULL : dcu_k, dused,
                               paged ? dtable : NULL, ws, (size_t)plan.workspace_bytes, NULL);
        if (st != FA2_SUCCESS) {
            printf(" : fa2_forward_varlen: %s (%s) FAIL\n", fa2_status_string(st),
                   fa2_last_error());
            ++failed;
            continue;
        }
        const int records = records_ok(&plan, ws, c ? c->bad : -1, c ? c->check : 0);
        uint16_t *got_o = c ? o : clean_o;
        uint32_t *got_lse = c ? lse : clean_lse;
        assert_int_equal(cudaMemcpy(got_o, d_o, 2 * (size_t)nq, cudaMemcpyDeviceToHost), 0);
        assert_int_equal(cudaMemcpy(got_lse, dlse, 4 * (size_t)n_lse, cudaMemcpyDeviceToHost), 0);
        int64_t differ = 0, written = 0, unwritten = 0;
        for (int b = 0; b < H_SEQS; ++b)
            for (int64_t r = cu_q[b]; r < cu_q[b + 1]; ++r)
                for (int64_t h = 0; h < hq; ++h) {
                    const int64_t at = (r * hq + h) * d;
                    const int intact = !c || (c->unchanged >> b & 1);
                    if (c && b == c->bad && c->rows_untouched) {
                        written += got_lse[h * total_q + r] != 0xFFFFFFFFu;
                        for (int64_t x = 0; x < d; ++x)
                            written += got_o[at + x] != 0xFFFFu;
                    } else if (intact && c) {
                        differ += got_lse[h * total_q + r] != clean_lse[h * total_q + r] ||
                                  memcmp(got_o + at, clean_o + at, 2 * (size_t)d) != 0;
                    } else if (!c) {
                        unwritten += got_lse[h * total_q + r] == 0xFFFFFFFFu;
                    }
                }
        const int ok = records && differ == 0 && written == 0 && unwritten == 0;
        failed += !ok;
        printf(" : intact rows differing=%" PRId64 " failed rows written=%" PRId64
               " clean rows unwritten=%" PRId64 " %s\n",
               differ, written, unwritten, ok ? "PASS" : "FAIL");
    }
    fflush(stdout);
    cudaFree(dq), cudaFree(dk), cudaFree(dv), cudaFree(d_o), cudaFree(dlse), cudaFree(ws);
    cudaFree(dcu_q), cudaFree(dcu_k), cudaFree(dused), cudaFree(dtable);
    free(vals), free(qb), free(kb), free(vb), free(clean_o), free(o), free(clean_lse), free(lse);
    return failed;
}

static void test_hostile_metadata(void **state)
{
    (void)state;
    /* d = 128: a paged cache of 16-row pages runs the producer warpgroup on sm_90 */
    const long failed = run_hostile(0, 64) + run_hostile(1, 64) + run_hostile(1, 128);
    printf("%ld hostile metadata cases failed (seed %" PRIu64 ")\n", failed, g_seed);
    assert_int_equal(failed, 0);
}

/* ---- paged K/V ---------------------------------------------------------------------- */

typedef struct paged_case_t {
    const char *name;
    fa2_dtype_t dtype;
    int64_t heads_q, heads_kv, head_dim;
    int32_t causal;
    int64_t window_left, window_right;
    int n;
    int64_t len_q[MAX_SEQS], len_k[MAX_SEQS];
    int64_t page_size;
    int shared_pages; /* sequence 1's first pages are sequence 0's (a shared prefix) */
    int consumer;     /* plan for a 99 KiB sm_89 device */
    int scored;       /* the score variants on: softcap 10, ALiBi, sinks (2: no softcap;
                         3: no ALiBi, the softcap bounding the scores; 4: as 2 with
                         slopes in [0.3, 1)) */
    int64_t page_pad; /* elements after each page: a page stride of no whole number of rows
                         (the kernels' 64-bit row offsets, not the row space) */
} paged_case_t;

/* One sequence of a paged run (problem `one`: its lengths, heads, mask) against the
 * oracle on its keys gathered from the pages (kseq, vseq: [seqlen_k, heads_kv, d]), its
 * rows starting at q0 of total_q: fills want, ref (the same-precision reference) and got
 * at those rows, and counts the LSE misses (LSE_TOL; -inf exact) and non-finite outputs. */
static void judge_paged_sequence(const fa2_problem_t *one, const oracle_score_t *mod,
                                 int64_t q0, int64_t total_q, const float *qv,
                                 const float *kseq, const float *vseq, const uint16_t *ob,
                                 const float *lse, double *want, double *ref, double *got,
                                 double *want_lse, int64_t *lse_bad, int64_t *nonfinite)
{
    const int64_t lq = one->seqlen_q, hq = one->heads_q, d = one->head_dim, row = hq * d;
    assert_int_equal(oracle_forward_scored(one, mod, qv + q0 * row, kseq, vseq, want + q0 * row,
                                           want_lse),
                     0);
    assert_int_equal(
        oracle_forward_scored_rounded(one, mod, qv + q0 * row, kseq, vseq, ref + q0 * row), 0);
    for (int64_t i = 0; i < lq; ++i)
        for (int64_t h = 0; h < hq; ++h) {
            const double w_lse = want_lse[h * lq + i], g_lse = lse[h * total_q + q0 + i];
            const double e = isinf(w_lse) ? (g_lse == w_lse ? 0.0 : INFINITY)
                                          : fabs(g_lse - w_lse) / fmax(1.0, fabs(w_lse));
            *lse_bad += !(e <= LSE_TOL);
            for (int64_t x = 0; x < d; ++x) {
                const int64_t t = ((q0 + i) * hq + h) * d + x;
                got[t] = oracle_float_from_bits(ob[t], one->dtype);
                *nonfinite += !isfinite(got[t]);
            }
        }
}

/* A paged run's verdict, printed: O's elements from `used` on (the spare rows) still
 * poisoned, the rel L2 error of O (n elements) within max(2 x the reference's, floor), no
 * LSE miss or non-finite output, every metadata record FA2_VARLEN_OK. */
static int paged_verdict(const fa2_plan_t *plan, const void *ws, const uint16_t *ob,
                         int64_t used, int64_t n, const double *got, const double *want,
                         const double *ref, int64_t nonfinite, int64_t lse_bad)
{
    int64_t poison_lost = 0;
    for (int64_t x = used; x < n; ++x)
        poison_lost += ob[x] != 0xFFFFu;
    const double err = oracle_rel_l2(got, want, (size_t)n);
    const double ref_err = oracle_rel_l2(ref, want, (size_t)n);
    const double bound = fmax(2.0 * ref_err, plan->problem.dtype == FA2_DTYPE_BF16 ? FLOOR_BF16
                                                                                  : FLOOR_FP16);
    const int records = records_ok(plan, ws, -1, FA2_VARLEN_OK);
    const int pass = err <= bound && nonfinite == 0 && poison_lost == 0 && lse_bad == 0 && records;
    printf(" : err=%.3e ref=%.3e bound=%.3e nonfinite=%" PRId64 " written_outside=%" PRId64
           " lse_bad=%" PRId64 " %s\n",
           err, ref_err, bound, nonfinite, poison_lost, lse_bad, pass ? "PASS" : "FAIL");
    return pass;
}

/* A paged cache of shuffled pages (a few never used, page-table entries past a
 * sequence's pages -1), Q packed; each sequence against oracle_forward_scored on its
 * keys gathered from the pages. O and the LSE poisoned; spare rows must stay so. */
static int run_paged_case(long index, const paged_case_t *c)
{
    const int n = c->n;
    const int64_t hq = c->heads_q, hkv = c->heads_kv, d = c->head_dim, ps = c->page_size;
    int32_t cu_q[MAX_SEQS + 1], used[MAX_SEQS];
    int64_t pages_per_seq = 1, pages_needed = 0, max_k = 0;
    cu_q[0] = 0;
    for (int b = 0; b < n; ++b) {
        cu_q[b + 1] = cu_q[b] + (int32_t)c->len_q[b];
        used[b] = (int32_t)c->len_k[b];
        const int64_t pages = (c->len_k[b] + ps - 1) / ps;
        pages_per_seq = pages > pages_per_seq ? pages : pages_per_seq;
        pages_needed += pages;
        max_k = c->len_k[b] > max_k ? c->len_k[b] : max_k;
    }
    const int64_t num_pages = pages_needed + 3, total_q = cu_q[n] + SPARE_ROWS;
    const int64_t max_q = max_of(c->len_q, n, -1);
    /* page ids: a random permutation, handed out in order; sequence 1 starts with
     * sequence 0's first shared_pages pages */
    oracle_rng_t rng = case_rng(g_seed, 2000 + index);
    int32_t *perm = malloc(sizeof(int32_t) * (size_t)num_pages);
    int32_t *table = malloc(sizeof(int32_t) * (size_t)(n * pages_per_seq));
    assert_true(perm && table);
    for (int64_t i = 0; i < num_pages; ++i)
        perm[i] = (int32_t)i;
    for (int64_t i = num_pages - 1; i > 0; --i) {
        const int64_t j = (int64_t)(oracle_rng_next(&rng) % (uint64_t)(i + 1));
        const int32_t t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    int64_t next = 0;
    for (int b = 0; b < n; ++b)
        for (int64_t j = 0; j < pages_per_seq; ++j) {
            const int64_t pages = (c->len_k[b] + ps - 1) / ps;
            int32_t id = -1;
            const int64_t pages0 = (c->len_k[0] + ps - 1) / ps;
            if (j < pages)
                id = b == 1 && j < c->shared_pages && j < pages0 ? table[j] : perm[next++];
            table[b * pages_per_seq + j] = id;
        }

    fa2_problem_t p;
    fa2_problem_init(&p, c->dtype, n, max_q > 0 ? max_q : 1, max_k, hq, hkv, d);
    p.total_q = total_q;
    p.page_size = ps;
    p.num_pages = num_pages;
    p.pages_per_seq = pages_per_seq;
    p.q_batch_stride = p.o_batch_stride = 0;
    const int64_t page_stride = ps * hkv * d + c->page_pad;
    p.k_batch_stride = p.v_batch_stride = page_stride;
    p.causal = c->causal;
    p.window_left = c->window_left;
    p.window_right = c->window_right;
    if (c->scored)
        p.softcap = c->scored == 2 || c->scored == 4 ? 0.0f : 10.0f,
        p.alibi = c->scored != 3, p.sinks = 1;
    const fa2_device_info_t device = c->consumer ? consumer_device_info(&g_info) : g_info;
    printf("case %ld: paged %s %s %d seqs page=%" PRId64 " hq=%" PRId64 " hkv=%" PRId64
           " d=%" PRId64 " page stride=%" PRId64 "%s%s%s%s", index, c->name,
           c->dtype == FA2_DTYPE_BF16 ? "bf16" : "fp16", n, ps, hq, hkv, d, page_stride,
           c->consumer ? " (planned for 99 KiB)" : "",
           c->scored == 1 || c->scored == 3 ? " softcap=10" : "",
           c->scored == 4 ? " steep" : "",
           !c->scored ? "" : c->scored == 3 ? " sinks" : " alibi sinks");
    fa2_plan_t plan;
    fa2_status_t st = fa2_plan(&p, &device, &plan);
    if (st != FA2_SUCCESS) {
        printf(" : fa2_plan: %s (%s) FAIL\n", fa2_status_string(st), fa2_last_error());
        free(perm), free(table);
        return 0;
    }
    printf(" [sm%d %dx%d]", (int)plan.fwd_arch, (int)plan.block_m, (int)plan.block_n);

    const int64_t nq = total_q * hq * d, nk = num_pages * page_stride, n_lse = hq * total_q;
    float *qv = malloc(sizeof(float) * (size_t)nq), *kv = malloc(sizeof(float) * (size_t)nk),
          *vv = malloc(sizeof(float) * (size_t)nk), *lse = malloc(sizeof(float) * (size_t)n_lse),
          *kseq = malloc(sizeof(float) * (size_t)((max_k + 1) * hkv * d)),
          *vseq = malloc(sizeof(float) * (size_t)((max_k + 1) * hkv * d));
    uint16_t *qb = malloc(2 * (size_t)nq), *kb = malloc(2 * (size_t)nk),
             *vb = malloc(2 * (size_t)nk), *ob = malloc(2 * (size_t)nq);
    double *want = calloc((size_t)nq, sizeof(double)), *ref = calloc((size_t)nq, sizeof(double)),
           *got = calloc((size_t)nq, sizeof(double)),
           *want_lse = malloc(sizeof(double) * (size_t)(hq * (max_q + 1)));
    assert_true(qv && kv && vv && lse && kseq && vseq && qb && kb && vb && ob && want && ref &&
                got && want_lse);
    fill_rounded(qv, qb, nq, &rng, c->dtype);
    fill_rounded(kv, kb, nk, &rng, c->dtype);
    fill_rounded(vv, vb, nk, &rng, c->dtype);
    /* Cache rows no sequence's keys reach (a last page's tail, the pages no table names,
     * page padding) hold NaN, as an engine's stale rows may: they must not reach O. */
    unsigned char *row_used = calloc((size_t)(num_pages * ps), 1);
    assert_true(row_used);
    for (int b = 0; b < n; ++b)
        for (int64_t j = 0; j < c->len_k[b]; ++j)
            row_used[table[b * pages_per_seq + j / ps] * ps + j % ps] = 1;
    for (int64_t pg = 0; pg < num_pages; ++pg)
        for (int64_t x = 0; x < page_stride; ++x) {
            const int64_t r = x / (hkv * d);
            if (r >= ps || !row_used[pg * ps + r])
                kb[pg * page_stride + x] = vb[pg * page_stride + x] = 0xFFFFu;
        }
    free(row_used);
    float slopes[16], sinks[16];
    oracle_score_t mod = score_variants_case(&rng, hq, slopes, sinks);
    if (c->scored == 2 || c->scored == 4)
        mod.softcap = 0.0;
    if (c->scored == 4) /* steep: [0.3, 1) */
        for (int64_t h = 0; h < hq; ++h)
            slopes[h] = 0.3f + slopes[h] * (0.7f / 0.3f);
    if (c->scored == 3)
        mod.alibi_slopes = NULL;
    void *dq = device_buffer(qb, 2 * (size_t)nq), *dk = device_buffer(kb, 2 * (size_t)nk),
         *dv = device_buffer(vb, 2 * (size_t)nk), *d_o = device_buffer(NULL, 2 * (size_t)nq);
    float *dslopes = c->scored && c->scored != 3 ? device_buffer(slopes, sizeof slopes) : NULL,
          *dsinks = c->scored ? device_buffer(sinks, sizeof sinks) : NULL;
    float *dlse = device_buffer(NULL, sizeof(float) * (size_t)n_lse);
    int32_t *dcu_q = device_buffer(cu_q, sizeof cu_q), *dused = device_buffer(used, sizeof used),
            *dtable = device_buffer(table, sizeof(int32_t) * (size_t)(n * pages_per_seq));
    void *ws = device_buffer(NULL, (size_t)plan.workspace_bytes);
    int pass = 0;
    if (!forward_and_download(&plan, dq, dk, dv, d_o, dlse, dcu_q, NULL, dused, dtable, ws,
                              dslopes, dsinks, ob, lse, nq, n_lse))
        goto cleanup;
    int64_t nonfinite = 0, lse_bad = 0;
    for (int b = 0; b < n; ++b) {
        const int64_t lq = c->len_q[b], lk = c->len_k[b], q0 = cu_q[b];
        if (lq == 0)
            continue;
        for (int64_t j = 0; j < lk; ++j) { /* the sequence's keys, gathered from its pages */
            const int64_t page = table[b * pages_per_seq + j / ps];
            const int64_t at = page * page_stride + j % ps * hkv * d;
            memcpy(kseq + j * hkv * d, kv + at, sizeof(float) * (size_t)(hkv * d));
            memcpy(vseq + j * hkv * d, vv + at, sizeof(float) * (size_t)(hkv * d));
        }
        fa2_problem_t one;
        fa2_problem_init(&one, c->dtype, 1, lq, lk, hq, hkv, d);
        one.causal = c->causal;
        one.window_left = c->window_left;
        one.window_right = c->window_right;
        judge_paged_sequence(&one, c->scored ? &mod : NULL, q0, total_q, qv, kseq, vseq, ob, lse,
                             want, ref, got, want_lse, &lse_bad, &nonfinite);
    }
    pass = paged_verdict(&plan, ws, ob, cu_q[n] * hq * d, nq, got, want, ref, nonfinite,
                         lse_bad);

cleanup:
    fflush(stdout);
    cudaFree(dq), cudaFree(dk), cudaFree(dv), cudaFree(d_o), cudaFree(dlse), cudaFree(ws);
    cudaFree(dcu_q), cudaFree(dused), cudaFree(dtable), cudaFree(dslopes), cudaFree(dsinks);
    free(qv), free(kv), free(vv), free(lse), free(kseq), free(vseq);
    free(qb), free(kb), free(vb), free(ob), free(want), free(ref), free(got), free(want_lse);
    free(perm), free(table);
    return pass;
}

/* name, dtype, hq, hkv, d, causal, left, right, n, len_q, len_k, page, shared, consumer,
 * scored */
static const paged_case_t paged_cases[] = {
    {"mixed lengths, shared prefix", BF16, 4, 2, 128, 1, -1, -1, 6,
     {300, 17, 0, 1, 5, 64}, {300, 17, 0, 1, 200, 640}, 16, 2, 0, 0, 0},
    {"window", FP16, 2, 2, 64, 0, 40, 8, 3, {100, 1, 64}, {37, 500, 64}, 64, 0, 0, 0, 0},
    {"MQA d 256", BF16, 8, 1, 256, 1, -1, -1, 3, {129, 2, 1}, {129, 700, 300}, 256, 1, 0, 0, 0},
    {"odd page", BF16, 4, 2, 128, 1, -1, -1, 4, {1, 33, 2, 100}, {250, 33, 90, 100}, 17, 1, 1,
     0, 0},
    {"decode rows, d 96", FP16, 3, 3, 96, 1, -1, -1, 5, {1, 1, 1, 4, 1},
     {1000, 31, 1, 64, 2048}, 32, 0, 0, 0, 0},
    {"page of one key", BF16, 2, 1, 64, 0, -1, -1, 2, {7, 1}, {40, 3}, 1, 1, 0, 0, 0},
    {"variants, mixed lengths", BF16, 8, 2, 128, 1, -1, -1, 4, {300, 0, 1, 77},
     {300, 40, 900, 200}, 16, 0, 0, 1, 0},
    {"variants, window, odd page", FP16, 4, 2, 64, 0, 50, 10, 3, {129, 5, 1},
     {129, 260, 33}, 17, 1, 0, 1, 0},
    {"variants, d 96, 99 KiB", BF16, 4, 4, 96, 1, -1, -1, 2, {64, 200}, {500, 200}, 64, 0,
     1, 1, 0},
    {"padded pages", BF16, 8, 2, 128, 1, -1, -1, 4, {300, 1, 17, 130}, {300, 700, 17, 900},
     16, 1, 0, 0, 8},
    {"padded pages, 99 KiB", FP16, 4, 2, 64, 0, 30, 0, 3, {200, 1, 64}, {200, 333, 64}, 32, 0,
     1, 0, 40},
    /* d = 128: the producer warpgroup at every page size (pages of 64, 128, 32 and an odd
     * 24: rows of a tile in two or three pages), plain and with ALiBi alone (the scored
     * instance's overlapped loop); softcap under a running maximum by TMA
     * (pages of 64) */
    {"producer, page 64, d 128", BF16, 8, 2, 128, 1, -1, -1, 4, {300, 1, 0, 129},
     {700, 64, 129, 1000}, 64, 1, 0, 0, 0},
    {"ALiBi alone, producer, page 128, d 128", FP16, 4, 2, 128, 0, 100, -1, 3, {200, 1, 77},
     {640, 300, 77}, 128, 0, 0, 2, 0},
    {"page 32, d 128", BF16, 4, 1, 128, 1, -1, -1, 3, {150, 1, 33}, {400, 33, 1000}, 32, 1, 0,
     0, 0},
    {"producer, page 24, MQA d 128", BF16, 8, 1, 128, 1, -1, -1, 4, {1, 300, 0, 129},
     {1000, 300, 5, 129}, 24, 2, 0, 0, 0},
    {"ALiBi alone, producer, d 128", FP16, 4, 2, 128, 0, 100, -1, 3, {200, 1, 77},
     {640, 300, 77}, 16, 1, 0, 2, 0},
    /* steep slopes over 1000 keys: tiles whose P underflows to 0, their P V skipped */
    {"ALiBi alone, steep, producer, d 128", BF16, 4, 2, 128, 1, -1, -1, 3, {1000, 1, 300},
     {1000, 1200, 800}, 64, 0, 0, 4, 0},
    {"variants, TMA, d 128", FP16, 4, 2, 128, 1, -1, -1, 3, {200, 1, 77},
     {640, 300, 77}, 64, 1, 0, 1, 0},
    /* softcap with sinks, no ALiBi, bf16: the scores' bound as the softmax's offset, in
     * the producer's overlapped loop and cp.async's one-tile loop (d = 64) */
    {"bounded softcap, producer, d 128", BF16, 8, 2, 128, 1, -1, -1, 4, {300, 0, 1, 77},
     {300, 40, 900, 200}, 16, 1, 0, 3, 0},
    {"bounded softcap, producer, page 64, d 128", BF16, 4, 2, 128, 0, 100, 7, 3, {200, 1, 77},
     {640, 300, 77}, 64, 0, 0, 3, 0},
    {"bounded softcap, d 64, odd page", BF16, 4, 1, 64, 1, -1, -1, 3, {129, 5, 1},
     {129, 260, 33}, 17, 1, 0, 3, 0},
    /* d = 112, in the 128 bucket: the producer's copies of rows shorter than the tile's
     * (load_paged_tile's zero-filled columns, no row space), plain and bounded softcap */
    {"producer, d 112, page 16", BF16, 4, 2, 112, 1, -1, -1, 3, {200, 1, 77}, {640, 300, 77},
     16, 1, 0, 0, 0},
    {"bounded softcap, producer, d 112, page 48", BF16, 4, 1, 112, 0, 60, -1, 3, {129, 5, 1},
     {129, 260, 33}, 48, 0, 0, 3, 0},
};

static void test_paged_matches_oracle(void **state)
{
    (void)state;
    long failed = 0, run = 0;
    for (size_t i = 0; i < sizeof paged_cases / sizeof paged_cases[0]; ++i)
        if (g_only < 0 || g_only == 100 + (long)i)
            failed += !run_paged_case(100 + (long)i, &paged_cases[i]), ++run;
    printf("%ld of %ld paged cases failed (seed %" PRIu64 ")\n", failed, run, g_seed);
    assert_int_equal(failed, 0);
}

/* A paged cache at the edge of the kernels' 32-bit row indices (common/paged_row_space.h):
 * rows of 16 bytes (row stride 8 elements: rows of d = 64 or 128 overlap, which inputs
 * may; d = 128 on Hopper is the producer warpgroup's copies), page 16, page stride 128
 * elements. num_pages = 2^27 puts the last row at index 2^31 - 1 (the
 * row-index path); one page more takes the 64-bit path. K and V are one 32 GiB buffer,
 * NaN except the rows of the pages the sequences use: page 0 and the last three, the
 * last one shared. Each sequence against the oracle on its gathered keys, causal; O's
 * spare rows stay poisoned. 1: passed, 0: failed, 2: skipped (device memory). */
static int run_paged_row_limit(long index, const char *name, int64_t num_pages, int consumer,
                               int64_t d)
{
    enum { N = 2, PAGES_PER_SEQ = 3 };
    const int64_t ps = 16, row_stride = 8, page_stride = ps * row_stride;
    const int64_t len_q[N] = {7, 3}, len_k[N] = {40, 17}, total_q = 10 + SPARE_ROWS;
    const int32_t last = (int32_t)(num_pages - 1);
    const int32_t table[N * PAGES_PER_SEQ] = {last, last - 2, last - 1, 0, last, -1};
    const int32_t cu_q[N + 1] = {0, 7, 10}, used[N] = {40, 17};
    /* the cache's elements, and the two regions the used pages' rows reach */
    const int64_t n_cache = (num_pages - 1) * page_stride + (ps - 1) * row_stride + d;
    const int64_t page_span = (ps - 1) * row_stride + d;
    const int64_t region0[2] = {0, page_span}, region1[2] = {(last - 2) * page_stride, n_cache};
    printf("case %ld: paged row limit, %s, d %" PRId64 ": num_pages=%" PRId64
           " (last row index %" PRId64 ")%s",
           index, name, d, num_pages, num_pages * ps - 1,
           consumer ? " (planned for 99 KiB)" : "");
    fa2_problem_t p;
    fa2_problem_init(&p, FA2_DTYPE_BF16, N, 7, 40, 1, 1, d);
    p.total_q = total_q;
    p.page_size = ps;
    p.num_pages = num_pages;
    p.pages_per_seq = PAGES_PER_SEQ;
    p.q_batch_stride = p.o_batch_stride = 0;
    p.k_batch_stride = p.v_batch_stride = page_stride;
    p.k_seq_stride = p.v_seq_stride = row_stride;
    p.causal = 1;
    const fa2_device_info_t device = consumer ? consumer_device_info(&g_info) : g_info;
    fa2_plan_t plan;
    fa2_status_t st = fa2_plan(&p, &device, &plan);
    if (st != FA2_SUCCESS) {
        printf(" : fa2_plan: %s (%s) FAIL\n", fa2_status_string(st), fa2_last_error());
        return 0;
    }
    printf(" [sm%d %dx%d]", (int)plan.fwd_arch, (int)plan.block_m, (int)plan.block_n);
    const size_t cache_bytes = 2 * (size_t)n_cache;
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess ||
        (double)free_b < (double)cache_bytes + (double)(1ull << 30)) {
        printf(" : SKIP (needs %.1f GiB + 1 GiB, %.1f GiB free)\n",
               (double)cache_bytes / (1ull << 30), (double)free_b / (1ull << 30));
        return 2;
    }
    oracle_rng_t rng = case_rng(g_seed, index);
    const int64_t n0 = region0[1] - region0[0], n1 = region1[1] - region1[0];
    const int64_t nq = total_q * d;
    float *r0 = malloc(sizeof(float) * (size_t)n0), *r1 = malloc(sizeof(float) * (size_t)n1),
          *qv = malloc(sizeof(float) * (size_t)nq), *lse = malloc(sizeof(float) * (size_t)total_q),
          *kseq = malloc(sizeof(float) * (size_t)(40 * d));
    uint16_t *b0 = malloc(2 * (size_t)n0), *b1 = malloc(2 * (size_t)n1),
             *qb = malloc(2 * (size_t)nq), *ob = malloc(2 * (size_t)nq);
    double *want = calloc((size_t)nq, sizeof(double)), *ref = calloc((size_t)nq, sizeof(double)),
           *got = calloc((size_t)nq, sizeof(double)), *want_lse = malloc(sizeof(double) * 8);
    assert_true(r0 && r1 && qv && lse && kseq && b0 && b1 && qb && ob && want && ref && got &&
                want_lse);
    fill_rounded(r0, b0, n0, &rng, FA2_DTYPE_BF16);
    fill_rounded(r1, b1, n1, &rng, FA2_DTYPE_BF16);
    fill_rounded(qv, qb, nq, &rng, FA2_DTYPE_BF16);
    uint16_t *dkv = device_buffer(NULL, cache_bytes); /* NaN: any other row read shows */
    assert_int_equal(cudaMemcpy(dkv + region0[0], b0, 2 * (size_t)n0, cudaMemcpyHostToDevice),
                     cudaSuccess);
    assert_int_equal(cudaMemcpy(dkv + region1[0], b1, 2 * (size_t)n1, cudaMemcpyHostToDevice),
                     cudaSuccess);
    void *dq = device_buffer(qb, 2 * (size_t)nq), *d_o = device_buffer(NULL, 2 * (size_t)nq);
    float *dlse = device_buffer(NULL, sizeof(float) * (size_t)total_q);
    int32_t *dcu_q = device_buffer(cu_q, sizeof cu_q), *dused = device_buffer(used, sizeof used),
            *dtable = device_buffer(table, sizeof table);
    void *ws = device_buffer(NULL, (size_t)plan.workspace_bytes);
    int pass = 0;
    if (!forward_and_download(&plan, dq, dkv, dkv, d_o, dlse, dcu_q, NULL, dused, dtable, ws,
                              NULL, NULL, ob, lse, nq, total_q))
        goto cleanup;
    int64_t nonfinite = 0, lse_bad = 0;
    for (int b = 0; b < N; ++b) {
        for (int64_t j = 0; j < len_k[b]; ++j) { /* the keys, gathered from the regions */
            const int64_t at =
                table[b * PAGES_PER_SEQ + j / ps] * page_stride + j % ps * row_stride;
            const float *src = at < region0[1] ? r0 + (at - region0[0]) : r1 + (at - region1[0]);
            memcpy(kseq + j * d, src, sizeof(float) * (size_t)d);
        }
        fa2_problem_t one;
        fa2_problem_init(&one, FA2_DTYPE_BF16, 1, len_q[b], len_k[b], 1, 1, d);
        one.causal = 1;
        judge_paged_sequence(&one, NULL, cu_q[b], total_q, qv, kseq, kseq, ob, lse, want, ref,
                             got, want_lse, &lse_bad, &nonfinite);
    }
    pass = paged_verdict(&plan, ws, ob, cu_q[N] * d, nq, got, want, ref, nonfinite, lse_bad);

cleanup:
    fflush(stdout);
    cudaFree(dq), cudaFree(dkv), cudaFree(d_o), cudaFree(dlse), cudaFree(ws);
    cudaFree(dcu_q), cudaFree(dused), cudaFree(dtable);
    free(r0), free(r1), free(qv), free(lse), free(kseq), free(b0), free(b1), free(qb), free(ob);
    free(want), free(ref), free(got), free(want_lse);
    return pass;
}

static void test_paged_row_limits(void **state)
{
    (void)state;
    const int64_t edge = INT64_C(1) << 27; /* pages of 16 rows: last row index 2^31 - 1 */
    long failed = 0, skipped = 0;
    for (int wide = 0; wide < 2; ++wide)                 /* d = 64, 128 */
        for (int consumer = 0; consumer < 2; ++consumer) /* both kernel families */
            for (int past = 0; past < 2; ++past) {
                const long index = 300 + 4 * wide + 2 * consumer + past;
                if (g_only >= 0 && g_only != index)
                    continue;
                const int r = run_paged_row_limit(
                    index, past ? "one page past: 64-bit offsets" : "row indices", edge + past,
                    consumer, wide ? 128 : 64);
                failed += r == 0, skipped += r == 2;
            }
    printf("%ld paged row-limit cases failed, %ld skipped (seed %" PRIu64 ")\n", failed,
           skipped, g_seed);
    assert_int_equal(failed, 0);
}

/* fa2_cache_write: new rows land in their slots' pages, bit for bit; padding slots (-1)
 * and slots past the cache are skipped; every other cache element stays poisoned. */
/* fa2_cache_write at its largest n_tokens, 2^31 - 1 (head_dim 8, one kv head: rows of
 * 16 bytes; k_new and v_new one buffer, 32 GiB, and the slots 8 GiB). Every slot is -1
 * (padding) except the last three tokens': their rows land in their slots, nothing else
 * in the caches is written. Skipped (reported so) without the device memory. */
static void test_cache_write_limit(void **state)
{
    (void)state;
    const int64_t d = 8, ps = 16, num_pages = 2, n = INT32_MAX, n_cache = num_pages * ps * d;
    fa2_problem_t p;
    fa2_problem_init(&p, FA2_DTYPE_BF16, 1, 1, num_pages * ps, 1, 1, d);
    p.total_q = 1;
    p.page_size = ps;
    p.num_pages = num_pages;
    p.pages_per_seq = num_pages;
    p.q_batch_stride = p.o_batch_stride = 0;
    p.k_batch_stride = p.v_batch_stride = ps * d;
    fa2_plan_t plan;
    assert_int_equal(fa2_plan(&p, &g_info, &plan), FA2_SUCCESS);
    const size_t new_bytes = (size_t)n * d * 2, slot_bytes = (size_t)n * 4;
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess ||
        (double)free_b < (double)(new_bytes + slot_bytes) + (double)(1ull << 30)) {
        printf("cache write limit: SKIP (needs %.1f GiB + 1 GiB, %.1f GiB free)\n",
               (double)(new_bytes + slot_bytes) / (1ull << 30), (double)free_b / (1ull << 30));
        skip();
    }
    const int32_t last_slots[3] = {0, 5, 2 * 16 - 1};
    uint16_t last_rows[3 * 8], kc[2 * 16 * 8];
    oracle_rng_t rng = case_rng(g_seed, 3100);
    for (int i = 0; i < 3 * 8; ++i)
        last_rows[i] = (uint16_t)(oracle_rng_next(&rng) & 0x7F7F);
    void *dnew = NULL, *dkc = device_buffer(NULL, 2 * (size_t)n_cache),
         *dvc = device_buffer(NULL, 2 * (size_t)n_cache);
    int32_t *dslots = NULL;
    assert_int_equal(cudaMalloc(&dnew, new_bytes), cudaSuccess);
    assert_int_equal(cudaMalloc((void **)&dslots, slot_bytes), cudaSuccess);
    assert_int_equal(cudaMemset(dnew, 0x11, new_bytes), cudaSuccess);
    assert_int_equal(cudaMemset(dslots, 0xFF, slot_bytes), cudaSuccess); /* -1: padding */
    assert_int_equal(cudaMemcpy((char *)dnew + new_bytes - sizeof last_rows, last_rows,
                                sizeof last_rows, cudaMemcpyHostToDevice),
                     cudaSuccess);
    assert_int_equal(cudaMemcpy(dslots + n - 3, last_slots, sizeof last_slots,
                                cudaMemcpyHostToDevice),
                     cudaSuccess);
    assert_int_equal(fa2_cache_write(&plan, dnew, dnew, n, d, dslots, dkc, dvc, NULL),
                     FA2_SUCCESS);
    assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
    int64_t wrong = 0, stray = 0;
    for (int cache = 0; cache < 2; ++cache) {
        assert_int_equal(cudaMemcpy(kc, cache ? dvc : dkc, sizeof kc, cudaMemcpyDeviceToHost),
                         cudaSuccess);
        for (int64_t row = 0; row < num_pages * ps; ++row) {
            int token = -1; /* which of the last three tokens writes this slot */
            for (int t = 0; t < 3; ++t)
                token = last_slots[t] == row ? t : token;
            for (int64_t x = 0; x < d; ++x) {
                const uint16_t got = kc[row * d + x];
                if (token >= 0)
                    wrong += got != last_rows[token * d + x];
                else
                    stray += got != 0xFFFFu;
            }
        }
    }
    printf("cache write limit: n_tokens=%" PRId64 ": wrong %" PRId64 ", written outside %" PRId64
           " %s\n", n, wrong, stray, wrong || stray ? "FAIL" : "PASS");
    cudaFree(dnew), cudaFree(dkc), cudaFree(dvc), cudaFree(dslots);
    assert_int_equal(wrong + stray, 0);
}

static void test_cache_write(void **state)
{
    (void)state;
    const int64_t hkv = 2, d = 128, ps = 16, num_pages = 9, n = 40, row = hkv * d + 8;
    fa2_problem_t p;
    fa2_problem_init(&p, FA2_DTYPE_BF16, 4, 8, num_pages * ps, 8, hkv, d);
    p.total_q = 32;
    p.page_size = ps;
    p.num_pages = num_pages;
    p.pages_per_seq = num_pages;
    p.q_batch_stride = p.o_batch_stride = 0;
    p.k_batch_stride = p.v_batch_stride = ps * hkv * d;
    fa2_plan_t plan;
    assert_int_equal(fa2_plan(&p, &g_info, &plan), FA2_SUCCESS);
    const int64_t n_cache = num_pages * ps * hkv * d, n_new = n * row;
    uint16_t *knew = malloc(2 * (size_t)n_new), *vnew = malloc(2 * (size_t)n_new),
             *kc = malloc(2 * (size_t)n_cache), *vc = malloc(2 * (size_t)n_cache);
    int32_t slots[40];
    assert_true(knew && vnew && kc && vc);
    oracle_rng_t rng = case_rng(g_seed, 3000);
    for (int64_t i = 0; i < n_new; ++i) {
        knew[i] = (uint16_t)(oracle_rng_next(&rng) & 0x7F7F);
        vnew[i] = (uint16_t)(oracle_rng_next(&rng) & 0x7F7F);
    }
    for (int t = 0; t < n; ++t) /* distinct slots, a few padding and out-of-range ones */
        slots[t] = t % 7 == 3 ? -1 : t % 11 == 5 ? (int32_t)(num_pages * ps + t)
                                                 : (int32_t)((t * 37) % (num_pages * ps));
    void *dk = device_buffer(knew, 2 * (size_t)n_new), *dv = device_buffer(vnew, 2 * (size_t)n_new),
         *dkc = device_buffer(NULL, 2 * (size_t)n_cache),
         *dvc = device_buffer(NULL, 2 * (size_t)n_cache);
    int32_t *dslots = device_buffer(slots, sizeof slots);
    assert_int_equal(fa2_cache_write(&plan, dk, dv, n, row, dslots, dkc, dvc, NULL),
                     FA2_SUCCESS);
    assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
    assert_int_equal(cudaMemcpy(kc, dkc, 2 * (size_t)n_cache, cudaMemcpyDeviceToHost),
                     cudaSuccess);
    assert_int_equal(cudaMemcpy(vc, dvc, 2 * (size_t)n_cache, cudaMemcpyDeviceToHost),
                     cudaSuccess);
    char *written = calloc((size_t)n_cache, 1);
    assert_true(written != NULL);
    int64_t wrong = 0, stray = 0;
    for (int t = 0; t < n; ++t) {
        if (slots[t] < 0 || slots[t] >= num_pages * ps)
            continue;
        const int64_t at = (int64_t)slots[t] * hkv * d; /* page stride = ps rows */
        for (int64_t x = 0; x < hkv * d; ++x) {
            wrong += kc[at + x] != knew[t * row + x] || vc[at + x] != vnew[t * row + x];
            written[at + x] = 1;
        }
    }
    for (int64_t i = 0; i < n_cache; ++i)
        stray += !written[i] && (kc[i] != 0xFFFFu || vc[i] != 0xFFFFu);
    printf("cache write: %d tokens, page %" PRId64 ": wrong %" PRId64 ", written outside %"
           PRId64 " %s\n", (int)n, ps, wrong, stray, wrong || stray ? "FAIL" : "PASS");
    cudaFree(dk), cudaFree(dv), cudaFree(dkc), cudaFree(dvc), cudaFree(dslots);
    free(knew), free(vnew), free(kc), free(vc), free(written);
    assert_int_equal(wrong + stray, 0);
}

/* One decode step of a paged engine, captured once in a CUDA graph (fa2_cache_write of
 * the step's new keys, then fa2_forward_varlen over the cache) and replayed three times
 * with new lengths, slots and page tables written into the same device arrays; after
 * each replay every sequence's output is compared with the oracle on its keys. */
static void test_graph_replay(void **state)
{
    (void)state;
    enum { kSeqs = 3, kPages = 40, kPerSeq = 12 };
    const int64_t hq = 4, hkv = 2, d = 64, ps = 16, tokens = kSeqs; /* one new key each */
    const int64_t n_cache = kPages * ps * hkv * d;
    fa2_problem_t p;
    fa2_problem_init(&p, FA2_DTYPE_BF16, kSeqs, 1, kPerSeq * ps, hq, hkv, d);
    p.total_q = kSeqs;
    p.page_size = ps;
    p.num_pages = kPages;
    p.pages_per_seq = kPerSeq;
    p.causal = 1;
    p.q_batch_stride = p.o_batch_stride = 0;
    p.k_batch_stride = p.v_batch_stride = ps * hkv * d;
    fa2_plan_t plan;
    assert_int_equal(fa2_plan(&p, &g_info, &plan), FA2_SUCCESS);
    oracle_rng_t rng = case_rng(g_seed, 4000);
    float *kv = malloc(sizeof(float) * (size_t)n_cache),
          *vv = malloc(sizeof(float) * (size_t)n_cache),
          *qv = malloc(sizeof(float) * (size_t)(kSeqs * hq * d)),
          *knew = malloc(sizeof(float) * (size_t)(tokens * hkv * d)),
          *vnew = malloc(sizeof(float) * (size_t)(tokens * hkv * d)),
          *kseq = malloc(sizeof(float) * (size_t)(kPerSeq * ps * hkv * d)),
          *vseq = malloc(sizeof(float) * (size_t)(kPerSeq * ps * hkv * d));
    uint16_t *kb = malloc(2 * (size_t)n_cache), *vb = malloc(2 * (size_t)n_cache),
             *qb = malloc(2 * (size_t)(kSeqs * hq * d)), *ob = malloc(2 * (size_t)(kSeqs * hq * d)),
             *knb = malloc(2 * (size_t)(tokens * hkv * d)),
             *vnb = malloc(2 * (size_t)(tokens * hkv * d));
    double *want = malloc(sizeof(double) * (size_t)(hq * d)), lse1[8];
    assert_true(kv && vv && qv && knew && vnew && kseq && vseq && kb && vb && qb && ob && knb &&
                vnb && want);
    fill_rounded(kv, kb, n_cache, &rng, FA2_DTYPE_BF16);
    fill_rounded(vv, vb, n_cache, &rng, FA2_DTYPE_BF16);
    void *dk = device_buffer(kb, 2 * (size_t)n_cache), *dv = device_buffer(vb, 2 * (size_t)n_cache),
         *dq = device_buffer(NULL, 2 * (size_t)(kSeqs * hq * d)),
         *d_o = device_buffer(NULL, 2 * (size_t)(kSeqs * hq * d)),
         *dkn = device_buffer(NULL, 2 * (size_t)(tokens * hkv * d)),
         *dvn = device_buffer(NULL, 2 * (size_t)(tokens * hkv * d));
    int32_t cu_q[kSeqs + 1] = {0, 1, 2, 3}, used[kSeqs], slots[kSeqs], table[kSeqs * kPerSeq];
    int32_t *dcu = device_buffer(cu_q, sizeof cu_q), *dused = device_buffer(NULL, sizeof used),
            *dslots = device_buffer(NULL, sizeof slots),
            *dtable = device_buffer(NULL, sizeof table);
    void *ws = device_buffer(NULL, (size_t)plan.workspace_bytes);
    cudaStream_t stream;
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    assert_int_equal(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
    assert_int_equal(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
    const fa2_status_t w =
        fa2_cache_write(&plan, dkn, dvn, tokens, hkv * d, dslots, dk, dv, stream);
    const fa2_status_t f =
        fa2_forward_varlen(&plan, dq, dk, dv, d_o, NULL, dcu, NULL, dused, dtable, ws,
                           (size_t)plan.workspace_bytes, stream);
    assert_int_equal(cudaStreamEndCapture(stream, &graph), cudaSuccess);
    assert_int_equal(w, FA2_SUCCESS);
    assert_int_equal(f, FA2_SUCCESS);
    assert_int_equal(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    long failed = 0;
    for (int round = 0; round < 4; ++round) {
        /* round 2: sequence 1's first page id out of range; its rows must stay poisoned,
         * its record say so, and round 3's (valid again) be clean */
        const int hostile = round == 2;
        /* new lengths (the new key included), pages (a shuffled deal) and slots */
        int32_t next = (int32_t)(round * 7 % kPages);
        for (int b = 0; b < kSeqs; ++b) {
            used[b] = (int32_t)(1 + (oracle_rng_next(&rng) % (uint64_t)(kPerSeq * ps - 1)));
            for (int j = 0; j < kPerSeq; ++j) {
                table[b * kPerSeq + j] = next;
                next = (next + 13) % kPages;
            }
            const int32_t last = used[b] - 1; /* the new key's position */
            slots[b] = table[b * kPerSeq + last / ps] * (int32_t)ps + last % ps;
        }
        if (hostile)
            table[1 * kPerSeq] = kPages + 5;
        fill_rounded(qv, qb, kSeqs * hq * d, &rng, FA2_DTYPE_BF16);
        fill_rounded(knew, knb, tokens * hkv * d, &rng, FA2_DTYPE_BF16);
        fill_rounded(vnew, vnb, tokens * hkv * d, &rng, FA2_DTYPE_BF16);
        assert_int_equal(cudaMemcpy(dused, used, sizeof used, cudaMemcpyHostToDevice), cudaSuccess);
        assert_int_equal(cudaMemcpy(dslots, slots, sizeof slots, cudaMemcpyHostToDevice),
                         cudaSuccess);
        assert_int_equal(cudaMemcpy(dtable, table, sizeof table, cudaMemcpyHostToDevice),
                         cudaSuccess);
        assert_int_equal(cudaMemcpy(dq, qb, 2 * (size_t)(kSeqs * hq * d), cudaMemcpyHostToDevice),
                         cudaSuccess);
        assert_int_equal(
            cudaMemcpy(dkn, knb, 2 * (size_t)(tokens * hkv * d), cudaMemcpyHostToDevice),
            cudaSuccess);
        assert_int_equal(
            cudaMemcpy(dvn, vnb, 2 * (size_t)(tokens * hkv * d), cudaMemcpyHostToDevice),
            cudaSuccess);
        assert_int_equal(cudaMemset(d_o, 0xFF, 2 * (size_t)(kSeqs * hq * d)), cudaSuccess);
        assert_int_equal(cudaGraphLaunch(exec, stream), cudaSuccess);
        assert_int_equal(cudaStreamSynchronize(stream), cudaSuccess);
        assert_int_equal(cudaMemcpy(ob, d_o, 2 * (size_t)(kSeqs * hq * d), cudaMemcpyDeviceToHost),
                         cudaSuccess);
        /* the host's copy of the cache, with this step's keys written */
        for (int b = 0; b < kSeqs; ++b) {
            memcpy(kv + (int64_t)slots[b] * hkv * d, knew + b * hkv * d,
                   sizeof(float) * (size_t)(hkv * d));
            memcpy(vv + (int64_t)slots[b] * hkv * d, vnew + b * hkv * d,
                   sizeof(float) * (size_t)(hkv * d));
        }
        double worst = 0.0;
        int64_t poison_lost = 0;
        for (int b = 0; b < kSeqs; ++b) {
            if (hostile && b == 1) {
                for (int64_t x = 0; x < hq * d; ++x)
                    poison_lost += ob[b * hq * d + x] != 0xFFFFu;
                continue;
            }
            for (int64_t j = 0; j < used[b]; ++j) {
                const int64_t at = ((int64_t)table[b * kPerSeq + j / ps] * ps + j % ps) * hkv * d;
                memcpy(kseq + j * hkv * d, kv + at, sizeof(float) * (size_t)(hkv * d));
                memcpy(vseq + j * hkv * d, vv + at, sizeof(float) * (size_t)(hkv * d));
            }
            fa2_problem_t one;
            fa2_problem_init(&one, FA2_DTYPE_BF16, 1, 1, used[b], hq, hkv, d);
            one.causal = 1;
            assert_int_equal(oracle_forward(&one, qv + b * hq * d, kseq, vseq, want, lse1), 0);
            double num = 0.0, den = 0.0;
            for (int64_t x = 0; x < hq * d; ++x) {
                const double g = oracle_float_from_bits(ob[b * hq * d + x], FA2_DTYPE_BF16);
                num += (g - want[x]) * (g - want[x]);
                den += want[x] * want[x];
            }
            const double e = isfinite(num) ? sqrt(num / fmax(den, 1e-300)) : INFINITY;
            worst = e > worst ? e : worst;
        }
        printf("graph replay %d: lengths %d %d %d%s", round, (int)used[0], (int)used[1],
               (int)used[2], hostile ? ", sequence 1's page id out of range" : "");
        const int records = records_ok(&plan, ws, hostile ? 1 : -1, FA2_VARLEN_PAGE_ID);
        const int ok = worst <= FLOOR_BF16 && poison_lost == 0 && records;
        failed += !ok;
        printf(", worst rel. error %.2e, written_outside=%" PRId64 " %s\n", worst, poison_lost,
               ok ? "PASS" : "FAIL");
    }
    cudaGraphExecDestroy(exec), cudaGraphDestroy(graph), cudaStreamDestroy(stream);
    cudaFree(dk), cudaFree(dv), cudaFree(dq), cudaFree(d_o), cudaFree(dkn), cudaFree(dvn);
    cudaFree(dcu), cudaFree(dused), cudaFree(dslots), cudaFree(dtable), cudaFree(ws);
    free(kv), free(vv), free(qv), free(knew), free(vnew), free(kseq), free(vseq);
    free(kb), free(vb), free(qb), free(ob), free(knb), free(vnb), free(want);
    assert_int_equal(failed, 0);
}

static void test_varlen_matches_oracle(void **state)
{
    (void)state;
    long failed = 0, run = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i)
        if (g_only < 0 || g_only == (long)i)
            failed += !run_case((long)i, &cases[i]), ++run;
    printf("%ld of %ld cases failed (seed %" PRIu64 ")\n", failed, run, g_seed);
    assert_int_equal(failed, 0);
}

int main(int argc, char **argv)
{
    const int setup = gpu_test_setup("varlen", &g_info, &g_seed, &g_only);
    if (setup != 0 || (argc > 1 && strcmp(argv[1], "--probe") == 0))
        return setup; /* --probe: a device is there (for the sanitizer runner) */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_varlen_matches_oracle),
        cmocka_unit_test(test_paged_matches_oracle),
        cmocka_unit_test(test_paged_row_limits),
        cmocka_unit_test(test_cache_write),
        cmocka_unit_test(test_cache_write_limit),
        cmocka_unit_test(test_graph_replay),
        cmocka_unit_test(test_packed_limits),
        cmocka_unit_test(test_hostile_metadata),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
