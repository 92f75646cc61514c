/* The forward kernel's parameters: a plain C struct shared by src/ (which fills it
 * from a validated plan) and kernels/ (which trusts it). Internal, not installed. */
#ifndef FA2_FWD_PARAMS_H
#define FA2_FWD_PARAMS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fa2_fwd_params_t {
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

    int32_t batch;
    int32_t heads_q;
    int32_t heads_kv;
    int32_t seqlen_q;
    int32_t seqlen_k;
    int32_t head_dim;        /* actual head dim, <= head_dim_bucket */
    int32_t head_dim_bucket; /* compiled head dim */
    int32_t is_bf16;         /* 1: bf16, 0: fp16 */
    int32_t use_sm90;        /* 1: the plan chose the Hopper (wgmma) kernel */
    int32_t window_left;     /* -1 = unbounded; causal already folded into window_right */
    int32_t window_right;    /* -1 = unbounded */
    float softmax_scale;     /* scale applied to Q K^T (natural log units) */
    float scale_log2;        /* softmax_scale * log2(e) */
} fa2_fwd_params_t;

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

/* Launches the forward kernel for p->head_dim_bucket / p->is_bf16 on `stream`
 * (a cudaStream_t). Returns a cudaError_t value (0 = cudaSuccess). */
int fa2_fwd_launch(const fa2_fwd_params_t *p, void *stream);

#ifdef __cplusplus
}
#endif

#endif
