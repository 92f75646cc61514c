/* libFuzzer harness over libfa2's host API: fa2_plan (validation + planner), the
 * argument checks of fa2_forward / fa2_backward, and fa2_device_info_query, on
 * arbitrary bytes. Built with clang -fsanitize=fuzzer,address,undefined against the
 * real host sources (src/) and the fuzz-only cuda_shim.c (no GPU, no CUDA library).
 *
 * Input layout (missing bytes read as 0):
 *   [0]      flags: bit0 fix problem.struct_size, bit1 fix device.struct_size,
 *                   bit2 XOR the next bytes onto a valid problem/device instead of
 *                        taking them raw (all-zero bytes = a valid H200 problem; with
 *                        a nonzero total_q, a packed one: batch strides 0),
 *                   bit3 the launchers fail (cudaErrorInvalidValue),
 *                   bit4 cudaGetDeviceCount fails, bit5 cudaDeviceGetAttribute fails,
 *                   bit6 cudaGetDevice fails, bit7 the current device (attributes) is the
 *                   one the plan was made for
 *   then     sizeof(fa2_problem_t) bytes, sizeof(fa2_device_info_t) bytes,
 *            15 pointer bytes (q k v o lse | q k v o d_o lse dq dk dv ws: 0xFF = NULL,
 *            else a fake address 0x100000*(i+1) + byte % 32),
 *            8 bytes workspace_bytes, 4 bytes device count, 5 x 4 bytes attributes (the
 *            device query's and the current device's), 8 x (position, XOR) byte pairs
 *            that edit a copy of the plan.
 *
 * Invariants (abort on violation, so libFuzzer reports and saves the input):
 *  - fa2_plan: on failure the poisoned plan is byte-identical and the message is not
 *    empty; on success the message is empty and the plan fits the device it was given
 *    (smem_bytes <= smem_per_block_optin), block_m and block_n are multiples of 16,
 *    grid_blocks == batch * heads_q * ceil(seqlen_q / block_m) <= 2^31-1 (the decode
 *    kernel: batch * heads_kv * splits, only for its problems), the problem
 *    is copied unchanged (scale resolved), the backward fields agree with
 *    bwd_supported / bwd_status, and fwd_arch / bwd_arch are 80 or 90, 90 only on a
 *    cc 9.0 device (the backward in both modes), exactly for the buckets of
 *    the Hopper tables (kernels/sm90/fwd_sm90_tiles.h, bwd_sm90_tiles.h) when the build
 *    defines FA2_WITH_SM90A (tests/fuzz/CMakeLists.txt does), never otherwise.
 *  - fa2_forward / fa2_forward_varlen / fa2_backward on a successful plan (a packed one
 *    included: forward only, through fa2_forward_varlen): the status an independent model
 *    of the documented checks predicts (overlaps in 128-bit arithmetic, the current
 *    device against the plan's kernels); the launcher called exactly when it returns
 *    FA2_SUCCESS (or FA2_ERROR_CUDA), with parameters that match the plan (kernel_family
 *    and the clamped windows included).
 *  - fa2_varlen_check on the workspace pointer: the modelled status, and the failing
 *    sequence and check the shim's records hold (two input bytes) read back.
 *  - fa2_combine on a fuzzed fa2_combine_problem_t (a flags byte and the struct's
 *    bytes at the end of the input; bit0: XOR onto a valid problem, bit1: struct_size
 *    set): the modelled status, and the launcher's parameters.
 *  - an edited copy of the plan: refused (FA2_ERROR_BAD_PLAN / STRUCT_SIZE) unless it is
 *    exactly fa2_plan's own; whatever reaches a launcher passes every plan invariant.
 *  - fa2_device_info_query: info untouched on failure, the fake's values on success. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sm90/bwd_sm90_tiles.h"
#include "common/bwd_rows.h"
#include "sm80/bwd_tiles.h"
#include "fa2.h"
#include "fuzz_shim.h"
#include "sm90/fwd_sm90_tiles.h"

#define CHECK(cond)                                                                       \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            fprintf(stderr, "fuzz_plan: invariant violated at %s:%d: %s (last error \"%s\")\n", \
                    __FILE__, __LINE__, #cond, fa2_last_error());                         \
            abort();                                                                      \
        }                                                                                 \
    } while (0)

typedef struct reader_t {
    const uint8_t *data;
    size_t size, at;
} reader_t;

static void take(reader_t *r, void *out, size_t n)
{
    memset(out, 0, n);
    if (r->at < r->size) {
        size_t k = r->size - r->at < n ? r->size - r->at : n;
        memcpy(out, r->data + r->at, k);
    }
    r->at += n;
}

static void xor_bytes(void *dst, const void *src, size_t n)
{
    unsigned char *d = dst;
    const unsigned char *s = src;
    for (size_t i = 0; i < n; ++i)
        d[i] ^= s[i];
}

static int64_t ceil_div(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

/* ---- fa2_plan ----------------------------------------------------------------------- */

/* 1 when the Hopper forward table has a row for `bucket`. */
static int in_fwd_sm90_table(int64_t bucket)
{
    int found = 0;
#define X(b, wg, bn) found |= (b) == bucket;
    FA2_FWD_SM90_TILES(X)
#undef X
    return found;
}

/* 1 when the Hopper forward's TMA can read the problem's K and V, modelled
 * here apart from the library: every K/V dimension of more than one index steps a
 * stride in (0, 2^39) elements; a paged cache always (pages it cannot take are copied
 * otherwise). */
static int kv_tma_model(const fa2_problem_t *p)
{
    if (p->page_size)
        return 1;
    const int64_t extent[3] = {p->total_q ? 1 : p->batch, p->total_q ? p->total_k : p->seqlen_k,
                               p->heads_kv};
    const int64_t stride[6] = {p->k_batch_stride, p->k_seq_stride, p->k_head_stride,
                               p->v_batch_stride, p->v_seq_stride, p->v_head_stride};
    for (int i = 0; i < 6; ++i)
        if (extent[i % 3] > 1 && !(stride[i] > 0 && stride[i] < ((int64_t)1 << 39)))
            return 0;
    return 1;
}

/* 1 when the Hopper dK/dV table has a row for `bucket` (rows are (d, warpgroups,
 * block_m[, more]): only the first column is read). */
static int in_bwd_sm90_table(int64_t bucket)
{
    int found = 0;
#define X(b, ...) found |= (b) == bucket;
    FA2_BWD_SM90_TILES(X)
#undef X
    return found;
}

/* The tensors as laid out: a packed batch (total_q >= 1) is one sequence of total_q /
 * total_k rows. */
static int64_t layout_batch(const fa2_problem_t *q)
{
    return q->total_q ? 1 : q->batch;
}

static int64_t rows_q(const fa2_problem_t *q)
{
    return q->total_q ? q->total_q : q->seqlen_q;
}

static int64_t rows_k(const fa2_problem_t *q)
{
    return !q->total_q ? q->seqlen_k : q->page_size ? q->page_size : q->total_k;
}

