/* The kernels' parameters, one plain C struct for both directions: src/ fills it from
 * a validated plan and the call's tensors, kernels/ trust it. Internal, not installed. */
#ifndef FA2_PARAMS_H
#define FA2_PARAMS_H

#include <stdint.h>

#include "fa2.h"
#include "common/fast_div.h" /* FA2_HOST_DEVICE_FN */

#ifdef __cplusplus
extern "C" {
#endif

/* The largest softcap at which the Hopper forward offsets softcapped bf16 scores by a
 * fixed offset (fa2_bounded_softcap_offset) instead of a running maximum
 * (kernels/common/score_variants.cuh; which calls: kernels/sm90/fwd_sm90_tiles.h); the
 * GPU tests run it at this value. */
#define FA2_MAX_BOUNDED_SOFTCAP 50.0f

/* The smallest probability of a bounded softcap's score, 2^-FA2_BOUNDED_SOFTCAP_LOW_LOG2
 * (the score at -cap; about 2 x 33 log2(e)): a normal float with 30 bits to spare for p v. */
#define FA2_BOUNDED_SOFTCAP_LOW_LOG2 95.25f

/* The bounded softcap's offset in score units (a softcapped score y lies in [-1, 1]; p =
 * 2^((y - offset) cap log2(e))): the bound 1 up to a cap of 33, then lower so that p at
 * y = -1 stays 2^-FA2_BOUNDED_SOFTCAP_LOW_LOG2. The largest p is then 2^((1 - offset)
 * cap log2(e)), 2^49 at FA2_MAX_BOUNDED_SOFTCAP: fp32 sums and O and bf16 P hold it for
 * |V| below 2^(79 - log2 seqlen_k). */
FA2_HOST_DEVICE_FN float fa2_bounded_softcap_offset(float softcap)
{
    const float offset = FA2_BOUNDED_SOFTCAP_LOW_LOG2 / (softcap * 1.44269504f) - 1.0f;
    return offset < 1.0f ? offset : 1.0f;
}

/* constexpr where C++ reads the Hopper tile headers' formulas, so that the kernels'
 * traits can check their shared-memory sizes against the planner's. */
#if defined(__cplusplus)
#define FA2_WGMMA_CONSTEXPR constexpr
#else
#define FA2_WGMMA_CONSTEXPR
#endif

/* How far (log2 units) a row's running maximum may grow before the Hopper forward's
 * lazy rescale moves the row's offset (kernels/common/softmax.cuh:
 * update_deferred_biased_lazy; tests/tiled_cpu.c models it): p stays at most 2^8. */
#define FA2_LAZY_RESCALE_LOG2 8.0f

/* The steepest ALiBi slope, as |slope| log2(e), that the Hopper forward splits into a
 * column and a row term on tiles whose keys lie on one side of every row's diagonal
 * (kernels/common/score_variants.cuh: alibi_tile_side; tests/tiled_cpu.c models it).
 * 1.5 takes every slope of ALiBi's schedule (2^(-8 i / heads), below 1): the column term
 * then adds at most 127 x 1.5 log2 units to a score before the row term takes them off,
 * where fp32 rounds to 2^-16 of a log2 unit (p to about 1e-5, under bf16 P's 2^-9). */
#define FA2_MAX_ONE_SIDE_ALIBI_LOG2 1.5f

typedef struct fa2_params_t {
    const void *q;
    const void *k;
    const void *v;
    void *o;
    float *lse; /* NULL: not written; else contiguous [batch, heads_q, seqlen_q] */

    /* strides in elements */
    int64_t q_batch_stride, q_seq_stride, q_head_stride;
    int64_t k_batch_stride, k_seq_stride, k_head_stride;
    int64_t v_batch_stride, v_seq_stride, v_head_stride;
    int64_t o_batch_stride, o_seq_stride, o_head_stride;

    /* Packed variable-length batches (NULL for a dense batch): sequence b's rows start at
       cu_seqlens_q[b] / cu_seqlens_k[b] (batch strides 0), its key count is
       seqused_k[b] when given; seqlen_q / seqlen_k are then the planned maxima, total_q
       / total_k the rows Q/O and K/V hold. Device pointers, read by the kernels. */
    const int32_t *cu_seqlens_q;
    const int32_t *cu_seqlens_k;
    const int32_t *seqused_k;
    int32_t total_q;
    int32_t total_k;
    /* The per-row statistics (LSE, D, dQ accumulator), in rows: sequence b, head h, row
       r at b * stats_batch_stride + h * stats_head_stride + (its q_start) + r. */
    int64_t stats_batch_stride;
    int64_t stats_head_stride;
    /* Paged K/V (page_table set; a packed batch): key j of sequence b is row j % page_size
       of page page_table[b * pages_per_seq + j / page_size]; k/v_batch_stride are then
       the page strides. The page ids are device values, checked against num_pages. */
    const int32_t *page_table;
    int32_t page_size;
    int32_t pages_per_seq;
    int32_t num_pages;
    uint32_t page_div_magic; /* fa2_fast_div_magic(page_size) */
    int32_t page_rows;       /* fa2_paged_rows_per_page (common/paged_row_space.h); 0: none */

    int32_t batch;
    int32_t heads_q;
    int32_t heads_kv;
    int32_t seqlen_q;
    int32_t seqlen_k;
    int32_t head_dim;        /* actual head dim, <= head_dim_bucket */
    int32_t head_dim_bucket; /* compiled head dim */
    int32_t dtype;           /* fa2_dtype_t: FA2_DTYPE_FP16 or FA2_DTYPE_BF16 */
    int32_t kernel_family;   /* the plan's choice for this direction: 90 = Hopper wgmma
                                kernels, 80 = mma.sync (fwd_arch or bwd_arch) */
    int32_t fwd_kernel;      /* forward: the plan's fa2_fwd_kernel_t */
    int32_t bwd_kernel;      /* backward: the plan's fa2_bwd_kernel_t */
    int32_t scores;          /* the plan's fa2_scores_t for this direction */
    int32_t page_box_rows;   /* FA2_FWD_KERNEL_WGMMA_PAGED_TMA: rows per TMA box */
    int32_t window_left;     /* -1 = unbounded; causal already folded into window_right */
    int32_t window_right;    /* -1 = unbounded */
    float softmax_scale;     /* scale applied to Q K^T (natural log units) */
    float scale_log2;        /* softmax_scale * log2(e) */

    /* backward only (NULL in the forward); lse is then required */
    const void *d_o; /* dLoss/dO, strides as o */
    void *dq;        /* strides as q */
    void *dk;        /* strides as k */
    void *dv;        /* strides as v */
    float *d_sum;    /* workspace: rowsum(dO * O), contiguous [batch, heads_q, seqlen_q] */
    float *dq_accum; /* workspace: fp32 dQ / scale, [batch, heads_q, seqlen_q, head_dim];
                        NULL when dQ comes from the dQ kernel (no atomics) */

    /* forward of a packed batch (else NULL): workspace, int32 [batch], each sequence's
       fa2_varlen_check_t, written every call (kernels/common/varlen_check.cuh) */
    int32_t *varlen_check;

    /* The decode kernel (kernels/decode/): 0 = the prefill kernels run; n >= 1 = the
       decode kernel, each (sequence, kv head)'s keys in n splits. With n > 1 the
       splits' results go to the workspace (o_accum fp32 [n, accum_rows, heads_q,
       head_dim], lse_accum [n, heads_q, accum_rows]; accum_rows = batch * seqlen_q, or
       total_q) and a combine kernel writes O and the LSE. */
    int32_t splits;
    int32_t split_tiles;        /* > 0: each split this many key tiles (batch-invariant);
                                   0: a sequence's tiles divided evenly over the splits */
    int32_t decode_stages;      /* the decode kernel's pipeline depth (compiled ones:
                                   FA2_DECODE_STAGE_COUNTS) */

    int64_t accum_rows;
    float *o_accum;
    float *lse_accum;

    /* The score variants (include/fa2.h): softcap 0 = off; the per-head tensors NULL =
       off. */
    float softcap;
    const float *alibi_slopes; /* [heads_q], or per sequence alibi_batch_stride apart */
    int64_t alibi_batch_stride;
    const float *sinks;        /* [heads_q], natural log units */
    float *dsinks;             /* backward with sinks: [heads_q], written */
} fa2_params_t;

/* The window the kernels run: -1 (unbounded) when it reaches past every key anyway
 * (window_left >= seqlen_k, window_right >= seqlen_q), else the window itself. With
 * seqlen_q, seqlen_k <= FA2_MAX_SEQLEN = 2^22 (< 2^30) this keeps every row +- offset +- window
 * sum of the mask and range code (kernels/common/mask.cuh) inside int32. */
static inline int32_t fa2_kernel_window_left(int64_t window_left, int64_t seqlen_k)
{
    return window_left < 0 || window_left >= seqlen_k ? -1 : (int32_t)window_left;
}

static inline int32_t fa2_kernel_window_right(int64_t window_right, int64_t seqlen_q)
{
    return window_right < 0 || window_right >= seqlen_q ? -1 : (int32_t)window_right;
}

/* Whether TMA's tensor maps can step a dimension of `extent` indices at
 * `stride` elements (2-byte): a positive byte stride below 2^40, or no step at all. */
static inline int fa2_tma_stride(int64_t extent, int64_t stride)
{
    return extent <= 1 || (stride > 0 && stride < ((int64_t)1 << 39));
}

/* fa2_tma_stride for each dimension of K and V laid out (outer, rows, heads):
 * `outer` sequences or pages of `rows` rows, with these element strides. */
static inline int fa2_tma_kv_strides(int64_t outer, int64_t rows, int64_t heads,
                                             int64_t k_outer, int64_t k_row, int64_t k_head,
                                             int64_t v_outer, int64_t v_row, int64_t v_head)
{
    return fa2_tma_stride(outer, k_outer) && fa2_tma_stride(rows, k_row) &&
           fa2_tma_stride(heads, k_head) && fa2_tma_stride(outer, v_outer) &&
           fa2_tma_stride(rows, v_row) && fa2_tma_stride(heads, v_head);
}

/* Launches the forward kernel p->fwd_kernel for p->head_dim_bucket and p->dtype on
 * `stream` (a cudaStream_t). Returns a cudaError_t value (0 = cudaSuccess). */
int fa2_fwd_launch(const fa2_params_t *p, void *stream);

/* fa2_cache_write's arguments (checked by src/cache_write.c). */
typedef struct fa2_cache_write_params_t {
    const void *k_new, *v_new;
    const int32_t *slot_mapping;
    void *k_cache, *v_cache;
    int64_t n_tokens, new_row_stride;
    int64_t page_stride_k, row_stride_k, head_stride_k;
    int64_t page_stride_v, row_stride_v, head_stride_v;
    int64_t slots; /* num_pages * page_size */
    int32_t page_size, heads_kv, head_dim, reserved0;
} fa2_cache_write_params_t;

/* Thread-block shapes that src/ checks grids with: the cache write's and fa2_combine's
 * threads a block (one per 16-byte chunk of a row). */
#define FA2_CACHE_WRITE_THREADS 256
#define FA2_COMBINE_THREADS 256

/* fa2_combine's arguments (checked by src/combine.c); strides in elements. */
typedef struct fa2_combine_params_t {
    const void *o_parts;
    const float *lse_parts;
    void *o;
    float *lse; /* NULL: not written */
    int64_t o_parts_part_stride, o_parts_row_stride, o_parts_head_stride;
    int64_t lse_parts_part_stride, lse_parts_row_stride, lse_parts_head_stride;
    int64_t o_row_stride, o_head_stride, lse_row_stride, lse_head_stride;
    int64_t rows;
    int32_t parts, heads, head_dim, parts_dtype, dtype, reserved0;
} fa2_combine_params_t;

/* Launches the combine kernel on `stream`. Returns a cudaError_t value. */
int fa2_combine_launch(const fa2_combine_params_t *p, void *stream);

/* Launches the cache-write kernel on `stream`. Returns a cudaError_t value. */
int fa2_cache_write_launch(const fa2_cache_write_params_t *p, void *stream);

/* Launches the backward kernels on `stream`. Returns a cudaError_t value; every
 * fallible set-up comes before the first launch. *outputs_queued is set to 1 once a
 * kernel that writes dQ, dK or dV is queued (a failure after it may leave them
 * partly written), else 0. */
int fa2_bwd_launch(const fa2_params_t *p, void *stream, int *outputs_queued);

#ifdef __cplusplus
}
#endif

#endif
