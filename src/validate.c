/* Every check fa2_plan makes, in a fixed order; each failure names the field and
 * its value. Pure host code. */
#include <inttypes.h>
#include <math.h>
#include <stddef.h>

#include "sm90/fwd_sm90_tiles.h"
#include "sm80/fwd_tiles.h"
#include "internal.h"

/* The full build's bucket for head_dim: the smallest that holds it (0: none). */
static int full_build_bucket(int64_t head_dim)
{
#define FA2_X(bucket)          \
    if (head_dim <= (bucket)) \
        return (bucket);
    FA2_ALL_HEAD_DIM_BUCKETS(FA2_X)
#undef FA2_X
    return 0;
}

/* Whether this build compiled `bucket` (CMake's FA2_HEAD_DIMS). */
static int bucket_built(int bucket)
{
#define FA2_X(b, bm, bn, w) \
    if (bucket == (b))      \
        return 1;
    FA2_FWD_TILES(FA2_X)
#undef FA2_X
    return 0;
}

int fa2_head_dim_bucket(int64_t head_dim)
{
    const int bucket = full_build_bucket(head_dim);
    return bucket_built(bucket) ? bucket : 0;
}

/* One row of the mma.sync tile tables, as a fa2_fwd_tile_t (in the two functions
 * below). */
#define FA2_X(b, bm, bn, w)                                               \
    if (bucket == (b)) {                                                  \
        tile->head_dim_bucket = (b);                                      \
        tile->block_m = (bm);                                             \
        tile->block_n = (bn);                                             \
        tile->warps = (w);                                                \
        tile->arch = 80;                                                  \
        tile->kernel = kind;                                              \
        tile->page_box_rows = 0;                                          \
        tile->smem_bytes = fa2_fwd_smem_bytes((b), (bm), (bn));           \
        return 1;                                                         \
    }

int fa2_fwd_tile(int64_t bucket, fa2_fwd_tile_t *tile)
{
    const int32_t kind = FA2_FWD_KERNEL_MMA;
    FA2_FWD_TILES(FA2_X)
    return 0;
}

int fa2_fwd_compact_tile(int64_t bucket, fa2_fwd_tile_t *tile)
{
    const int32_t kind = FA2_FWD_KERNEL_MMA_COMPACT;
    (void)bucket, (void)tile, (void)kind; /* a build without the compact tiles' buckets
                                             has no row */
    FA2_FWD_COMPACT_TILES(FA2_X)
    return 0;
}
#undef FA2_X

fa2_status_t fa2_check_range(const char *name, int64_t value, int64_t lo, int64_t hi)
{
    if (value < lo || value > hi)
        return fa2_fail(FA2_ERROR_INVALID_SIZE,
                        "%s=%" PRId64 " is out of range [%" PRId64 ", %" PRId64 "]", name,
                        value, lo, hi);
    return FA2_SUCCESS;
}

fa2_status_t fa2_check_grid(const char *a_name, int64_t a, const char *b_name, int64_t b,
                            int64_t unit_threads, int64_t block_threads)
{
    if (a > 0 && b > (int64_t)INT32_MAX * block_threads / unit_threads / a)
        return fa2_fail(FA2_ERROR_INVALID_SIZE,
                        "%s=%" PRId64 " * %s=%" PRId64 " need more than 2147483647 thread "
                        "blocks",
                        a_name, a, b_name, b);
    return FA2_SUCCESS;
}

fa2_status_t fa2_check_stride(const char *name, int64_t stride, int64_t multiple)
{
    if (stride < 0)
        return fa2_fail(FA2_ERROR_BAD_STRIDE, "%s=%" PRId64 " is negative", name, stride);
    if (stride % multiple != 0)
        return fa2_fail(FA2_ERROR_BAD_STRIDE, "%s=%" PRId64 " is not a multiple of %" PRId64 "%s",
                        name, stride, multiple, multiple == 8 ? " (16-byte rows)" : "");
    return FA2_SUCCESS;
}