/* K and V's outer dimension: the batch, 1 for packed rows, the pages of a paged cache. */
static int64_t batch_k(const fa2_problem_t *q)
{
    return q->total_q && q->page_size ? q->num_pages : layout_batch(q);
}

static void check_plan(const fa2_problem_t *pr, const fa2_device_info_t *dev,
                       const fa2_plan_t *pl)
{
    const fa2_problem_t *q = &pl->problem;
    CHECK(pl->struct_size == sizeof(fa2_plan_t));
    CHECK(fa2_last_error()[0] == '\0');
    CHECK(dev->cc_major >= 8);
    /* the problem as given, scale resolved */
    CHECK(q->struct_size == sizeof(fa2_problem_t));
    CHECK(q->dtype == pr->dtype && q->causal == pr->causal && q->batch == pr->batch);
    CHECK(q->seqlen_q == pr->seqlen_q && q->seqlen_k == pr->seqlen_k);
    CHECK(q->heads_q == pr->heads_q && q->heads_kv == pr->heads_kv);
    CHECK(q->head_dim == pr->head_dim && q->window_left == pr->window_left &&
          q->window_right == pr->window_right);
    CHECK(memcmp(&q->q_batch_stride, &pr->q_batch_stride, 12 * sizeof(int64_t)) == 0);
    CHECK(q->deterministic == pr->deterministic);
    CHECK(q->softmax_scale > 0.0f && q->softmax_scale <= FA2_MAX_SOFTMAX_SCALE);
    CHECK(q->reserved0 == 0 && q->reserved1 == 0);
    CHECK(q->total_q == pr->total_q && q->total_k == pr->total_k);
    CHECK(pl->device.struct_size == sizeof(fa2_device_info_t) &&
          memcmp((const char *)&pl->device + sizeof(size_t), (const char *)dev + sizeof(size_t),
                 sizeof(fa2_device_info_t) - sizeof(size_t)) == 0);
    CHECK(pr->softmax_scale == 0.0f || q->softmax_scale == pr->softmax_scale);
    /* accepted ranges */
    CHECK(q->dtype == FA2_DTYPE_FP16 || q->dtype == FA2_DTYPE_BF16);
    CHECK(q->batch >= 1 && q->batch <= INT32_MAX);
    CHECK(q->seqlen_q >= 1 && q->seqlen_q <= FA2_MAX_SEQLEN);
    CHECK(q->seqlen_k >= 0 && q->seqlen_k <= FA2_MAX_SEQLEN);
    CHECK(q->heads_q >= 1 && q->heads_q <= INT32_MAX);
    CHECK(q->heads_kv >= 1 && q->heads_q % q->heads_kv == 0);
    CHECK(q->head_dim >= 8 && q->head_dim <= 256 && q->head_dim % 8 == 0);
    CHECK(q->causal == 0 || q->causal == 1);
    CHECK(q->window_left >= -1 && q->window_left <= INT32_MAX);
    CHECK(q->window_right >= -1 && q->window_right <= INT32_MAX);
    CHECK(!q->causal || q->window_right <= 0);
    CHECK(q->deterministic == 0 || q->deterministic == 1);
    for (int i = 0; i < 12; ++i) {
        int64_t s;
        memcpy(&s, (const char *)&q->q_batch_stride + i * sizeof(int64_t), sizeof s);
        CHECK(s >= 0 && s % 8 == 0);
    }
    /* a packed batch: rows within int32, at least the longest sequence, batch strides 0 */
    CHECK(q->page_size == pr->page_size && q->num_pages == pr->num_pages &&
          q->pages_per_seq == pr->pages_per_seq);
    if (q->total_q && q->page_size) {
        CHECK(q->total_q >= q->seqlen_q && q->total_q <= INT32_MAX && q->total_k == 0);
        CHECK(q->page_size >= 1 && q->page_size <= FA2_MAX_SEQLEN);
        CHECK(q->num_pages >= 1 && q->num_pages <= INT32_MAX);
        CHECK(q->pages_per_seq * q->page_size >= q->seqlen_k && q->pages_per_seq <= INT32_MAX);
        CHECK(!q->q_batch_stride && !q->o_batch_stride);
    } else if (q->total_q) {
        CHECK(q->total_q >= q->seqlen_q && q->total_q <= INT32_MAX);
        CHECK(q->total_k >= q->seqlen_k && q->total_k <= INT32_MAX);
        CHECK(!q->q_batch_stride && !q->k_batch_stride && !q->v_batch_stride &&
              !q->o_batch_stride);
        CHECK(!q->num_pages && !q->pages_per_seq);
    } else {
        CHECK(q->total_k == 0 && !q->page_size && !q->num_pages && !q->pages_per_seq);
    }
    /* O repeats no address: at least, no zero stride over a dimension of extent > 1 */
    CHECK(layout_batch(q) == 1 || q->o_batch_stride > 0);
    CHECK(rows_q(q) == 1 || q->o_seq_stride > 0);
    CHECK(q->heads_q == 1 || q->o_head_stride > 0);
    /* forward tiles fit the device given */
    CHECK(pl->head_dim_bucket >= q->head_dim && pl->head_dim_bucket <= 256);
    CHECK(pl->block_m > 0 && pl->block_m % 16 == 0);
    CHECK(pl->block_n > 0 && pl->block_n % 16 == 0);
    CHECK(pl->warps >= 1 && pl->warps <= 32);
    CHECK(pl->smem_bytes > 0 && pl->smem_bytes <= dev->smem_per_block_optin);
    /* the decode kernel: only for <= 16 query tokens, and splits only up to max_splits;
     * its grid is one block per (sequence, kv head, split, row tile of 16) */
    CHECK(pl->splits >= 0);
    CHECK((pl->fwd_kernel == FA2_FWD_KERNEL_DECODE) == (pl->splits > 0));
    CHECK(pl->fwd_kernel >= FA2_FWD_KERNEL_MMA && pl->fwd_kernel <= FA2_FWD_KERNEL_DECODE);
    CHECK((pl->fwd_arch == 90) == (pl->fwd_kernel >= FA2_FWD_KERNEL_WGMMA &&
                                   pl->fwd_kernel <= FA2_FWD_KERNEL_WGMMA_PRODUCER) ||
          pl->fwd_kernel == FA2_FWD_KERNEL_DECODE);
    CHECK((pl->page_box_rows > 0) == (pl->fwd_kernel == FA2_FWD_KERNEL_WGMMA_PAGED_TMA));
    CHECK(pl->fwd_scores == FA2_SCORES_PLAIN || q->softcap != 0.0f || q->alibi);
    CHECK((pl->split_o_offset > 0) == (pl->splits > 1));
    CHECK(pl->split_o_offset <= pl->workspace_bytes);
    CHECK(!pl->splits || q->seqlen_q <= 16);
    CHECK(pl->splits <= (q->max_splits > 1 ? q->max_splits : 1));
    if (pl->splits)
        CHECK(pl->grid_blocks == q->batch * q->heads_kv * pl->splits *
                                     ((q->heads_q / q->heads_kv * q->seqlen_q + 15) / 16));
    else
        CHECK(pl->grid_blocks == q->batch * q->heads_q * ceil_div(q->seqlen_q, pl->block_m));
    CHECK(pl->grid_blocks >= 1 && pl->grid_blocks <= INT32_MAX);
    if (pl->splits <= 1)
        CHECK(pl->workspace_bytes == (q->total_q ? 4 * q->batch : 0));
    else /* the records, then each split's LSE and fp32 O per row and query head */
        CHECK(pl->workspace_bytes >= (q->total_q ? 4 * q->batch : 0) +
                                         (int64_t)pl->splits *
                                             (q->total_q ? q->total_q : q->batch * q->seqlen_q) *
                                             q->heads_q * (q->head_dim + 1) * 4);
    CHECK(pl->block_m_rule >= FA2_RULE_SEED_SRAM && pl->block_m_rule <= FA2_RULE_KERNEL_TILE);
    CHECK(pl->block_n_rule >= FA2_RULE_SEED_SRAM && pl->block_n_rule <= FA2_RULE_KERNEL_TILE);
    CHECK(pl->sram_elements == dev->smem_per_block_optin / 2);
    CHECK(pl->seed_bc <= pl->seed_br && pl->seed_bc <= pl->head_dim_bucket);
    /* backward: consistent with bwd_supported */
    CHECK(pl->bwd_supported == 0 || pl->bwd_supported == 1);
    CHECK(pl->bwd_supported ? pl->bwd_status == FA2_SUCCESS
                            : (pl->bwd_status == FA2_ERROR_SHARED_MEMORY ||
                               pl->bwd_status == FA2_ERROR_INVALID_SIZE ||
                               pl->bwd_status == FA2_ERROR_SIZE_OVERFLOW ||
                               pl->bwd_status == FA2_ERROR_OVERLAP ||
                               pl->bwd_status == FA2_ERROR_UNSUPPORTED));
    /* a paged cache: forward only */
    CHECK((pl->bwd_status == FA2_ERROR_UNSUPPORTED) == (q->page_size != 0));
    CHECK(pl->bwd_status != FA2_ERROR_SHARED_MEMORY ||
          pl->bwd_smem_bytes > dev->smem_per_block_optin);
    /* a dQ kernel runs (no atomics, no accumulator): deterministic mode, and the Hopper
     * split rows in both modes */
    const int dq_kernel = q->deterministic ||
                          (pl->bwd_arch == 90 && fa2_bwd_sm90_split(pl->head_dim_bucket));
    /* at least D = rowsum(dO * O), fp32 per query row (plus scratch the kernels may add) */
    CHECK(pl->bwd_workspace_bytes >= 0);
    if (pl->bwd_supported) {
        CHECK(pl->bwd_workspace_bytes >= layout_batch(q) * q->heads_q * rows_q(q) * 4);
        CHECK(pl->bwd_block_n > 0 && pl->bwd_block_n % 16 == 0);
        CHECK(pl->bwd_block_m > 0 && pl->bwd_block_m % 16 == 0);
        CHECK(pl->bwd_dq_block_m > 0 && pl->bwd_dq_block_m % 16 == 0);
        CHECK(pl->bwd_dq_block_n > 0 && pl->bwd_dq_block_n % 16 == 0);
        CHECK(pl->bwd_smem_bytes > 0 && pl->bwd_smem_bytes <= dev->smem_per_block_optin);
        CHECK(!dq_kernel ||
              ceil_div(q->seqlen_q, pl->bwd_dq_block_m) * q->heads_q * q->batch <= INT32_MAX);
        /* D, padded to 256 bytes, then the fp32 dQ accumulator when dQ goes by atomics */
        {
            const int64_t d_bytes = layout_batch(q) * q->heads_q * rows_q(q) * 4;
            CHECK(pl->bwd_workspace_bytes ==
                  (d_bytes + 255) / 256 * 256 + (dq_kernel ? 0 : d_bytes * q->head_dim));
        }
        CHECK(ceil_div(q->seqlen_k, pl->bwd_block_n) * q->heads_kv * q->batch <= INT32_MAX);
        CHECK(fa2_bwd_row_kernel_blocks(layout_batch(q) * q->heads_q * rows_q(q), q->head_dim) <=
              INT32_MAX);
    }
    /* !bwd_supported: fa2_backward must refuse the plan (fuzz_backward checks it) */

    /* kernel families: 90 = Hopper wgmma kernels, 80 = mma.sync kernels */
    {
        const int hopper = dev->cc_major == 9 && dev->cc_minor == 0;
        CHECK(pl->fwd_arch == 80 || pl->fwd_arch == 90);
        CHECK(pl->bwd_arch == 80 || pl->bwd_arch == 90);
        CHECK(pl->fwd_arch == 80 || hopper);
        CHECK(pl->bwd_arch == 80 || hopper);
#if defined(FA2_WITH_SM90A)
        CHECK((pl->fwd_arch == 90) == (hopper && in_fwd_sm90_table(pl->head_dim_bucket) &&
                                       kv_tma_model(&pl->problem)));
        CHECK((pl->bwd_arch == 90) == (hopper && in_bwd_sm90_table(pl->head_dim_bucket)));
#else
        CHECK(pl->fwd_arch == 80 && pl->bwd_arch == 80);
        (void)in_fwd_sm90_table;
        (void)kv_tma_model;
        (void)in_bwd_sm90_table;
#endif
        /* Hopper tiles: 64 rows per warpgroup (wgmma's M), 4 warps per warpgroup; the
         * producer layout (d = 128: a paged cache, or a dense batch of more than 64 rows,
         * softcap off or bounding the scores) has one more warpgroup, its copies' */
        if (pl->fwd_arch == 90) {
            const int producer = pl->warps == pl->block_m / 16 + 4;
            CHECK(pl->block_m % 64 == 0 && (pl->warps == pl->block_m / 16 || producer));
            CHECK(!producer || (pl->head_dim_bucket == 128 && pl->block_m == 128 &&
                                (q->page_size != 0 || (q->total_q == 0 && q->seqlen_q > 64))));
        }
        if (pl->bwd_arch == 90)
            CHECK(pl->bwd_block_n % 64 == 0 && pl->bwd_block_m % 64 == 0);
    }
}

