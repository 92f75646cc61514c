/* fa2_forward_with / fa2_backward_with: the calls' tensors in one struct (the score
 * variants' among them), checked here, then run by fa2_forward / fa2_forward_varlen /
 * fa2_backward / fa2_backward_varlen as the plan's layout says. */
#include <string.h>

#include "internal.h"

void fa2_forward_args_init(fa2_forward_args_t *args)
{
    if (!args)
        return;
    memset(args, 0, sizeof *args);
    args->struct_size = sizeof *args;
}

void fa2_backward_args_init(fa2_backward_args_t *args)
{
    if (!args)
        return;
    memset(args, 0, sizeof *args);
    args->struct_size = sizeof *args;
}

/* args NULL or its struct_size not `size` (not from `init`): the failure, else 0. */
static fa2_status_t check_args(const void *args, size_t struct_size, size_t size,
                               const char *init)
{
    if (!args)
        return fa2_fail(FA2_ERROR_NULL_POINTER, "args is NULL");
    if (struct_size != size)
        return fa2_fail(FA2_ERROR_STRUCT_SIZE,
                        "args->struct_size=%zu, expected %zu (set it with %s)", struct_size,
                        size, init);
    return FA2_SUCCESS;
}

/* The plan's problem when the plan looks like one from fa2_plan (else NULL: the call
 * it is handed to reports it). */
static const fa2_problem_t *plan_problem(const fa2_plan_t *plan)
{
    return plan && plan->struct_size == sizeof(fa2_plan_t) ? &plan->problem : NULL;
}

fa2_status_t fa2_forward_with(const fa2_plan_t *plan, const fa2_forward_args_t *a)
{
    fa2_status_t s;
    fa2_clear_error();
    if ((s = check_args(a, a ? a->struct_size : 0, sizeof *a, "fa2_forward_args_init")))
        return s;
    const fa2_problem_t *p = plan_problem(plan);
    const fa2_score_tensors_t scores = {a->alibi_slopes, a->sinks, NULL};
    if (p && !p->total_q) {
        if (a->cu_seqlens_q || a->cu_seqlens_k || a->seqused_k || a->page_table)
            return fa2_fail(FA2_ERROR_UNSUPPORTED,
                            "a dense plan (problem.total_q=0) takes no cu_seqlens_q, "
                            "cu_seqlens_k, seqused_k or page_table");
        return fa2_run_forward(plan, a->q, a->k, a->v, a->o, a->lse, NULL, &scores,
                               a->workspace, a->workspace_bytes, a->stream);
    }
    const fa2_seq_offsets_t offsets = {a->cu_seqlens_q, a->cu_seqlens_k, a->seqused_k,
                                       a->page_table};
    return fa2_run_forward(plan, a->q, a->k, a->v, a->o, a->lse, &offsets, &scores,
                           a->workspace, a->workspace_bytes, a->stream);
}

fa2_status_t fa2_backward_with(const fa2_plan_t *plan, const fa2_backward_args_t *a)
{
    fa2_status_t s;
    fa2_clear_error();
    if ((s = check_args(a, a ? a->struct_size : 0, sizeof *a, "fa2_backward_args_init")))
        return s;
    const fa2_problem_t *p = plan_problem(plan);
    const fa2_score_tensors_t scores = {a->alibi_slopes, a->sinks, a->dsinks};
    if (p && !p->total_q) {
        if (a->cu_seqlens_q || a->cu_seqlens_k || a->seqused_k)
            return fa2_fail(FA2_ERROR_UNSUPPORTED,
                            "a dense plan (problem.total_q=0) takes no cu_seqlens_q, "
                            "cu_seqlens_k or seqused_k");
        return fa2_run_backward(plan, a->q, a->k, a->v, a->o, a->d_o, a->lse, a->dq, a->dk,
                                a->dv, NULL, &scores, a->workspace, a->workspace_bytes,
                                a->stream);
    }
    const fa2_seq_offsets_t offsets = {a->cu_seqlens_q, a->cu_seqlens_k, a->seqused_k, NULL};
    return fa2_run_backward(plan, a->q, a->k, a->v, a->o, a->d_o, a->lse, a->dq, a->dk, a->dv,
                            &offsets, &scores, a->workspace, a->workspace_bytes, a->stream);
}
