/* Internal declarations shared by the files in src/. Not installed. */
#ifndef FA2_INTERNAL_H
#define FA2_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "fa2.h"
#include "common/params.h" /* fa2_tma_kv_strides */

#if defined(__GNUC__)
#define FA2_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define FA2_PRINTF(f, a)
#endif

/* Sets the calling thread's message (vsnprintf, truncated to fit) and returns s. */
fa2_status_t fa2_fail(fa2_status_t s, const char *fmt, ...) FA2_PRINTF(2, 3);

/* Empties the calling thread's message. Called on entry by every function that
 * returns a fa2_status_t. */
void fa2_clear_error(void);

/* Smallest struct_size a caller may pass: the size of the first released layout.
 * Until a release freezes that layout it is the current one, so today only
 * struct_size == sizeof() is accepted. Once frozen, write it as offsetof(last v1
 * field) + its size, and let validation read no field beyond struct_size. */
#define FA2_PROBLEM_V1_SIZE sizeof(fa2_problem_t)
#define FA2_DEVICE_INFO_V1_SIZE sizeof(fa2_device_info_t)

/* One row of kernels/sm80/fwd_tiles.h (arch 80) or kernels/sm90/fwd_sm90_tiles.h (arch 90). */
typedef struct fa2_fwd_tile_t {
    int32_t head_dim_bucket;
    int32_t block_m;
    int32_t block_n;
    int32_t warps;
    int32_t arch;          /* 80: mma.sync kernel (any device); 90: wgmma kernel (sm_90) */
    int32_t kernel;        /* fa2_fwd_kernel_t */
    int32_t page_box_rows; /* FA2_FWD_KERNEL_WGMMA_PAGED_TMA: rows per TMA box */
    int64_t smem_bytes;    /* dynamic shared memory per block */
    int32_t why;           /* fa2_fwd_why_t: why this kernel family */
} fa2_fwd_tile_t;

/* Why fa2_fwd_tile_for_device chose its family (fa2_plan_describe says it in words). */
typedef enum fa2_fwd_why_t {
    FA2_FWD_WHY_HOPPER = 1,        /* an sm_90 device, a Hopper kernel, K and V suit TMA */
    FA2_FWD_WHY_NOT_SM90A = 2,     /* not an sm_90 device, or a build without sm_90a code */
    FA2_FWD_WHY_NO_HOPPER_TILE = 3, /* no Hopper kernel for the bucket */
    FA2_FWD_WHY_KV_NOT_TMA = 4     /* K's or V's strides do not suit TMA */
} fa2_fwd_why_t;

/* Why the decode kernel runs or not (fa2_decode_splits). */
typedef enum fa2_decode_why_t {
    FA2_DECODE_WHY_FITS = 0,        /* it runs */
    FA2_DECODE_WHY_NO_KERNEL = 1,   /* none for the bucket */
    FA2_DECODE_WHY_TOKENS = 2,      /* more query tokens than it takes */
    FA2_DECODE_WHY_SMEM = 3,        /* its shared memory exceeds the device's */
    FA2_DECODE_WHY_INVARIANT = 4    /* batch-invariant splits: grid or workspace too large */
} fa2_decode_why_t;

/* 1 when a device of compute capability major.minor runs the sm_90a (Hopper wgmma)
 * kernels: exactly cc 9.0 (sm_90a code runs on no other). The one place that says so. */
static inline int fa2_cc_runs_sm90a(int cc_major, int cc_minor)
{
    return cc_major == 9 && cc_minor == 0;
}

/* 1 when a device of compute capability major.minor with `smem_optin` bytes of shared
 * memory per block can run the forward (backward = 0) or backward kernels `plan` chose:
 * sm_80 or newer, exactly sm_90 for the Hopper kernels, enough shared memory. */
static inline int fa2_device_runs_plan(const fa2_plan_t *plan, int backward, int cc_major,
                                       int cc_minor, int64_t smem_optin)
{
    const int hopper = (backward ? plan->bwd_arch : plan->fwd_arch) == 90;
    const int64_t smem = backward ? plan->bwd_smem_bytes : plan->smem_bytes;
    return cc_major >= 8 && (!hopper || fa2_cc_runs_sm90a(cc_major, cc_minor)) &&
           smem <= smem_optin;
}