/* ---- fa2_forward / fa2_backward against a model of their documented checks ---------- */

static void *fake_ptr(uint8_t b, int i)
{
    return b == 0xFF ? NULL : (void *)(uintptr_t)(0x100000u * (uintptr_t)(i + 1) + b % 32u);
}

static int misaligned(const void *p, uintptr_t a)
{
    return (uintptr_t)p % a != 0;
}

static void check_fwd_params(const fa2_plan_t *pl, const fa2_params_t *p)
{
    const fa2_problem_t *q = &pl->problem;
    CHECK(p->batch == q->batch && p->heads_q == q->heads_q && p->heads_kv == q->heads_kv);
    CHECK(p->seqlen_q == q->seqlen_q && p->seqlen_k == q->seqlen_k);
    CHECK(p->head_dim == q->head_dim && p->head_dim_bucket == pl->head_dim_bucket);
    CHECK(p->dtype == q->dtype);
    /* a window past every key runs as -1 (unbounded) */
    CHECK(p->window_left == (q->window_left >= q->seqlen_k ? -1 : q->window_left));
    {
        const int64_t right = q->causal ? 0 : q->window_right;
        CHECK(p->window_right == (right >= q->seqlen_q ? -1 : right));
    }
    CHECK(p->window_left < 0 || (int64_t)p->window_left < q->seqlen_k);
    CHECK(p->window_right < 0 || (int64_t)p->window_right < q->seqlen_q);
    CHECK(p->softmax_scale == q->softmax_scale);
    CHECK(memcmp(&p->q_batch_stride, &q->q_batch_stride, 12 * sizeof(int64_t)) == 0);
    CHECK(p->total_q == q->total_q && p->total_k == q->total_k);
    CHECK(p->stats_batch_stride == (q->total_q ? 0 : q->heads_q * q->seqlen_q));
    CHECK(p->stats_head_stride == (q->total_q ? q->total_q : q->seqlen_q));
    CHECK(p->page_size == q->page_size && p->num_pages == q->num_pages &&
          p->pages_per_seq == q->pages_per_seq);
    /* the score variants: no tensors through these entry points */
    CHECK(p->softcap == q->softcap && !p->alibi_slopes && !p->sinks);
}