fa2_status_t fa2_check_extent(const char *name, int64_t batch, int64_t seq, int64_t heads,
                              int64_t head_dim, int64_t bs, int64_t ss, int64_t hs,
                              int64_t elem, int64_t *bytes)
{
    int64_t a, b, c, end;
    int64_t last_seq = seq > 0 ? seq - 1 : 0; /* seqlen_k = 0: nothing is read */
    if (!fa2_mul_i64(batch - 1, bs, &a) || !fa2_mul_i64(last_seq, ss, &b) ||
        !fa2_mul_i64(heads - 1, hs, &c) || !fa2_add_i64(a, b, &end) ||
        !fa2_add_i64(end, c, &end) || !fa2_add_i64(end, head_dim, &end) ||
        !fa2_mul_i64(end, elem, &end))
        return fa2_fail(FA2_ERROR_SIZE_OVERFLOW,
                        "%s: the largest offset overflows int64 (batch=%" PRId64
                        " seqlen=%" PRId64 " heads=%" PRId64 ", strides %" PRId64
                        "/%" PRId64 "/%" PRId64 ")",
                        name, batch, seq, heads, bs, ss, hs);
    if (bytes)
        *bytes = end;
    return FA2_SUCCESS;
}

/* A packed batch (total_q >= 1): rows within int32 and at least the longest sequence,
 * the batch strides of Q and O 0, and K/V either packed (total_k rows, batch strides 0)
 * or paged (page_size >= 1: total_k 0, pages within int32 holding the longest sequence).
 * A dense one: total_k and the page fields 0 too. */
static fa2_status_t check_packed(const fa2_problem_t *p)
{
    fa2_status_t s;
    const int paged = p->page_size != 0;
    if (p->total_q == 0) {
        if (p->total_k != 0 || p->page_size != 0 || p->num_pages != 0 || p->pages_per_seq != 0)
            return fa2_fail(FA2_ERROR_INVALID_SIZE,
                            "total_k=%" PRId64 ", page_size=%" PRId64 ", num_pages=%" PRId64
                            ", pages_per_seq=%" PRId64 " with total_q=0: a dense batch has "
                            "none (a packed one sets total_q >= 1)",
                            p->total_k, p->page_size, p->num_pages, p->pages_per_seq);
        return FA2_SUCCESS;
    }
    if ((s = fa2_check_range("total_q", p->total_q, p->seqlen_q, INT32_MAX)))
        return s;
    if (paged) {
        if ((s = fa2_check_range("page_size", p->page_size, 1, FA2_MAX_SEQLEN)) ||
            (s = fa2_check_range("num_pages", p->num_pages, 1, INT32_MAX)) ||
            (s = fa2_check_range("pages_per_seq", p->pages_per_seq,
                             (p->seqlen_k + p->page_size - 1) / p->page_size, INT32_MAX)) ||
            (s = fa2_check_range("total_k", p->total_k, 0, 0)))
            return s;
    } else if ((s = fa2_check_range("total_k", p->total_k, p->seqlen_k, INT32_MAX)) ||
               (s = fa2_check_range("num_pages", p->num_pages, 0, 0)) ||
               (s = fa2_check_range("pages_per_seq", p->pages_per_seq, 0, 0))) {
        return s;
    }
    if (p->q_batch_stride || p->o_batch_stride ||
        (!paged && (p->k_batch_stride || p->v_batch_stride)))
        return fa2_fail(FA2_ERROR_BAD_STRIDE,
                        "a packed batch (total_q=%" PRId64 ") has batch strides 0 (q %" PRId64
                        ", k %" PRId64 ", v %" PRId64 ", o %" PRId64 "%s)",
                        p->total_q, p->q_batch_stride, p->k_batch_stride, p->v_batch_stride,
                        p->o_batch_stride, paged ? "; paged K/V: k and v are page strides" : "");
    return FA2_SUCCESS;
}

int fa2_layout_is_distinct(int64_t batch, int64_t seq, int64_t heads, int64_t head_dim,
                           int64_t batch_stride, int64_t seq_stride, int64_t head_stride)
{
    /* Dimensions of extent > 1, innermost (smallest stride) first; each stride must
     * step past everything the dimensions inside it reach. Sizes and strides are
     * validated, so the products fit in int64. */
    int64_t extent[3] = {batch, seq, heads}, stride[3] = {batch_stride, seq_stride, head_stride};
    int64_t span = head_dim; /* elements the head_dim row reaches: offsets [0, span) */
    int used[3] = {0, 0, 0};
    if (batch == 0 || seq == 0 || heads == 0)
        return 1; /* an empty tensor (seqlen_k = 0) holds no address at all */
    for (int round = 0; round < 3; ++round) {
        int pick = -1;
        for (int i = 0; i < 3; ++i)
            if (!used[i] && extent[i] > 1 && (pick < 0 || stride[i] < stride[pick]))
                pick = i;
        if (pick < 0)
            break;
        used[pick] = 1;
        if (stride[pick] < span)
            return 0;
        span += stride[pick] * (extent[pick] - 1);
    }
    return 1;
}