/* The compiled head dim a problem of `head_dim` runs in: the smallest bucket >=
 * head_dim, or 0 when there is none (head_dim > 256). Callers check the multiple of
 * 8 themselves. */
int fa2_head_dim_bucket(int64_t head_dim);

/* The compiled mma.sync tile of `bucket`; 0 and *tile untouched when there is none. */
int fa2_fwd_tile(int64_t bucket, fa2_fwd_tile_t *tile);

/* The bucket's compact mma.sync tile (for 99 KiB devices); 0 and *tile untouched when
 * it has none. */
int fa2_fwd_compact_tile(int64_t bucket, fa2_fwd_tile_t *tile);

/* The tile the forward runs for `bucket` on `device`: the Hopper kernel's when the
 * device is sm_90, the library has sm_90a code for the bucket and the problem's K and
 * V suit its TMA (fa2_kv_tma_ready), else fa2_fwd_tile's, or the
 * compact tile where that does not fit the device's shared memory and the bucket has
 * one. 0 and *tile untouched when the bucket has no kernel. */
int fa2_fwd_tile_for_device(int64_t bucket, const fa2_problem_t *problem,
                            const fa2_device_info_t *device, fa2_fwd_tile_t *tile);

/* The score code (fa2_scores_t) of forward kernel `kernel` (fa2_fwd_kernel_t) for a
 * validated problem. */
int32_t fa2_fwd_scores(const fa2_problem_t *problem, int32_t kernel);

/* Every check fa2_plan makes; FA2_SUCCESS or the first failure (message set). */
fa2_status_t fa2_validate_problem(const fa2_problem_t *problem,
                                  const fa2_device_info_t *device);

/* 1 when a [batch, seq, heads, head_dim] layout with these strides (head_dim stride
 * 1) gives every element its own address: the strides, innermost first, nest (each
 * steps past all that the dimensions inside it reach). Dimensions of extent 1 are
 * ignored; an empty tensor is distinct. Takes validated sizes and strides. */
int fa2_layout_is_distinct(int64_t batch, int64_t seq, int64_t heads, int64_t head_dim,
                           int64_t batch_stride, int64_t seq_stride, int64_t head_stride);

/* FA2_SUCCESS, or FA2_ERROR_MISALIGNED naming `name` when ptr % align != 0. */
fa2_status_t fa2_check_align(const char *name, const void *ptr, uintptr_t align);

/* A packed batch's offsets, device int32 arrays (fa2_forward_varlen, fa2_backward_varlen);
 * a dense call passes none. */
typedef struct fa2_seq_offsets_t {
    const int32_t *cu_seqlens_q, *cu_seqlens_k, *seqused_k, *page_table;
} fa2_seq_offsets_t;

/* For a call with `offsets` (NULL: a dense call): cu_seqlens_q given
 * (FA2_ERROR_NULL_POINTER). Checked with the other pointers, before the plan. */
fa2_status_t fa2_check_offsets_given(const fa2_seq_offsets_t *offsets);

/* The score variants' per-head tensors of a call (fa2_forward_with,
 * fa2_backward_with): ALiBi's slopes, the sinks and, in a backward, their gradient
 * (written). */
typedef struct fa2_score_tensors_t {
    const float *alibi_slopes;
    const float *sinks;
    float *dsinks;
} fa2_score_tensors_t;

/* A call's score tensors against the plan's variants: each given exactly when the plan
 * has its variant (alibi_slopes with alibi; sinks, and in a backward dsinks, with
 * sinks): FA2_ERROR_UNSUPPORTED for one the plan lacks, FA2_ERROR_NULL_POINTER for one
 * it needs; each 4-byte aligned (FA2_ERROR_MISALIGNED). scores NULL: an entry point with
 * no room for them, FA2_ERROR_UNSUPPORTED naming `with_call` when the plan needs any. */