/* [begin, end) of a tensor, in 128-bit arithmetic (an independent model of the
 * library's spans); empty when a size is 0 or the pointer is NULL. */
typedef struct span_t {
    __int128 begin, end;
} span_t;

static span_t span(const void *ptr, int64_t b, int64_t s, int64_t h, int64_t d, int64_t bs,
                   int64_t ss, int64_t hs, int64_t elem)
{
    span_t r = {(__int128)(uintptr_t)ptr, (__int128)(uintptr_t)ptr};
    if (ptr && b > 0 && s > 0 && h > 0)
        r.end += ((__int128)(b - 1) * bs + (__int128)(s - 1) * ss + (__int128)(h - 1) * hs + d) *
                 elem;
    return r;
}

static int spans_meet(span_t a, span_t b)
{
    return a.begin < a.end && b.begin < b.end && a.begin < b.end && b.begin < a.end;
}

/* 1 when an output meets another output or an input. */
static int any_overlap(const span_t *out, int n_out, const span_t *in, int n_in)
{
    for (int i = 0; i < n_out; ++i) {
        for (int j = i + 1; j < n_out; ++j)
            if (spans_meet(out[i], out[j]))
                return 1;
        for (int j = 0; j < n_in; ++j)
            if (spans_meet(out[i], in[j]))
                return 1;
    }
    return 0;
}

#define SPAN_Q(p, q) span(p, layout_batch(q), rows_q(q), q->heads_q, q->head_dim, q->q_batch_stride, q->q_seq_stride, q->q_head_stride, 2)
#define SPAN_K(p, q) span(p, batch_k(q), rows_k(q), q->heads_kv, q->head_dim, q->k_batch_stride, q->k_seq_stride, q->k_head_stride, 2)
#define SPAN_V(p, q) span(p, batch_k(q), rows_k(q), q->heads_kv, q->head_dim, q->v_batch_stride, q->v_seq_stride, q->v_head_stride, 2)
#define SPAN_O(p, q) span(p, layout_batch(q), rows_q(q), q->heads_q, q->head_dim, q->o_batch_stride, q->o_seq_stride, q->o_head_stride, 2)
#define SPAN_LSE(p, q) span(p, 1, layout_batch(q) * q->heads_q * rows_q(q), 1, 1, 0, 1, 0, 4)

/* The status of the current-device check: the shim's device (its attributes) must run
 * the plan's kernels. */
static fa2_status_t device_status(const fa2_plan_t *pl, int backward)
{
    const int major = g_shim.attr[0], minor = g_shim.attr[1], optin = g_shim.attr[3];
    const int hopper = (backward ? pl->bwd_arch : pl->fwd_arch) == 90;
    const int64_t smem = backward ? pl->bwd_smem_bytes : pl->smem_bytes;
    if (g_shim.device_error)
        return FA2_ERROR_NO_DEVICE;
    if (g_shim.attr_error)
        return FA2_ERROR_CUDA;
    if (major < 8 || (hopper && !(major == 9 && minor == 0)) || smem > optin)
        return FA2_ERROR_DEVICE_MISMATCH;
    return FA2_SUCCESS;
}

/* fa2_forward (varlen = 0) or fa2_forward_varlen (varlen = 1; the offsets from pb[5..7]:
 * cu_seqlens_q, cu_seqlens_k, seqused_k, 4-byte aligned, the first two required). Each
 * refuses the other's plans (dense / packed). */
