/* fa2_backward and fa2_backward_varlen: check the call against its plan, fill the
 * kernel parameters, launch the backward kernels. Every check comes before the launch: a failed call
 * writes nothing. */
#include <inttypes.h>

#include <cuda_runtime_api.h>

#include "common/params.h"
#include "internal.h"

/* The reason fa2_plan recorded when this plan has no backward. */
static fa2_status_t check_backward_supported(const fa2_plan_t *plan)
{
    const fa2_problem_t *pr = &plan->problem;
    if (plan->bwd_supported)
        return FA2_SUCCESS;
    switch (plan->bwd_status) {
    case FA2_ERROR_INVALID_SIZE:
        return fa2_fail(FA2_ERROR_INVALID_SIZE,
                        "a backward grid for batch=%" PRId64 " heads_q=%" PRId64
                        " seqlen_q=%" PRId64 " seqlen_k=%" PRId64
                        " exceeds the CUDA limit of 2147483647 thread blocks",
                        pr->batch, pr->heads_q, pr->seqlen_q, pr->seqlen_k);
    case FA2_ERROR_OVERLAP:
        return fa2_fail(FA2_ERROR_OVERLAP,
                        "dq, dk and dv are written with q's, k's and v's strides, and one of "
                        "them repeats an address (q %" PRId64 "/%" PRId64 "/%" PRId64
                        ", k %" PRId64 "/%" PRId64 "/%" PRId64 ", v %" PRId64 "/%" PRId64
                        "/%" PRId64 "): give the backward distinct rows and sum a broadcast "
                        "gradient yourself",
                        pr->q_batch_stride, pr->q_seq_stride, pr->q_head_stride,
                        pr->k_batch_stride, pr->k_seq_stride, pr->k_head_stride,
                        pr->v_batch_stride, pr->v_seq_stride, pr->v_head_stride);
    case FA2_ERROR_UNSUPPORTED:
        return fa2_fail(FA2_ERROR_UNSUPPORTED,
                        "a paged K/V cache (page_size=%" PRId64 ") has no backward",
                        pr->page_size);
    case FA2_ERROR_SIZE_OVERFLOW:
        return fa2_fail(FA2_ERROR_SIZE_OVERFLOW,
                        "the backward workspace of batch=%" PRId64 " heads_q=%" PRId64
                        " seqlen_q=%" PRId64 " head_dim=%" PRId64 " overflows int64 bytes",
                        pr->batch, pr->heads_q, pr->seqlen_q, pr->head_dim);
    default: { /* FA2_ERROR_SHARED_MEMORY */
        /* Say so when the other mode's kernels fit (the deterministic backward's tiles
         * are smaller on the mma.sync path). */
        fa2_problem_t other = plan->problem;
        fa2_plan_t alt;
        other.deterministic = !other.deterministic;
        const int fits =
            fa2_plan(&other, &plan->device, &alt) == FA2_SUCCESS && alt.bwd_supported;
        return fa2_fail(FA2_ERROR_SHARED_MEMORY,
                        "the backward kernels need %" PRId64 " bytes of shared memory per "
                        "block (head_dim bucket %d), more than the plan's device allows "
                        "(%" PRId64 ")%s",
                        plan->bwd_smem_bytes, (int)plan->head_dim_bucket,
                        plan->device.smem_per_block_optin,
                        fits ? (other.deterministic
                                    ? "; with deterministic = 1 the backward fits"
                                    : "; with deterministic = 0 the backward fits")
                             : "");
    }
    }
}

/* dQ, dK, dV, dsinks and the workspace may overlap neither each other nor any input. */
static fa2_status_t check_backward_overlap(const fa2_plan_t *plan, const void *q,
                                           const void *k, const void *v, const void *o,
                                           const void *d_o, const float *lse, const void *dq,
                                           const void *dk, const void *dv,
                                           const fa2_score_tensors_t *t,
                                           const void *workspace)
{
    const fa2_problem_t *pr = &plan->problem;
    const int64_t rows = fa2_lse_rows(pr);
    const int64_t per_head = pr->heads_q * 4; /* sinks, dsinks: float [heads_q] */
    const fa2_span_t inputs[8] = {
        fa2_layout_span(pr, FA2_LAYOUT_Q, "q", q), fa2_layout_span(pr, FA2_LAYOUT_K, "k", k),
        fa2_layout_span(pr, FA2_LAYOUT_V, "v", v), fa2_layout_span(pr, FA2_LAYOUT_O, "o", o),
        fa2_layout_span(pr, FA2_LAYOUT_O, "d_o", d_o), fa2_bytes_span("lse", lse, rows * 4),
        fa2_bytes_span("alibi_slopes", t->alibi_slopes,
                       t->alibi_slopes ? fa2_alibi_slopes_bytes(pr) : 0),
        fa2_bytes_span("sinks", t->sinks, t->sinks ? per_head : 0)};
    const fa2_span_t outputs[5] = {
        fa2_layout_span(pr, FA2_LAYOUT_Q, "dq", dq), fa2_layout_span(pr, FA2_LAYOUT_K, "dk", dk),
        fa2_layout_span(pr, FA2_LAYOUT_V, "dv", dv),
        fa2_bytes_span("dsinks", t->dsinks, t->dsinks ? per_head : 0),
        fa2_bytes_span("workspace", workspace, plan->bwd_workspace_bytes)};
    return fa2_check_disjoint(outputs, 5, inputs, 8);
}