fa2_status_t fa2_check_score_tensors(const fa2_problem_t *pr, const fa2_score_tensors_t *scores,
                                     int backward, const char *with_call);

/* The forward: every check, then the launch. offsets NULL: a dense call; scores NULL:
 * an entry point without the score variants' tensors (fa2_forward, fa2_forward_varlen). */
fa2_status_t fa2_run_forward(const fa2_plan_t *plan, const void *q, const void *k,
                             const void *v, void *o, float *lse,
                             const fa2_seq_offsets_t *offsets,
                             const fa2_score_tensors_t *scores, void *workspace,
                             size_t workspace_bytes, void *stream);

/* The backward: every check, then the launches. offsets NULL: a dense call; scores
 * NULL: an entry point without the score variants' tensors (fa2_backward,
 * fa2_backward_varlen). */
fa2_status_t fa2_run_backward(const fa2_plan_t *plan, const void *q, const void *k,
                              const void *v, const void *o, const void *d_o,
                              const float *lse, void *dq, void *dk, void *dv,
                              const fa2_seq_offsets_t *offsets,
                              const fa2_score_tensors_t *scores, void *workspace,
                              size_t workspace_bytes, void *stream);

/* After the plan's own checks: the entry point suits the plan, a dense call a dense
 * plan and a packed call a packed one (FA2_ERROR_UNSUPPORTED, naming `dense_call` or
 * `packed_call`, the one to use); the arrays the plan reads are given
 * (FA2_ERROR_NULL_POINTER: cu_seqlens_k, or for a paged plan page_table and seqused_k)
 * and 4-byte aligned; a page table only with a paged plan (FA2_ERROR_UNSUPPORTED). */
fa2_status_t fa2_check_entry_point(const fa2_plan_t *plan, const fa2_seq_offsets_t *offsets,
                                   const char *dense_call, const char *packed_call);

/* 1 when the backward of a plan sums dQ with fp32 atomics in the workspace's
 * accumulator: default mode, except Hopper split rows (their dQ kernel needs none). */
int fa2_bwd_dq_by_atomics(int deterministic, int bwd_arch, int64_t bucket);

/* fa2_forward / fa2_backward's checks before anything is queued (run_checks.c). */

/* FA2_ERROR_STRUCT_SIZE or FA2_ERROR_BAD_PLAN unless *plan is exactly what fa2_plan
 * makes of plan->problem and plan->device. */
fa2_status_t fa2_check_plan(const fa2_plan_t *plan);

/* FA2_ERROR_DEVICE_MISMATCH unless the current device can run the plan's forward
 * (backward = 0) or backward kernels: sm_80 or newer, sm_90 for the Hopper kernels,
 * and enough shared memory. FA2_ERROR_NO_DEVICE / FA2_ERROR_CUDA when it cannot be
 * queried. Device properties are cached per device. */
fa2_status_t fa2_check_device(const fa2_plan_t *plan, int backward);

/* The bytes [begin, end) a tensor reaches (empty: begin == end). */
typedef struct fa2_span_t {
    const char *name;
    uintptr_t begin, end;
} fa2_span_t;

/* Whose sizes and strides a 16-bit tensor has: Q's (also dQ), K's (dK), V's (dV), O's
 * (also dO). */
typedef enum fa2_layout_t { FA2_LAYOUT_Q, FA2_LAYOUT_K, FA2_LAYOUT_V, FA2_LAYOUT_O } fa2_layout_t;

/* The span of `ptr` laid out as `layout` of a validated problem (empty when its
 * sequence is: seqlen_k = 0). */
fa2_span_t fa2_layout_span(const fa2_problem_t *problem, fa2_layout_t layout, const char *name,
                           const void *ptr);

/* `bytes` bytes from ptr (LSE, workspace). */
fa2_span_t fa2_bytes_span(const char *name, const void *ptr, int64_t bytes);