static void fuzz_forward(const fa2_plan_t *pl, const uint8_t *pb, uint64_t ws_bytes,
                         int launch_fails, int varlen)
{
    const fa2_problem_t *pr = &pl->problem;
    void *q = fake_ptr(pb[0], 0), *k = fake_ptr(pb[1], 1), *v = fake_ptr(pb[2], 2),
         *o = fake_ptr(pb[3], 3);
    float *lse = fake_ptr(pb[4], 4);
    const int32_t *cu_q = varlen ? fake_ptr(pb[5], 5) : NULL,
                  *cu_k = varlen ? fake_ptr(pb[6], 6) : NULL,
                  *used = varlen ? fake_ptr(pb[7], 7) : NULL,
                  *pages = varlen ? fake_ptr(pb[8], 8) : NULL;
    void *ws = fake_ptr(pb[14], 14);
    const int paged = pr->page_size != 0;
    fa2_status_t want = FA2_SUCCESS, got;
    int launches = 0;
    if (!q || !k || !v || !o || (varlen && !cu_q))
        want = FA2_ERROR_NULL_POINTER;
    else if (!varlen != !pr->total_q)
        want = FA2_ERROR_UNSUPPORTED; /* the other entry point's plan */
    else if (varlen && (paged ? !pages || !used : !cu_k))
        want = FA2_ERROR_NULL_POINTER;
    else if (varlen && !paged && pages)
        want = FA2_ERROR_UNSUPPORTED; /* a page table for a plan without pages */
    else if (misaligned(cu_q, 4) || (!paged && misaligned(cu_k, 4)) || misaligned(used, 4) ||
             misaligned(pages, 4))
        want = FA2_ERROR_MISALIGNED;
    else if (pr->alibi || pr->sinks)
        want = FA2_ERROR_UNSUPPORTED; /* their tensors go through fa2_forward_with */
    else if (misaligned(q, 16) || misaligned(k, 16) || misaligned(v, 16) ||
             misaligned(o, 16) || misaligned(lse, 4))
        want = FA2_ERROR_MISALIGNED;
    else if (ws_bytes < (uint64_t)pl->workspace_bytes || (pl->workspace_bytes > 0 && !ws))
        want = FA2_ERROR_WORKSPACE;
    else if (misaligned(ws, 4))
        want = FA2_ERROR_MISALIGNED;
    else {
        const int64_t b = pr->batch;
        const span_t out[3] = {SPAN_O(o, pr), SPAN_LSE(lse, pr),
                               span(ws, 1, pl->workspace_bytes, 1, 1, 0, 1, 0, 1)};
        const span_t in[7] = {SPAN_Q(q, pr), SPAN_K(k, pr), SPAN_V(v, pr),
                              span(cu_q, 1, (b + 1) * 4, 1, 1, 0, 1, 0, 1),
                              span(paged ? NULL : cu_k, 1, (b + 1) * 4, 1, 1, 0, 1, 0, 1),
                              span(used, 1, b * 4, 1, 1, 0, 1, 0, 1),
                              span(pages, 1, b * pr->pages_per_seq * 4, 1, 1, 0, 1, 0, 1)};
        if (any_overlap(out, 3, in, 7))
            want = FA2_ERROR_OVERLAP;
        else if ((want = device_status(pl, 0)) == FA2_SUCCESS) {
            launches = 1;
            if (launch_fails)
                want = FA2_ERROR_CUDA;
        }
    }
    g_shim.fwd_calls = 0;
    got = varlen ? fa2_forward_varlen(pl, q, k, v, o, lse, cu_q, cu_k, used, pages, ws,
                                      (size_t)ws_bytes, NULL)
                 : fa2_forward(pl, q, k, v, o, lse, ws, (size_t)ws_bytes, NULL);
    CHECK(got == want);
    CHECK(g_shim.fwd_calls == launches);
    CHECK((got == FA2_SUCCESS) == (fa2_last_error()[0] == '\0'));
    if (g_shim.fwd_calls) {
        check_fwd_params(pl, &g_shim.fwd);
        CHECK(g_shim.fwd.kernel_family == pl->fwd_arch);
        CHECK(!g_shim.fwd.d_o && !g_shim.fwd.dq && !g_shim.fwd.dq_accum);
        CHECK(g_shim.fwd.q == q && g_shim.fwd.o == o && g_shim.fwd.lse == lse);
        CHECK(g_shim.fwd.cu_seqlens_q == cu_q && g_shim.fwd.seqused_k == used);
        CHECK(g_shim.fwd.cu_seqlens_k == (paged ? NULL : cu_k));
        CHECK(g_shim.fwd.page_table == (paged ? pages : NULL));
        CHECK(g_shim.fwd.varlen_check == (varlen ? ws : NULL));
        CHECK(g_shim.fwd.splits == pl->splits);
        CHECK((pl->splits > 1) == (g_shim.fwd.o_accum != NULL));
    }
}

/* fa2_varlen_check on the workspace pointer byte: the status the model predicts, and the
 * shim's records read back (sequence `bad` failing `check`, from the input). */
static void fuzz_varlen_check(const fa2_plan_t *pl, const uint8_t *pb, uint64_t ws_bytes,
                              uint8_t bad, uint8_t check, int copy_fails)
{
    const fa2_problem_t *pr = &pl->problem;
    void *ws = fake_ptr(pb[14], 14);
    g_shim.records = ws;
    g_shim.bad_sequence = bad == 0xFF ? -1 : bad % (pr->batch + 1); /* batch: none */
    g_shim.bad_check = 1 + check % 6;
    g_shim.memcpy_error = copy_fails;
    fa2_status_t want;
    if (!ws)
        want = FA2_ERROR_NULL_POINTER;
    else if (!pr->total_q)
        want = FA2_ERROR_UNSUPPORTED;
    else if (ws_bytes < (uint64_t)pl->workspace_bytes)
        want = FA2_ERROR_WORKSPACE;
    else if (misaligned(ws, 4))
        want = FA2_ERROR_MISALIGNED;
    else if (copy_fails)
        want = FA2_ERROR_CUDA;
    else if (g_shim.bad_sequence >= 0 && g_shim.bad_sequence < pr->batch)
        want = FA2_ERROR_BAD_METADATA;
    else
        want = FA2_SUCCESS;
    int64_t seq = -7;
    fa2_varlen_check_t got_check = (fa2_varlen_check_t)-7;
    const fa2_status_t got = fa2_varlen_check(pl, ws, (size_t)ws_bytes, &seq, &got_check);
    CHECK(got == want);
    CHECK((got == FA2_SUCCESS) == (fa2_last_error()[0] == '\0'));
    if (got == FA2_ERROR_BAD_METADATA)
        CHECK(seq == g_shim.bad_sequence && (int32_t)got_check == g_shim.bad_check);
    else if (got == FA2_SUCCESS)
        CHECK(seq == -1 && got_check == FA2_VARLEN_OK);
    else /* refused: its outputs untouched */
        CHECK(seq == -7 && got_check == (fa2_varlen_check_t)-7);
}

/* fa2_backward (varlen = 0) or fa2_backward_varlen (varlen = 1; offsets from pb[0..2],
 * the forward's pointer bytes). */
static void fuzz_backward(const fa2_plan_t *pl, const uint8_t *pb, uint64_t ws_bytes,
                          int launch_fails, int varlen)
{
    const fa2_problem_t *pr = &pl->problem;
    void *p[10];
    const int32_t *cu_q = varlen ? fake_ptr(pb[0], 20) : NULL,
                  *cu_k = varlen ? fake_ptr(pb[1], 21) : NULL,
                  *used = varlen ? fake_ptr(pb[2], 22) : NULL;
    fa2_status_t want = FA2_SUCCESS, got;
    int any_null = 0, any_mis = 0, launches = 0;
    for (int i = 0; i < 10; ++i) {
        p[i] = fake_ptr(pb[5 + i], 5 + i);
        any_null |= i < 9 && p[i] == NULL;
        any_mis |= misaligned(p[i], i == 5 ? 4 : 16); /* lse: 4 bytes */
    }
    if (any_null || (varlen && !cu_q))
        want = FA2_ERROR_NULL_POINTER;
    else if (pr->page_size)
        want = FA2_ERROR_UNSUPPORTED; /* a paged cache has no backward */
    else if (varlen && pr->total_q && !cu_k)
        want = FA2_ERROR_NULL_POINTER;
    else if (!varlen != !pr->total_q)
        want = FA2_ERROR_UNSUPPORTED; /* the other entry point's plan */
    else if (misaligned(cu_q, 4) || misaligned(cu_k, 4) || misaligned(used, 4))
        want = FA2_ERROR_MISALIGNED;
    else if (!pl->bwd_supported)
        want = (fa2_status_t)pl->bwd_status; /* the reason fa2_plan recorded */
    else if (pr->alibi || pr->sinks)
        want = FA2_ERROR_UNSUPPORTED; /* their tensors go through fa2_backward_with */
    else if (any_mis)
        want = FA2_ERROR_MISALIGNED;
    else if (!p[9] || ws_bytes < (uint64_t)pl->bwd_workspace_bytes)
        want = FA2_ERROR_WORKSPACE;
    else {
        const span_t out[4] = {SPAN_Q(p[6], pr), SPAN_K(p[7], pr), SPAN_V(p[8], pr),
                               span(p[9], 1, pl->bwd_workspace_bytes, 1, 1, 0, 1, 0, 1)};
        const span_t in[6] = {SPAN_Q(p[0], pr), SPAN_K(p[1], pr), SPAN_V(p[2], pr),
                              SPAN_O(p[3], pr), SPAN_O(p[4], pr), SPAN_LSE(p[5], pr)};
        if (any_overlap(out, 4, in, 6))
            want = FA2_ERROR_OVERLAP;
        else if ((want = device_status(pl, 1)) == FA2_SUCCESS) {
            launches = 1;
            if (launch_fails)
                want = FA2_ERROR_CUDA;
        }
    }
    g_shim.bwd_calls = 0;
    got = varlen ? fa2_backward_varlen(pl, p[0], p[1], p[2], p[3], p[4], (const float *)p[5],
                                       p[6], p[7], p[8], cu_q, cu_k, used, p[9],
                                       (size_t)ws_bytes, NULL)
                 : fa2_backward(pl, p[0], p[1], p[2], p[3], p[4], (const float *)p[5], p[6],
                                p[7], p[8], p[9], (size_t)ws_bytes, NULL);
    CHECK(got == want);
    CHECK(g_shim.bwd_calls == launches);
    CHECK((got == FA2_SUCCESS) == (fa2_last_error()[0] == '\0'));
    if (g_shim.bwd_calls) {
        check_fwd_params(pl, &g_shim.bwd);
        CHECK(g_shim.bwd.dq == p[6] && g_shim.bwd.dk == p[7] && g_shim.bwd.dv == p[8]);
        CHECK(g_shim.bwd.d_sum == p[9] && g_shim.bwd.lse == p[5]);
        CHECK(g_shim.bwd.kernel_family == pl->bwd_arch);
        CHECK(g_shim.bwd.cu_seqlens_q == cu_q && g_shim.bwd.cu_seqlens_k == cu_k &&
              g_shim.bwd.seqused_k == used);
    }
}