fa2_status_t fa2_run_backward(const fa2_plan_t *plan, const void *q, const void *k,
                              const void *v, const void *o, const void *d_o,
                              const float *lse, void *dq, void *dk, void *dv,
                              const fa2_seq_offsets_t *offsets,
                              const fa2_score_tensors_t *scores, void *workspace,
                              size_t workspace_bytes, void *stream)
{
    const fa2_score_tensors_t none = {NULL, NULL, NULL};
    fa2_params_t p;
    fa2_status_t s;
    int e, outputs_queued = 0;

    fa2_clear_error();
    if (!plan)
        return fa2_fail(FA2_ERROR_NULL_POINTER, "plan is NULL");
    if (!q || !k || !v || !o || !d_o || !lse || !dq || !dk || !dv)
        return fa2_fail(FA2_ERROR_NULL_POINTER, "%s is NULL",
                        !q ? "q" : !k ? "k" : !v ? "v" : !o ? "o" : !d_o ? "d_o"
                        : !lse ? "lse" : !dq ? "dq" : !dk ? "dk" : "dv");
    if ((s = fa2_check_offsets_given(offsets)) || (s = fa2_check_plan(plan)))
        return s;
    if (plan->problem.page_size) /* a paged cache has no backward, whatever the call */
        return check_backward_supported(plan);
    if ((s = fa2_check_entry_point(plan, offsets, "fa2_backward", "fa2_backward_varlen")) ||
        (s = check_backward_supported(plan)) ||
        (s = fa2_check_score_tensors(&plan->problem, scores, 1, "fa2_backward_with")))
        return s;
    if (!scores)
        scores = &none;
    if ((s = fa2_check_align("q", q, 16)) || (s = fa2_check_align("k", k, 16)) ||
        (s = fa2_check_align("v", v, 16)) || (s = fa2_check_align("o", o, 16)) ||
        (s = fa2_check_align("d_o", d_o, 16)) || (s = fa2_check_align("lse", lse, 4)) ||
        (s = fa2_check_align("dq", dq, 16)) || (s = fa2_check_align("dk", dk, 16)) ||
        (s = fa2_check_align("dv", dv, 16)) ||
        (s = fa2_check_align("workspace", workspace, 16)))
        return s;
    if (!workspace)
        return fa2_fail(FA2_ERROR_WORKSPACE, "workspace is NULL, the plan needs %" PRId64
                        " bytes (plan->bwd_workspace_bytes)", plan->bwd_workspace_bytes);
    if ((uint64_t)workspace_bytes < (uint64_t)plan->bwd_workspace_bytes)
        return fa2_fail(FA2_ERROR_WORKSPACE,
                        "workspace_bytes=%zu, the plan needs %" PRId64
                        " (plan->bwd_workspace_bytes)",
                        workspace_bytes, plan->bwd_workspace_bytes);

    if ((s = check_backward_overlap(plan, q, k, v, o, d_o, lse, dq, dk, dv, scores,
                                    workspace)))
        return s;
    if ((s = fa2_check_device(plan, 1)))
        return s;

    /* The kernels only read q, k, v, o and lse; the const is restored there. */
    fa2_fill_params(plan, q, k, v, (void *)o, (float *)lse, offsets, &p);
    p.d_o = d_o;
    p.dq = dq;
    p.dk = dk;
    p.dv = dv;
    p.softcap = plan->problem.softcap;
    p.alibi_slopes = scores->alibi_slopes;
    p.alibi_batch_stride = plan->problem.alibi_batch_stride;
    p.sinks = scores->sinks;
    p.dsinks = scores->dsinks;
    /* the plan's workspace layout */
    p.d_sum = (float *)workspace;
    p.dq_accum = plan->bwd_accum_offset ? (float *)((char *)workspace + plan->bwd_accum_offset)
                                        : NULL;
    p.kernel_family = plan->bwd_arch;
    p.bwd_kernel = plan->bwd_kernel;
    p.scores = plan->bwd_scores;

    e = fa2_bwd_launch(&p, stream, &outputs_queued);
    if (e != 0)
        return fa2_fail(FA2_ERROR_CUDA, "backward kernel launch (head_dim=%d, %s): %s%s",
                        (int)p.head_dim, p.dtype == FA2_DTYPE_BF16 ? "bf16" : "fp16",
                        cudaGetErrorString((cudaError_t)e),
                        outputs_queued ? "; a kernel writing dq, dk, dv was already queued, "
                                         "so they may be partly written"
                                       : "");
    return FA2_SUCCESS;
}

fa2_status_t fa2_backward(const fa2_plan_t *plan, const void *q, const void *k,
                          const void *v, const void *o, const void *d_o,
                          const float *lse, void *dq, void *dk, void *dv,
                          void *workspace, size_t workspace_bytes, void *stream)
{
    return fa2_run_backward(plan, q, k, v, o, d_o, lse, dq, dk, dv, NULL, NULL, workspace,
                            workspace_bytes, stream);
}

fa2_status_t fa2_backward_varlen(const fa2_plan_t *plan, const void *q, const void *k,
                                 const void *v, const void *o, const void *d_o,
                                 const float *lse, void *dq, void *dk, void *dv,
                                 const int32_t *cu_seqlens_q, const int32_t *cu_seqlens_k,
                                 const int32_t *seqused_k, void *workspace,
                                 size_t workspace_bytes, void *stream)
{
    const fa2_seq_offsets_t offsets = {cu_seqlens_q, cu_seqlens_k, seqused_k, NULL};
    return fa2_run_backward(plan, q, k, v, o, d_o, lse, dq, dk, dv, &offsets, NULL,
                            workspace, workspace_bytes, stream);
}