/* The shared argument checks (src/validate.c), each naming `name` and the value:
 * value in [lo, hi] (FA2_ERROR_INVALID_SIZE); a stride non-negative and a multiple of
 * `multiple` (FA2_ERROR_BAD_STRIDE); the byte just past a [batch, seq, heads, head_dim]
 * tensor of `elem`-byte elements within int64 (FA2_ERROR_SIZE_OVERFLOW; *bytes, when
 * not NULL, gets it). */
fa2_status_t fa2_check_range(const char *name, int64_t value, int64_t lo, int64_t hi);
fa2_status_t fa2_check_stride(const char *name, int64_t stride, int64_t multiple);
fa2_status_t fa2_check_extent(const char *name, int64_t batch, int64_t seq, int64_t heads,
                              int64_t head_dim, int64_t bs, int64_t ss, int64_t hs,
                              int64_t elem, int64_t *bytes);

/* FA2_ERROR_INVALID_SIZE unless a * b units of work, unit_threads threads each in blocks
 * of block_threads, fit the grid limit of 2^31 - 1 blocks; a, b >= 0. */
fa2_status_t fa2_check_grid(const char *a_name, int64_t a, const char *b_name, int64_t b,
                            int64_t unit_threads, int64_t block_threads);

/* The spans of a call's metadata arrays (inputs the kernels read; an empty span for
 * each one not given or not read), for fa2_check_disjoint. */
#define FA2_OFFSET_SPANS 4
void fa2_offset_spans(const fa2_problem_t *pr, const fa2_seq_offsets_t *offsets,
                      fa2_span_t spans[FA2_OFFSET_SPANS]);

/* FA2_ERROR_OVERLAP naming the pair when an output overlaps another output or an input
 * (inputs may overlap each other). */
fa2_status_t fa2_check_disjoint(const fa2_span_t *outputs, int n_outputs,
                                const fa2_span_t *inputs, int n_inputs);

/* The backward's workspace: D (fp32 per query row) from byte 0, padded to 256 bytes,
 * then, when dQ is summed by atomics, the fp32 dQ accumulator (head_dim floats per
 * row) from byte accum_offset. The one place that lays it out (fa2_plan sizes it,
 * fa2_backward places the pointers). */
typedef struct fa2_bwd_workspace_t {
    int64_t accum_offset; /* 0: no accumulator */
    int64_t total_bytes;
} fa2_bwd_workspace_t;

/* 0 when a size overflows int64 (then *ws is untouched), else 1. */
int fa2_bwd_workspace_layout(const fa2_problem_t *problem, int dq_by_atomics,
                             fa2_bwd_workspace_t *ws);

/* The forward's workspace: a packed batch's metadata records (int32 per sequence) from
 * byte 0; with decode splits (splits > 1) then, each 256-byte aligned, the splits' LSE
 * (fp32 [splits, heads_q, rows]) and O (fp32 [splits, rows, heads_q, head_dim]), rows =
 * total_q or batch * seqlen_q. The one place that lays it out (fa2_plan sizes it,
 * fa2_forward places the pointers). 0 when a size overflows int64. */
typedef struct fa2_fwd_workspace_t {
    int64_t lse_offset, o_offset; /* 0: no splits */
    int64_t rows;
    int64_t total_bytes;
} fa2_fwd_workspace_t;
int fa2_fwd_workspace_layout(const fa2_problem_t *problem, int32_t splits,
                             fa2_fwd_workspace_t *ws);

/* The decode kernel's choice for a validated problem on `device` with head-dim bucket
 * `bucket`: 0 = the prefill kernels; n >= 1 = the decode kernel with n key splits
 * (src/plan_decode.c). *why (when not NULL): fa2_decode_why_t. */
int32_t fa2_decode_splits(const fa2_problem_t *problem, const fa2_device_info_t *device,
                          int64_t bucket, int32_t *why);

/* The decode kernel's pipeline depth for `bucket` on a device allowing
 * `smem_per_block_optin` bytes a block: the deepest compiled one that fits, 0 if none. */
int32_t fa2_decode_stages(int64_t bucket, int64_t smem_per_block_optin);

/* The decode kernel's row tiles per kv head: query heads per kv head x seqlen_q rows,
 * FA2_DECODE_ROWS a block. */