/* fa2_cache_write: pointers from pb[0..4] (k_new, v_new, slots, k_cache, v_cache),
 * n_tokens and the row stride from the input's workspace bytes. */
static void fuzz_cache_write(const fa2_plan_t *pl, const uint8_t *pb, uint64_t bits,
                             int launch_fails)
{
    const fa2_problem_t *pr = &pl->problem;
    void *k_new = fake_ptr(pb[0], 30), *v_new = fake_ptr(pb[1], 31),
         *k_cache = fake_ptr(pb[3], 33), *v_cache = fake_ptr(pb[4], 34);
    const int32_t *slots = fake_ptr(pb[2], 32);
    const int64_t n_tokens = (int64_t)(int32_t)(bits & 0xFFFFFFFF) >> 20; /* small, or < 0 */
    const int64_t stride = pr->heads_kv * pr->head_dim + 8 * (int64_t)((bits >> 32) % 3) -
                           ((bits >> 34) & 1 ? 4 : 0);
    fa2_status_t want = FA2_SUCCESS, got;
    int launches = 0;
    if (!k_new || !v_new || !slots || !k_cache || !v_cache)
        want = FA2_ERROR_NULL_POINTER;
    else if (!pr->page_size)
        want = FA2_ERROR_UNSUPPORTED;
    else if (n_tokens < 0 ||
             n_tokens * pr->heads_kv > (int64_t)INT32_MAX * 256 / (pr->head_dim / 8))
        want = FA2_ERROR_INVALID_SIZE;
    else if (stride < pr->heads_kv * pr->head_dim || stride % 8)
        want = FA2_ERROR_BAD_STRIDE;
    else if (misaligned(k_new, 16) || misaligned(v_new, 16) || misaligned(slots, 4) ||
             misaligned(k_cache, 16) || misaligned(v_cache, 16))
        want = FA2_ERROR_MISALIGNED;
    else if (n_tokens > 0 && ((__int128)(n_tokens - 1) * stride + pr->heads_kv * pr->head_dim) *
                                     2 > INT64_MAX)
        want = FA2_ERROR_SIZE_OVERFLOW;
    else if (n_tokens > 0) {
        const __int128 new_bytes = ((__int128)(n_tokens - 1) * stride +
                                    pr->heads_kv * pr->head_dim) * 2;
        const span_t out[2] = {SPAN_K(k_cache, pr), SPAN_V(v_cache, pr)};
        const span_t in[3] = {{(uintptr_t)k_new, (uintptr_t)k_new + new_bytes},
                              {(uintptr_t)v_new, (uintptr_t)v_new + new_bytes},
                              {(uintptr_t)slots, (uintptr_t)slots + (__int128)n_tokens * 4}};
        if (any_overlap(out, 2, in, 3))
            want = FA2_ERROR_OVERLAP;
        else if ((want = device_status(pl, 0)) == FA2_SUCCESS) {
            launches = 1;
            if (launch_fails)
                want = FA2_ERROR_CUDA;
        }
    }
    g_shim.cache_calls = 0;
    got = fa2_cache_write(pl, k_new, v_new, n_tokens, stride, slots, k_cache, v_cache, NULL);
    CHECK(got == want);
    CHECK(g_shim.cache_calls == launches);
    CHECK((got == FA2_SUCCESS) == (fa2_last_error()[0] == '\0'));
    if (launches) {
        const fa2_cache_write_params_t *c = &g_shim.cache;
        CHECK(c->n_tokens == n_tokens && c->new_row_stride == stride && c->slot_mapping == slots);
        CHECK(c->slots == pr->num_pages * pr->page_size && c->page_size == pr->page_size);
        CHECK(c->page_stride_k == pr->k_batch_stride && c->row_stride_k == pr->k_seq_stride);
        CHECK(c->heads_kv == pr->heads_kv && c->head_dim == pr->head_dim);
    }
}

/* A plan with bytes changed after fa2_plan: fa2_forward / fa2_backward refuse it
 * unless it is exactly what fa2_plan makes of its own problem and device; whatever
 * reaches a launcher satisfies every plan invariant (check_plan), so no edited plan can
 * send the kernels sizes they were not planned for. Pointers far apart, all aligned. */
