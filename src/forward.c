/* fa2_forward: check the call against its plan, fill the kernel parameters, launch.
 * Every check comes before the launch: a failed call writes nothing. */
#include <inttypes.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "common/fast_div.h"
#include "common/paged_row_space.h"
#include "common/params.h"
#include "internal.h"

fa2_status_t fa2_check_align(const char *name, const void *ptr, uintptr_t align)
{
    if ((uintptr_t)ptr % align != 0)
        return fa2_fail(FA2_ERROR_MISALIGNED, "%s=%p is not %u-byte aligned", name, ptr,
                        (unsigned)align);
    return FA2_SUCCESS;
}

void fa2_fill_params(const fa2_plan_t *plan, const void *q, const void *k,
                     const void *v, void *o, float *lse, const fa2_seq_offsets_t *offsets,
                     fa2_params_t *p)
{
    /* plan->problem was validated by fa2_plan: every size fits in int32. */
    const fa2_problem_t *pr = &plan->problem;
    memset(p, 0, sizeof(*p));
    p->q = q;
    p->k = k;
    p->v = v;
    p->o = o;
    p->lse = lse;
    if (offsets) {
        p->cu_seqlens_q = offsets->cu_seqlens_q;
        p->cu_seqlens_k = offsets->cu_seqlens_k;
        p->seqused_k = offsets->seqused_k;
        p->page_table = pr->page_size ? offsets->page_table : NULL;
        if (pr->page_size)
            p->cu_seqlens_k = NULL; /* not read: keys come from the pages */
    }
    p->q_batch_stride = pr->q_batch_stride;
    p->q_seq_stride = pr->q_seq_stride;
    p->q_head_stride = pr->q_head_stride;
    p->k_batch_stride = pr->k_batch_stride;
    p->k_seq_stride = pr->k_seq_stride;
    p->k_head_stride = pr->k_head_stride;
    p->v_batch_stride = pr->v_batch_stride;
    p->v_seq_stride = pr->v_seq_stride;
    p->v_head_stride = pr->v_head_stride;
    p->o_batch_stride = pr->o_batch_stride;
    p->o_seq_stride = pr->o_seq_stride;
    p->o_head_stride = pr->o_head_stride;
    /* Packed: [heads_q, total_q]; dense: [batch, heads_q, seqlen_q]. */
    p->stats_batch_stride = pr->total_q ? 0 : pr->heads_q * pr->seqlen_q;
    p->stats_head_stride = pr->total_q ? pr->total_q : pr->seqlen_q;
    p->total_q = (int32_t)pr->total_q;
    p->total_k = (int32_t)pr->total_k;
    p->page_size = (int32_t)pr->page_size;
    p->page_div_magic = pr->page_size ? fa2_fast_div_magic((uint32_t)pr->page_size) : 0;
    p->page_rows = pr->page_size ? fa2_paged_rows_per_page(pr->page_size, pr->num_pages,
                                                           pr->k_batch_stride, pr->k_seq_stride,
                                                           pr->v_batch_stride, pr->v_seq_stride,
                                                           2 /* bytes: fp16, bf16 */)
                                 : 0;
    p->pages_per_seq = (int32_t)pr->pages_per_seq;
    p->num_pages = (int32_t)pr->num_pages;
    p->batch = (int32_t)pr->batch;
    p->heads_q = (int32_t)pr->heads_q;
    p->heads_kv = (int32_t)pr->heads_kv;
    p->seqlen_q = (int32_t)pr->seqlen_q;
    p->seqlen_k = (int32_t)pr->seqlen_k;
    p->head_dim = (int32_t)pr->head_dim;
    p->head_dim_bucket = plan->head_dim_bucket;
    p->dtype = pr->dtype;
    p->kernel_family = plan->fwd_arch;
    p->window_left = fa2_kernel_window_left(pr->window_left, pr->seqlen_k);
    p->window_right = fa2_kernel_window_right(pr->causal ? 0 : pr->window_right, pr->seqlen_q);
    p->softmax_scale = pr->softmax_scale;
    p->scale_log2 = pr->softmax_scale * 1.4426950408889634f; /* log2(e) */
}

/* O, LSE and the workspace (outputs) may overlap neither each other nor Q, K, V and the
 * metadata arrays. */
static fa2_status_t check_forward_overlap(const fa2_plan_t *plan, const void *q,
                                          const void *k, const void *v, const void *o,
                                          const float *lse, const fa2_seq_offsets_t *offsets,
                                          const void *workspace)
{
    const fa2_problem_t *pr = &plan->problem;
    fa2_span_t inputs[3 + FA2_OFFSET_SPANS] = {fa2_layout_span(pr, FA2_LAYOUT_Q, "q", q),
                                               fa2_layout_span(pr, FA2_LAYOUT_K, "k", k),
                                               fa2_layout_span(pr, FA2_LAYOUT_V, "v", v)};
    fa2_offset_spans(pr, offsets, inputs + 3);
    const fa2_span_t outputs[3] = {fa2_layout_span(pr, FA2_LAYOUT_O, "o", o),
                                   fa2_bytes_span("lse", lse, lse ? fa2_lse_rows(pr) * 4 : 0),
                                   fa2_bytes_span("workspace", workspace, plan->workspace_bytes)};
    return fa2_check_disjoint(outputs, 3, inputs, 3 + FA2_OFFSET_SPANS);
}

