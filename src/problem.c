/* fa2_problem_init: a problem with contiguous BSHD strides and default options. */
#include "internal.h"

/* a*b for a stride. No UB whatever the inputs: negative sizes give 0 (fa2_plan
 * rejects the size itself), an overflow saturates to the largest multiple of 8 so
 * that fa2_plan reports FA2_ERROR_SIZE_OVERFLOW rather than a bad stride. */
static int64_t fa2_stride_product(int64_t a, int64_t b)
{
    int64_t r;
    if (a < 0 || b < 0)
        return 0;
    if (!fa2_mul_i64(a, b, &r))
        return INT64_MAX / 8 * 8;
    return r;
}

void fa2_problem_init(fa2_problem_t *problem, fa2_dtype_t dtype, int64_t batch,
                      int64_t seqlen_q, int64_t seqlen_k, int64_t heads_q,
                      int64_t heads_kv, int64_t head_dim)
{
    fa2_problem_t p = {0};
    if (!problem)
        return;
    p.struct_size = sizeof(fa2_problem_t);
    p.dtype = dtype;
    p.causal = 0;
    p.batch = batch;
    p.seqlen_q = seqlen_q;
    p.seqlen_k = seqlen_k;
    p.heads_q = heads_q;
    p.heads_kv = heads_kv;
    p.head_dim = head_dim;
    p.window_left = -1;
    p.window_right = -1;
    p.softmax_scale = 0.0f;

    /* BSHD: [batch, seq, heads, head_dim], head_dim innermost. */
    p.q_head_stride = head_dim;
    p.q_seq_stride = fa2_stride_product(heads_q, head_dim);
    p.q_batch_stride = fa2_stride_product(seqlen_q, p.q_seq_stride);
    p.k_head_stride = head_dim;
    p.k_seq_stride = fa2_stride_product(heads_kv, head_dim);
    p.k_batch_stride = fa2_stride_product(seqlen_k, p.k_seq_stride);
    p.v_head_stride = p.k_head_stride;
    p.v_seq_stride = p.k_seq_stride;
    p.v_batch_stride = p.k_batch_stride;
    p.o_head_stride = p.q_head_stride;
    p.o_seq_stride = p.q_seq_stride;
    p.o_batch_stride = p.q_batch_stride;
    *problem = p;
}

void fa2_problem_init_varlen(fa2_problem_t *problem, fa2_dtype_t dtype, int64_t batch,
                             int64_t max_seqlen_q, int64_t max_seqlen_k, int64_t total_q,
                             int64_t total_k, int64_t heads_q, int64_t heads_kv,
                             int64_t head_dim)
{
    fa2_problem_t p;
    if (!problem)
        return;
    fa2_problem_init(&p, dtype, batch, max_seqlen_q, max_seqlen_k, heads_q, heads_kv,
                     head_dim);
    /* Packed rows: [total, heads, head_dim], no batch stride. */
    p.q_batch_stride = p.k_batch_stride = p.v_batch_stride = p.o_batch_stride = 0;
    p.total_q = total_q;
    p.total_k = total_k;
    *problem = p;
}

void fa2_problem_init_paged(fa2_problem_t *problem, fa2_dtype_t dtype, int64_t batch,
                            int64_t max_seqlen_q, int64_t max_seqlen_k, int64_t total_q,
                            int64_t heads_q, int64_t heads_kv, int64_t head_dim,
                            int64_t page_size, int64_t num_pages, int64_t pages_per_seq)
{
    fa2_problem_t p;
    if (!problem)
        return;
    fa2_problem_init_varlen(&p, dtype, batch, max_seqlen_q, max_seqlen_k, total_q, 0,
                            heads_q, heads_kv, head_dim);
    /* K and V: [num_pages, page_size, heads_kv, head_dim]; the batch stride is the page's. */
    p.k_batch_stride = fa2_stride_product(page_size, p.k_seq_stride);
    p.v_batch_stride = p.k_batch_stride;
    p.page_size = page_size;
    p.num_pages = num_pages;
    p.pages_per_seq = pages_per_seq;
    *problem = p;
}