static void fuzz_edited_plan(const fa2_plan_t *pl, const uint8_t edits[16])
{
    fa2_plan_t bad = *pl, fresh;
    void *t[10];
    for (int i = 0; i < 8; ++i)
        ((unsigned char *)&bad)[(size_t)edits[2 * i] * sizeof bad / 256] ^= edits[2 * i + 1];
    for (int i = 0; i < 10; ++i)
        t[i] = (void *)((uintptr_t)(i + 1) << 56);
    const int same = bad.struct_size == sizeof bad &&
                     fa2_plan(&bad.problem, &bad.device, &fresh) == FA2_SUCCESS &&
                     memcmp(&fresh, &bad, sizeof bad) == 0;
    g_shim.fwd_calls = g_shim.bwd_calls = 0;
    const fa2_status_t f = fa2_forward(&bad, t[0], t[1], t[2], t[3], (float *)t[4], NULL, 0, NULL);
    const fa2_status_t b = fa2_backward(&bad, t[0], t[1], t[2], t[3], t[4], (const float *)t[5],
                                        t[6], t[7], t[8], t[9], SIZE_MAX, NULL);
    if (!same) {
        CHECK(f == FA2_ERROR_BAD_PLAN || f == FA2_ERROR_STRUCT_SIZE);
        CHECK(b == FA2_ERROR_BAD_PLAN || b == FA2_ERROR_STRUCT_SIZE);
        CHECK(g_shim.fwd_calls == 0 && g_shim.bwd_calls == 0);
    } else {
        CHECK(f != FA2_ERROR_BAD_PLAN && b != FA2_ERROR_BAD_PLAN);
    }
    if (g_shim.fwd_calls || g_shim.bwd_calls) {
        CHECK(fa2_plan(&bad.problem, &bad.device, &fresh) == FA2_SUCCESS); /* clears the message */
        check_plan(&bad.problem, &bad.device, &bad);
    }
}

/* ---- fa2_device_info_query ---------------------------------------------------------- */

/* An independent model of "o's (rows, heads) layout gives every element its own
 * address": the dimensions of extent > 1, innermost (smallest stride) first, each
 * stride at least what the dimensions inside it reach. */
static int combine_distinct(int64_t rows, int64_t rs, int64_t heads, int64_t hs, int64_t inner)
{
    int64_t n[2] = {rows, heads}, st[2] = {rs, hs};
    if (st[0] > st[1] || (st[0] == st[1] && n[0] > n[1]))
        n[0] = heads, st[0] = hs, n[1] = rows, st[1] = rs;
    __int128 reach = inner;
    for (int i = 0; i < 2; ++i) {
        if (n[i] <= 1)
            continue;
        if ((__int128)st[i] < reach)
            return 0;
        reach += (__int128)st[i] * (n[i] - 1);
    }
    return 1;
}

/* fa2_combine on a fuzzed problem (pointers from pb[0..3]): the status the model of its
 * documented checks predicts; the launcher called exactly on success (or CUDA), with
 * the problem's values. */
static void fuzz_combine(const fa2_combine_problem_t *cp, const uint8_t *pb, int launch_fails)
{
    const fa2_combine_problem_t *p = cp;
    void *op = fake_ptr(pb[0], 40), *o = fake_ptr(pb[2], 42);
    const float *lp = fake_ptr(pb[1], 41);
    float *l = fake_ptr(pb[3], 43);
    fa2_status_t want = FA2_SUCCESS;
    int launches = 0;
    const int dt_ok = (p->parts_dtype >= 1 && p->parts_dtype <= 3) &&
                      (p->dtype >= 1 && p->dtype <= 3);
    const int64_t strides8[6] = {p->o_parts_part_stride, p->o_parts_row_stride,
                                 p->o_parts_head_stride, p->o_row_stride, p->o_head_stride, 0};
    const int64_t strides1[4] = {p->lse_parts_part_stride, p->lse_parts_row_stride,
                                 p->lse_parts_head_stride, p->lse_row_stride};
    int bad_stride = p->lse_head_stride < 0;
    for (int i = 0; i < 5; ++i)
        bad_stride |= strides8[i] < 0 || strides8[i] % 8 != 0;
    for (int i = 0; i < 4; ++i)
        bad_stride |= strides1[i] < 0;
    if (!op || !lp || !o)
        want = FA2_ERROR_NULL_POINTER;
    else if (p->struct_size != sizeof *p)
        want = FA2_ERROR_STRUCT_SIZE;
    else if (!dt_ok)
        want = FA2_ERROR_UNSUPPORTED_DTYPE;
    else if (p->parts < 1 || p->parts > FA2_MAX_COMBINE_PARTS || p->rows < 1 ||
             p->rows > INT32_MAX || p->heads < 1 || p->heads > INT32_MAX)
        want = FA2_ERROR_INVALID_SIZE;
    else if (p->head_dim < 8 || p->head_dim > 256 || p->head_dim % 8)
        want = FA2_ERROR_UNSUPPORTED_HEAD_DIM;
    else if ((__int128)p->rows * p->heads * (p->head_dim / 8) > (__int128)INT32_MAX * 256)
        want = FA2_ERROR_INVALID_SIZE;
    else if (bad_stride)
        want = FA2_ERROR_BAD_STRIDE;
    else {
        const __int128 eb_parts = p->parts_dtype == 3 ? 4 : 2, eb_o = p->dtype == 3 ? 4 : 2;
        const __int128 e[4] = {
            (__int128)(p->parts - 1) * p->o_parts_part_stride +
                (__int128)(p->rows - 1) * p->o_parts_row_stride +
                (__int128)(p->heads - 1) * p->o_parts_head_stride + p->head_dim,
            (__int128)(p->parts - 1) * p->lse_parts_part_stride +
                (__int128)(p->rows - 1) * p->lse_parts_row_stride +
                (__int128)(p->heads - 1) * p->lse_parts_head_stride + 1,
            (__int128)(p->rows - 1) * p->o_row_stride +
                (__int128)(p->heads - 1) * p->o_head_stride + p->head_dim,
            (__int128)(p->rows - 1) * p->lse_row_stride +
                (__int128)(p->heads - 1) * p->lse_head_stride + 1};
        const __int128 bytes[4] = {e[0] * eb_parts, e[1] * 4, e[2] * eb_o, e[3] * 4};
        int overflow = 0;
        for (int i = 0; i < 4; ++i)
            overflow |= e[i] > INT64_MAX || bytes[i] > INT64_MAX;
        if (overflow)
            want = FA2_ERROR_SIZE_OVERFLOW;
        else if (!combine_distinct(p->rows, p->o_row_stride, p->heads, p->o_head_stride,
                                   p->head_dim) ||
                 !combine_distinct(p->rows, p->lse_row_stride, p->heads, p->lse_head_stride, 1))
            want = FA2_ERROR_OVERLAP;
        else if (misaligned(op, 16) || misaligned(o, 16) || misaligned(lp, 4) ||
                 misaligned(l, 4))
            want = FA2_ERROR_MISALIGNED;
        else {
            const span_t out[2] = {span(o, 1, (int64_t)bytes[2], 1, 1, 0, 1, 0, 1),
                                   span(l, 1, (int64_t)bytes[3], 1, 1, 0, 1, 0, 1)};
            const span_t in[2] = {span(op, 1, (int64_t)bytes[0], 1, 1, 0, 1, 0, 1),
                                  span(lp, 1, (int64_t)bytes[1], 1, 1, 0, 1, 0, 1)};
            if (any_overlap(out, 2, in, 2))
                want = FA2_ERROR_OVERLAP;
            else if (g_shim.device_error)
                want = FA2_ERROR_NO_DEVICE;
            else {
                launches = 1;
                want = launch_fails ? FA2_ERROR_CUDA : FA2_SUCCESS;
            }
        }
    }
    g_shim.combine_calls = 0;
    const fa2_status_t got = fa2_combine(p, op, lp, o, l, NULL);
    CHECK(got == want);
    CHECK(g_shim.combine_calls == launches);
    CHECK((got == FA2_SUCCESS) == (fa2_last_error()[0] == '\0'));
    if (launches) {
        const fa2_combine_params_t *k = &g_shim.combine;
        CHECK(k->o_parts == op && k->lse_parts == lp && k->o == o && k->lse == l);
        CHECK(k->parts == p->parts && k->rows == p->rows && k->heads == p->heads &&
              k->head_dim == p->head_dim && k->dtype == p->dtype &&
              k->parts_dtype == p->parts_dtype);
        CHECK(k->o_row_stride == p->o_row_stride && k->lse_head_stride == p->lse_head_stride &&
              k->o_parts_part_stride == p->o_parts_part_stride);
    }
}