int64_t fa2_decode_row_tiles(const fa2_problem_t *problem);

/* Batch-invariant decode (problem->batch_invariant): key tiles per split, the same for
 * every sequence; 0 otherwise (a sequence's tiles divided over the splits). */
int32_t fa2_decode_split_tiles(const fa2_problem_t *problem, int64_t bucket);

/* The kernel parameters of a validated plan and its forward tensors (the backward then
 * adds its own and its kernel family). */
/* A problem's tensors as [batch, rows, heads, head_dim] with its strides: a dense batch
 * as given; a packed one as one sequence of total_q (Q, O) or total_k (K, V) rows; a
 * paged K/V as num_pages pages of page_size rows. */
typedef struct fa2_layout_dims_t {
    int64_t batch, rows;
} fa2_layout_dims_t;

static inline fa2_layout_dims_t fa2_layout_dims(const fa2_problem_t *pr, int queries)
{
    fa2_layout_dims_t d;
    if (!pr->total_q)
        d.batch = pr->batch, d.rows = queries ? pr->seqlen_q : pr->seqlen_k;
    else if (!queries && pr->page_size)
        d.batch = pr->num_pages, d.rows = pr->page_size;
    else
        d.batch = 1, d.rows = queries ? pr->total_q : pr->total_k;
    return d;
}

/* Whether the Hopper forward's TMA can read the problem's K and V (dense or
 * packed; a paged cache's pages are copied otherwise): every dimension of K and V with
 * more than one index steps a positive stride below 2^39 elements (the tensor maps'
 * byte strides are positive multiples of 16 below 2^40). */
static inline int fa2_kv_tma_ready(const fa2_problem_t *p)
{
    if (p->page_size)
        return 1;
    const fa2_layout_dims_t kd = fa2_layout_dims(p, 0);
    return fa2_tma_kv_strides(kd.batch, kd.rows, p->heads_kv, p->k_batch_stride,
                                      p->k_seq_stride, p->k_head_stride, p->v_batch_stride,
                                      p->v_seq_stride, p->v_head_stride);
}

/* Rows of the LSE (and of the backward's per-row statistics): batch * heads_q *
 * seqlen_q, or heads_q * total_q for a packed batch. Validated sizes: fits. */
static inline int64_t fa2_lse_rows(const fa2_problem_t *pr)
{
    return pr->total_q ? pr->heads_q * pr->total_q : pr->batch * pr->heads_q * pr->seqlen_q;
}

struct fa2_params_t;
/* The kernels' parameters from a checked plan and the call's tensors and offsets
 * (NULL for a dense call). */
void fa2_fill_params(const fa2_plan_t *plan, const void *q, const void *k, const void *v,
                     void *o, float *lse, const fa2_seq_offsets_t *offsets,
                     struct fa2_params_t *p);

/* Checked int64 arithmetic for non-negative operands: *out = a*b (a+b); returns 0
 * instead of overflowing, leaving *out untouched. */
static inline int fa2_mul_i64(int64_t a, int64_t b, int64_t *out)
{
    if (a < 0 || b < 0 || (a != 0 && b > INT64_MAX / a))
        return 0;
    *out = a * b;
    return 1;
}

static inline int fa2_add_i64(int64_t a, int64_t b, int64_t *out)
{
    if (a < 0 || b < 0 || a > INT64_MAX - b)
        return 0;
    *out = a + b;
    return 1;
}

/* Bytes the ALiBi slopes span, ((batch - 1) * alibi_batch_stride + heads_q) floats, for
 * a problem whose sizes and stride are in range; -1 when that overflows int64. */
static inline int64_t fa2_alibi_slopes_bytes(const fa2_problem_t *p)
{
    int64_t rows, floats, bytes;
    if (!fa2_mul_i64(p->batch - 1, p->alibi_batch_stride, &rows) ||
        !fa2_add_i64(rows, p->heads_q, &floats) || !fa2_mul_i64(floats, 4, &bytes))
        return -1;
    return bytes;
}

#endif
