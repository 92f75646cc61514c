/* fa2_varlen_check: read back the per-sequence metadata checks a packed forward wrote
 * into its workspace (kernels/common/varlen_check.cuh). */
#include <inttypes.h>

#include <cuda_runtime_api.h>

#include "internal.h"

static const char *check_name(int32_t check)
{
    switch (check) {
    case FA2_VARLEN_CU_SEQLENS_Q:
        return "cu_seqlens_q (negative, not 0 at the first sequence, decreasing, or past "
               "total_q)";
    case FA2_VARLEN_SEQLEN_Q:
        return "query length above the planned seqlen_q";
    case FA2_VARLEN_CU_SEQLENS_K:
        return "cu_seqlens_k (negative, not 0 at the first sequence, decreasing, or past "
               "total_k)";
    case FA2_VARLEN_SEQLEN_K:
        return "key count negative or above the planned seqlen_k";
    case FA2_VARLEN_SEQUSED_K:
        return "seqused_k above the keys cu_seqlens_k gives the sequence";
    case FA2_VARLEN_PAGE_ID:
        return "a page id outside [0, num_pages)";
    }
    return "an unknown check";
}

fa2_status_t fa2_varlen_check(const fa2_plan_t *plan, const void *workspace,
                              size_t workspace_bytes, int64_t *sequence,
                              fa2_varlen_check_t *check)
{
    fa2_status_t s;
    int32_t chunk[1024];

    fa2_clear_error();
    if (!plan)
        return fa2_fail(FA2_ERROR_NULL_POINTER, "plan is NULL");
    if (!workspace)
        return fa2_fail(FA2_ERROR_NULL_POINTER, "workspace is NULL");
    if ((s = fa2_check_plan(plan)))
        return s;
    const fa2_problem_t *pr = &plan->problem;
    if (!pr->total_q)
        return fa2_fail(FA2_ERROR_UNSUPPORTED,
                        "fa2_varlen_check: the plan is for a dense batch (total_q=0): its "
                        "forward checks no metadata");
    if ((uint64_t)workspace_bytes < (uint64_t)plan->workspace_bytes)
        return fa2_fail(FA2_ERROR_WORKSPACE, "workspace_bytes=%zu, the plan needs %" PRId64,
                        workspace_bytes, plan->workspace_bytes);
    if ((s = fa2_check_align("workspace", workspace, 4)))
        return s;

    const int32_t *codes = (const int32_t *)workspace;
    for (int64_t first = 0; first < pr->batch; first += 1024) {
        const int64_t n = pr->batch - first < 1024 ? pr->batch - first : 1024;
        const cudaError_t e =
            cudaMemcpy(chunk, codes + first, (size_t)n * 4, cudaMemcpyDeviceToHost);
        if (e != cudaSuccess)
            return fa2_fail(FA2_ERROR_CUDA, "fa2_varlen_check: copying the checks: %s",
                            cudaGetErrorString(e));
        for (int64_t i = 0; i < n; ++i)
            if (chunk[i] != FA2_VARLEN_OK) {
                if (sequence)
                    *sequence = first + i;
                if (check)
                    *check = (fa2_varlen_check_t)chunk[i];
                return fa2_fail(FA2_ERROR_BAD_METADATA, "sequence %" PRId64 " failed check %d: %s",
                                first + i, (int)chunk[i], check_name(chunk[i]));
            }
    }
    if (sequence)
        *sequence = -1;
    if (check)
        *check = FA2_VARLEN_OK;
    return FA2_SUCCESS;
}