static void fuzz_query(int count_fails, int attr_fails, int32_t count, const int32_t attr[5])
{
    fa2_device_info_t info, poison;
    fa2_status_t s;
    g_shim.count_error = count_fails ? 35 /* cudaErrorInsufficientDriver */ : 0;
    g_shim.attr_error = attr_fails ? 1 /* cudaErrorInvalidValue */ : 0;
    g_shim.device_count = count;
    memcpy(g_shim.attr, attr, sizeof g_shim.attr);
    memset(&info, 0x5A, sizeof info);
    poison = info;
    s = fa2_device_info_query(0, &info);
    if (s == FA2_SUCCESS) {
        CHECK(!count_fails && !attr_fails && count > 0);
        CHECK(info.struct_size == sizeof info && info.cc_major == attr[0] &&
              info.cc_minor == attr[1] && info.sm_count == attr[2] &&
              info.smem_per_block_optin == attr[3] && info.smem_per_sm == attr[4]);
        CHECK(fa2_last_error()[0] == '\0');
    } else {
        CHECK(s == (count_fails || count <= 0 ? FA2_ERROR_NO_DEVICE : FA2_ERROR_CUDA));
        CHECK(memcmp(&info, &poison, sizeof info) == 0);
        CHECK(fa2_last_error()[0] != '\0');
    }
    CHECK(fa2_device_info_query(0, NULL) == FA2_ERROR_NULL_POINTER);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    reader_t r = {data, size, 0};
    uint8_t flags, ptrs[15], edits[16];
    uint64_t ws_bytes;
    int32_t count, attr[5];
    fa2_problem_t pr;
    fa2_device_info_t dev;
    fa2_plan_t plan, poison;
    fa2_status_t s;

    take(&r, &flags, 1);
    take(&r, &pr, sizeof pr);
    take(&r, &dev, sizeof dev);
    take(&r, ptrs, sizeof ptrs);
    take(&r, &ws_bytes, sizeof ws_bytes);
    take(&r, &count, sizeof count);
    take(&r, attr, sizeof attr);
    take(&r, edits, sizeof edits);
    uint8_t combine_flags;
    fa2_combine_problem_t cp;
    take(&r, &combine_flags, 1);
    take(&r, &cp, sizeof cp);

    if (flags & 4) {
        fa2_problem_t base;
        const fa2_device_info_t h200 = {sizeof(fa2_device_info_t), 9, 0, 132, 0, 232448,
                                        233472};
        fa2_problem_init(&base, FA2_DTYPE_BF16, 2, 100, 130, 8, 2, 64);
        if (pr.total_q) { /* a packed problem: its batch strides start at 0 */
            base.q_batch_stride = base.o_batch_stride = 0;
            if (!pr.page_size) /* paged K/V keep theirs as page strides */
                base.k_batch_stride = base.v_batch_stride = 0;
        }
        xor_bytes(&base, &pr, sizeof pr);
        pr = base;
        fa2_device_info_t d = h200;
        xor_bytes(&d, &dev, sizeof dev);
        dev = d;
    }
    if (flags & 1)
        pr.struct_size = sizeof pr;
    if (flags & 2)
        dev.struct_size = sizeof dev;
    g_shim.launch_error = (flags & 8) ? 1 /* cudaErrorInvalidValue */ : 0;
    /* the current device that fa2_forward / fa2_backward check against */
    g_shim.device_error = (flags & 64) ? 100 /* cudaErrorNoDevice */ : 0;
    g_shim.attr_error = (flags & 32) ? 1 /* cudaErrorInvalidValue */ : 0;
    memcpy(g_shim.attr, attr, sizeof g_shim.attr);
    if (flags & 128) /* the device the plan was made for */
        g_shim.attr[0] = dev.cc_major, g_shim.attr[1] = dev.cc_minor,
        g_shim.attr[3] = (int32_t)(dev.smem_per_block_optin > INT32_MAX
                                       ? INT32_MAX
                                       : dev.smem_per_block_optin);

    memset(&plan, 0xA5, sizeof plan);
    poison = plan;
    s = fa2_plan(&pr, &dev, &plan);
    CHECK(s >= FA2_SUCCESS && s <= FA2_ERROR_UNSUPPORTED);  /* fa2_plan never says BAD_METADATA */
    if (s != FA2_SUCCESS) {
        CHECK(memcmp(&plan, &poison, sizeof plan) == 0);
        CHECK(fa2_last_error()[0] != '\0');
        CHECK(strcmp(fa2_status_string(s), "unknown fa2_status_t") != 0);
    } else {
        check_plan(&pr, &dev, &plan);
        fuzz_forward(&plan, ptrs, ws_bytes, flags & 8, 0);
        fuzz_forward(&plan, ptrs, ws_bytes, flags & 8, 1);
        fuzz_varlen_check(&plan, ptrs, ws_bytes, edits[0], edits[1], flags & 8);
        fuzz_backward(&plan, ptrs, ws_bytes, flags & 8, 0);
        fuzz_backward(&plan, ptrs, ws_bytes, flags & 8, 1);
        fuzz_cache_write(&plan, ptrs, ws_bytes, flags & 8);
        fuzz_edited_plan(&plan, edits);
    }
    /* the NULL arguments, whatever the input */
    CHECK(fa2_plan(NULL, &dev, &plan) == FA2_ERROR_NULL_POINTER);
    CHECK(fa2_plan(&pr, NULL, &plan) == FA2_ERROR_NULL_POINTER);
    CHECK(fa2_plan(&pr, &dev, NULL) == FA2_ERROR_NULL_POINTER);

    if (combine_flags & 1) { /* a valid problem, XORed with the input's bytes */
        fa2_combine_problem_t base;
        fa2_combine_problem_init(&base, FA2_DTYPE_FP32, FA2_DTYPE_BF16, 3, 50, 4, 64);
        xor_bytes(&base, &cp, sizeof cp);
        cp = base;
    }
    if (combine_flags & 2)
        cp.struct_size = sizeof cp;
    fuzz_combine(&cp, ptrs, flags & 8);
    CHECK(fa2_combine(NULL, ptrs, NULL, NULL, NULL, NULL) == FA2_ERROR_NULL_POINTER);

    fuzz_query(flags & 16, flags & 32, count, attr);
    return 0;
}