fa2_status_t fa2_run_forward(const fa2_plan_t *plan, const void *q, const void *k,
                             const void *v, void *o, float *lse,
                             const fa2_seq_offsets_t *offsets,
                             const fa2_score_tensors_t *scores, void *workspace,
                             size_t workspace_bytes, void *stream)
{
    fa2_params_t p;
    fa2_status_t s;
    int e;

    fa2_clear_error();
    if (!plan)
        return fa2_fail(FA2_ERROR_NULL_POINTER, "plan is NULL");
    if (!q)
        return fa2_fail(FA2_ERROR_NULL_POINTER, "q is NULL");
    if (!k)
        return fa2_fail(FA2_ERROR_NULL_POINTER, "k is NULL");
    if (!v)
        return fa2_fail(FA2_ERROR_NULL_POINTER, "v is NULL");
    if (!o)
        return fa2_fail(FA2_ERROR_NULL_POINTER, "o is NULL");
    if ((s = fa2_check_offsets_given(offsets)) || (s = fa2_check_plan(plan)) ||
        (s = fa2_check_entry_point(plan, offsets, "fa2_forward", "fa2_forward_varlen")) ||
        (s = fa2_check_score_tensors(&plan->problem, scores, 0, "fa2_forward_with")))
        return s;
    if ((s = fa2_check_align("q", q, 16)) || (s = fa2_check_align("k", k, 16)) ||
        (s = fa2_check_align("v", v, 16)) || (s = fa2_check_align("o", o, 16)) ||
        (s = fa2_check_align("lse", lse, 4)))
        return s;
    if (plan->workspace_bytes < 0 || (uint64_t)workspace_bytes < (uint64_t)plan->workspace_bytes)
        return fa2_fail(FA2_ERROR_WORKSPACE,
                        "workspace_bytes=%zu, the plan needs %" PRId64, workspace_bytes,
                        plan->workspace_bytes);
    if (plan->workspace_bytes > 0 && !workspace)
        return fa2_fail(FA2_ERROR_WORKSPACE, "workspace is NULL, the plan needs %" PRId64
                        " bytes", plan->workspace_bytes);
    if ((s = fa2_check_align("workspace", workspace, 4)))
        return s;
    if ((s = check_forward_overlap(plan, q, k, v, o, lse, offsets, workspace)))
        return s;

    if ((s = fa2_check_device(plan, 0)))
        return s;

    fa2_fill_params(plan, q, k, v, o, lse, offsets, &p);
    p.varlen_check = offsets ? (int32_t *)workspace : NULL;
    p.fwd_kernel = plan->fwd_kernel;
    p.scores = plan->fwd_scores;
    p.page_box_rows = plan->page_box_rows;
    p.splits = plan->splits;
    p.split_tiles = plan->split_tiles;
    p.decode_stages = plan->decode_stages;
    p.softcap = plan->problem.softcap;
    p.alibi_slopes = scores ? scores->alibi_slopes : NULL;
    p.alibi_batch_stride = plan->problem.alibi_batch_stride;
    p.sinks = scores ? scores->sinks : NULL;
    if (plan->splits > 1) {
        p.accum_rows = plan->split_rows;
        p.lse_accum = (float *)((char *)workspace + plan->split_lse_offset);
        p.o_accum = (float *)((char *)workspace + plan->split_o_offset);
    }
    e = fa2_fwd_launch(&p, stream);
    if (e != 0)
        return fa2_fail(FA2_ERROR_CUDA, "forward kernel launch (head_dim=%d, %s): %s",
                        (int)p.head_dim, p.dtype == FA2_DTYPE_BF16 ? "bf16" : "fp16",
                        cudaGetErrorString((cudaError_t)e));
    return FA2_SUCCESS;
}

fa2_status_t fa2_forward(const fa2_plan_t *plan, const void *q, const void *k,
                         const void *v, void *o, float *lse, void *workspace,
                         size_t workspace_bytes, void *stream)
{
    return fa2_run_forward(plan, q, k, v, o, lse, NULL, NULL, workspace, workspace_bytes,
                           stream);
}

fa2_status_t fa2_forward_varlen(const fa2_plan_t *plan, const void *q, const void *k,
                                const void *v, void *o, float *lse,
                                const int32_t *cu_seqlens_q, const int32_t *cu_seqlens_k,
                                const int32_t *seqused_k, const int32_t *page_table,
                                void *workspace, size_t workspace_bytes, void *stream)
{
    const fa2_seq_offsets_t offsets = {cu_seqlens_q, cu_seqlens_k, seqused_k, page_table};
    return fa2_run_forward(plan, q, k, v, o, lse, &offsets, NULL, workspace, workspace_bytes,
                           stream);
}