fa2_status_t fa2_validate_problem(const fa2_problem_t *p, const fa2_device_info_t *dev)
{
    fa2_status_t s;
    fa2_fwd_tile_t tile;
    int64_t n;

    if (!p)
        return fa2_fail(FA2_ERROR_NULL_POINTER, "problem is NULL");
    if (!dev)
        return fa2_fail(FA2_ERROR_NULL_POINTER, "device is NULL");
    /* Accept every version from v1 up to this library's own. */
    if (p->struct_size < FA2_PROBLEM_V1_SIZE || p->struct_size > sizeof(fa2_problem_t))
        return fa2_fail(FA2_ERROR_STRUCT_SIZE,
                        "problem->struct_size=%zu, expected %zu (set it with "
                        "fa2_problem_init)",
                        p->struct_size, sizeof(fa2_problem_t));
    if (dev->struct_size < FA2_DEVICE_INFO_V1_SIZE ||
        dev->struct_size > sizeof(fa2_device_info_t))
        return fa2_fail(FA2_ERROR_STRUCT_SIZE,
                        "device->struct_size=%zu, expected %zu (sizeof(fa2_device_info_t))",
                        dev->struct_size, sizeof(fa2_device_info_t));

    if (p->dtype != FA2_DTYPE_FP16 && p->dtype != FA2_DTYPE_BF16)
        return fa2_fail(FA2_ERROR_UNSUPPORTED_DTYPE,
                        "dtype=%d is not supported (FA2_DTYPE_FP16=1, FA2_DTYPE_BF16=2)",
                        (int)p->dtype);
    if ((p->dtype == FA2_DTYPE_FP16 && !FA2_BUILT_FP16) ||
        (p->dtype == FA2_DTYPE_BF16 && !FA2_BUILT_BF16))
        return fa2_fail(FA2_ERROR_UNSUPPORTED_DTYPE,
                        "dtype=%s: this build does not compile it (CMake FA2_DTYPES)",
                        p->dtype == FA2_DTYPE_FP16 ? "fp16" : "bf16");

    if (p->reserved0 != 0 || p->reserved1 != 0)
        return fa2_fail(FA2_ERROR_RESERVED,
                        "problem->reserved%d=%d must be zero (set the problem with "
                        "fa2_problem_init)",
                        p->reserved0 != 0 ? 0 : 1,
                        (int)(p->reserved0 != 0 ? p->reserved0 : p->reserved1));
    if (dev->reserved0 != 0)
        return fa2_fail(FA2_ERROR_RESERVED, "device->reserved0=%d must be zero",
                        (int)dev->reserved0);

    if ((s = fa2_check_range("batch", p->batch, 1, INT32_MAX)) ||
        (s = fa2_check_range("seqlen_q", p->seqlen_q, 1, FA2_MAX_SEQLEN)) ||
        (s = fa2_check_range("seqlen_k", p->seqlen_k, 0, FA2_MAX_SEQLEN)) ||
        (s = fa2_check_range("heads_q", p->heads_q, 1, INT32_MAX)) ||
        (s = fa2_check_range("heads_kv", p->heads_kv, 1, INT32_MAX)))
        return s;

    if (p->head_dim < 8 || p->head_dim > 256 || p->head_dim % 8 != 0 ||
        full_build_bucket(p->head_dim) == 0)
        return fa2_fail(FA2_ERROR_UNSUPPORTED_HEAD_DIM,
                        "head_dim=%" PRId64 " is not supported (multiples of 8 from 8 to 256)",
                        p->head_dim);
    if (fa2_head_dim_bucket(p->head_dim) == 0)
        return fa2_fail(FA2_ERROR_UNSUPPORTED_HEAD_DIM,
                        "head_dim=%" PRId64 " runs in the head_dim=%d kernels, which this build "
                        "does not compile (CMake FA2_HEAD_DIMS)",
                        p->head_dim, full_build_bucket(p->head_dim));

    if (p->heads_q % p->heads_kv != 0)
        return fa2_fail(FA2_ERROR_HEADS_MISMATCH,
                        "heads_q=%" PRId64 " is not a multiple of heads_kv=%" PRId64,
                        p->heads_q, p->heads_kv);

    if ((s = fa2_check_stride("q_batch_stride", p->q_batch_stride, 8)) ||
        (s = fa2_check_stride("q_seq_stride", p->q_seq_stride, 8)) ||
        (s = fa2_check_stride("q_head_stride", p->q_head_stride, 8)) ||
        (s = fa2_check_stride("k_batch_stride", p->k_batch_stride, 8)) ||
        (s = fa2_check_stride("k_seq_stride", p->k_seq_stride, 8)) ||
        (s = fa2_check_stride("k_head_stride", p->k_head_stride, 8)) ||
        (s = fa2_check_stride("v_batch_stride", p->v_batch_stride, 8)) ||
        (s = fa2_check_stride("v_seq_stride", p->v_seq_stride, 8)) ||
        (s = fa2_check_stride("v_head_stride", p->v_head_stride, 8)) ||
        (s = fa2_check_stride("o_batch_stride", p->o_batch_stride, 8)) ||
        (s = fa2_check_stride("o_seq_stride", p->o_seq_stride, 8)) ||
        (s = fa2_check_stride("o_head_stride", p->o_head_stride, 8)))
        return s;

    if ((s = check_packed(p)))
        return s;
    if ((s = fa2_check_range("max_splits", p->max_splits, 0, FA2_MAX_SPLITS)) ||
        (s = fa2_check_range("batch_invariant", p->batch_invariant, 0, 1)))
        return s;
    if (p->reserved2 != 0)
        return fa2_fail(FA2_ERROR_RESERVED, "problem->reserved2=%d must be zero",
                        (int)p->reserved2);
    if (!(p->softcap == 0.0f ||
          (p->softcap >= FA2_MIN_SOFTCAP && p->softcap <= FA2_MAX_SOFTCAP)))
        return fa2_fail(FA2_ERROR_BAD_SCALE,
                        "softcap=%g is not supported (0 = off, or in [%g, %g])",
                        (double)p->softcap, (double)FA2_MIN_SOFTCAP, (double)FA2_MAX_SOFTCAP);
    if ((s = fa2_check_range("alibi", p->alibi, 0, 1)) ||
        (s = fa2_check_range("sinks", p->sinks, 0, 1)))
        return s;
    if (p->reserved3 != 0)
        return fa2_fail(FA2_ERROR_RESERVED, "problem->reserved3=%d must be zero",
                        (int)p->reserved3);
    if (p->alibi_batch_stride < 0 || p->alibi_batch_stride > INT32_MAX ||
        (!p->alibi && p->alibi_batch_stride != 0))
        return fa2_fail(FA2_ERROR_BAD_STRIDE,
                        "alibi_batch_stride=%lld is not supported (0 or, with alibi=1, up to "
                        "2^31 - 1; alibi=%d)",
                        (long long)p->alibi_batch_stride, (int)p->alibi);
    if (p->alibi && fa2_alibi_slopes_bytes(p) < 0)
        return fa2_fail(FA2_ERROR_SIZE_OVERFLOW,
                        "alibi_batch_stride=%lld: the slopes of batch=%lld sequences span more "
                        "bytes than int64 holds",
                        (long long)p->alibi_batch_stride, (long long)p->batch);
    /* The tensors as laid out (a packed batch: its rows; paged K/V: its pages). */
    const fa2_layout_dims_t qd = fa2_layout_dims(p, 1), kd = fa2_layout_dims(p, 0);

    /* Sizes are now in range and strides non-negative: the checked helpers apply. */
    if ((s = fa2_check_extent("q", qd.batch, qd.rows, p->heads_q, p->head_dim,
                              p->q_batch_stride, p->q_seq_stride, p->q_head_stride, 2, NULL)) ||
        (s = fa2_check_extent("k", kd.batch, kd.rows, p->heads_kv, p->head_dim,
                              p->k_batch_stride, p->k_seq_stride, p->k_head_stride, 2, NULL)) ||
        (s = fa2_check_extent("v", kd.batch, kd.rows, p->heads_kv, p->head_dim,
                              p->v_batch_stride, p->v_seq_stride, p->v_head_stride, 2, NULL)) ||
        (s = fa2_check_extent("o", qd.batch, qd.rows, p->heads_q, p->head_dim,
                              p->o_batch_stride, p->o_seq_stride, p->o_head_stride, 2, NULL)))
        return s;
    if (!fa2_layout_is_distinct(qd.batch, qd.rows, p->heads_q, p->head_dim,
                                p->o_batch_stride, p->o_seq_stride, p->o_head_stride))
        return fa2_fail(FA2_ERROR_OVERLAP,
                        "o: strides %" PRId64 "/%" PRId64 "/%" PRId64 " (batch/seq/head) "
                        "give two elements of O one address (batch=%" PRId64
                        " rows=%" PRId64 " heads_q=%" PRId64 " head_dim=%" PRId64 ")",
                        p->o_batch_stride, p->o_seq_stride, p->o_head_stride, qd.batch,
                        qd.rows, p->heads_q, p->head_dim);
    if (!fa2_mul_i64(qd.batch, p->heads_q, &n) || !fa2_mul_i64(n, qd.rows, &n) ||
        !fa2_mul_i64(n, 4, &n))
        return fa2_fail(FA2_ERROR_SIZE_OVERFLOW,
                        "lse: batch=%" PRId64 " * heads_q=%" PRId64 " * rows=%" PRId64
                        " float32 values overflow int64 bytes",
                        qd.batch, p->heads_q, qd.rows);

    if (p->deterministic != 0 && p->deterministic != 1)
        return fa2_fail(FA2_ERROR_INVALID_SIZE, "deterministic=%d is not 0 or 1",
                        (int)p->deterministic);
    if (p->causal != 0 && p->causal != 1)
        return fa2_fail(FA2_ERROR_BAD_WINDOW, "causal=%d is not 0 or 1", (int)p->causal);
    if (p->window_left < -1 || p->window_left > FA2_MAX_WINDOW)
        return fa2_fail(FA2_ERROR_BAD_WINDOW,
                        "window_left=%" PRId64 " is out of range [-1, %d] (FA2_MAX_WINDOW)",
                        p->window_left, FA2_MAX_WINDOW);
    if (p->window_right < -1 || p->window_right > FA2_MAX_WINDOW)
        return fa2_fail(FA2_ERROR_BAD_WINDOW,
                        "window_right=%" PRId64 " is out of range [-1, %d] (FA2_MAX_WINDOW)",
                        p->window_right, FA2_MAX_WINDOW);
    if (p->causal && p->window_right != -1 && p->window_right != 0)
        return fa2_fail(FA2_ERROR_BAD_WINDOW,
                        "window_right=%" PRId64 " conflicts with causal=1 (use -1 or 0)",
                        p->window_right);

    if (!(p->softmax_scale >= 0.0f && p->softmax_scale <= FA2_MAX_SOFTMAX_SCALE))
        return fa2_fail(FA2_ERROR_BAD_SCALE,
                        "softmax_scale=%g is not supported (0 for 1/sqrt(head_dim), or in "
                        "(0, %g], FA2_MAX_SOFTMAX_SCALE)",
                        (double)p->softmax_scale, (double)FA2_MAX_SOFTMAX_SCALE);

    if (dev->cc_major < 8)
        return fa2_fail(FA2_ERROR_UNSUPPORTED_DEVICE,
                        "device compute capability %d.%d: libfa2 needs sm_80 or newer",
                        (int)dev->cc_major, (int)dev->cc_minor);

    /* The compiled tile's exact shared memory; see docs/planning.md. */
    if (!fa2_fwd_tile_for_device(fa2_head_dim_bucket(p->head_dim), p, dev, &tile))
        return fa2_fail(FA2_ERROR_UNSUPPORTED_HEAD_DIM,
                        "head_dim=%" PRId64 " has no compiled kernel", p->head_dim);
    n = tile.smem_bytes;
    if (n > dev->smem_per_block_optin)
        return fa2_fail(FA2_ERROR_SHARED_MEMORY,
                        "head_dim=%" PRId64 " (kernel %dx%d, d=%d) needs %" PRId64
                        " bytes of shared memory per block, device has %" PRId64
                        " (smem_per_block_optin)",
                        p->head_dim, (int)tile.block_m, (int)tile.block_n,
                        (int)tile.head_dim_bucket, n, dev->smem_per_block_optin);
    return FA2_SUCCESS;
}
