/* fa2_cache_write: check the call against its (paged) plan, then launch the copy. */
#include <inttypes.h>

#include <cuda_runtime_api.h>

#include "common/params.h"
#include "internal.h"

fa2_status_t fa2_cache_write(const fa2_plan_t *plan, const void *k_new, const void *v_new,
                             int64_t n_tokens, int64_t new_row_stride,
                             const int32_t *slot_mapping, void *k_cache, void *v_cache,
                             void *stream)
{
    fa2_cache_write_params_t p;
    fa2_status_t s;
    int e;

    fa2_clear_error();
    if (!plan)
        return fa2_fail(FA2_ERROR_NULL_POINTER, "plan is NULL");
    if (!k_new || !v_new || !slot_mapping || !k_cache || !v_cache)
        return fa2_fail(FA2_ERROR_NULL_POINTER, "%s is NULL",
                        !k_new ? "k_new" : !v_new ? "v_new" : !slot_mapping ? "slot_mapping"
                        : !k_cache ? "k_cache" : "v_cache");
    if ((s = fa2_check_plan(plan)))
        return s;
    const fa2_problem_t *pr = &plan->problem;
    if (!pr->page_size)
        return fa2_fail(FA2_ERROR_UNSUPPORTED,
                        "fa2_cache_write: the plan's K/V are not paged (page_size=0)");
    if (n_tokens < 0 || n_tokens > INT32_MAX)
        return fa2_fail(FA2_ERROR_INVALID_SIZE, "n_tokens=%" PRId64 " is out of range [0, %d]",
                        n_tokens, INT32_MAX);
    if ((s = fa2_check_grid("n_tokens", n_tokens, "heads_kv", pr->heads_kv,
                            pr->head_dim / 8, FA2_CACHE_WRITE_THREADS)))
        return s;
    if (new_row_stride < pr->heads_kv * pr->head_dim || new_row_stride % 8 != 0)
        return fa2_fail(FA2_ERROR_BAD_STRIDE,
                        "new_row_stride=%" PRId64 " is below heads_kv * head_dim = %" PRId64
                        " or not a multiple of 8",
                        new_row_stride, pr->heads_kv * pr->head_dim);
    if ((s = fa2_check_align("k_new", k_new, 16)) || (s = fa2_check_align("v_new", v_new, 16)) ||
        (s = fa2_check_align("slot_mapping", slot_mapping, 4)) ||
        (s = fa2_check_align("k_cache", k_cache, 16)) ||
        (s = fa2_check_align("v_cache", v_cache, 16)))
        return s;
    if (n_tokens == 0)
        return FA2_SUCCESS;
    {
        /* new rows: [n_tokens, heads_kv, head_dim]; the caches as the plan lays them out */
        int64_t new_bytes;
        if ((s = fa2_check_extent("k_new and v_new", 1, n_tokens, 1, pr->heads_kv * pr->head_dim,
                                  0, new_row_stride, 0, 2, &new_bytes)))
            return s;
        const fa2_span_t outputs[2] = {fa2_layout_span(pr, FA2_LAYOUT_K, "k_cache", k_cache),
                                       fa2_layout_span(pr, FA2_LAYOUT_V, "v_cache", v_cache)};
        const fa2_span_t inputs[3] = {fa2_bytes_span("k_new", k_new, new_bytes),
                                      fa2_bytes_span("v_new", v_new, new_bytes),
                                      fa2_bytes_span("slot_mapping", slot_mapping, n_tokens * 4)};
        if ((s = fa2_check_disjoint(outputs, 2, inputs, 3)))
            return s;
    }
    if ((s = fa2_check_device(plan, 0)))
        return s;

    p.k_new = k_new;
    p.v_new = v_new;
    p.slot_mapping = slot_mapping;
    p.k_cache = k_cache;
    p.v_cache = v_cache;
    p.n_tokens = n_tokens;
    p.new_row_stride = new_row_stride;
    p.page_stride_k = pr->k_batch_stride;
    p.row_stride_k = pr->k_seq_stride;
    p.head_stride_k = pr->k_head_stride;
    p.page_stride_v = pr->v_batch_stride;
    p.row_stride_v = pr->v_seq_stride;
    p.head_stride_v = pr->v_head_stride;
    p.slots = pr->num_pages * pr->page_size;
    p.page_size = (int32_t)pr->page_size;
    p.heads_kv = (int32_t)pr->heads_kv;
    p.head_dim = (int32_t)pr->head_dim;
    p.reserved0 = 0;
    e = fa2_cache_write_launch(&p, stream);
    if (e != 0)
        return fa2_fail(FA2_ERROR_CUDA, "cache-write kernel launch: %s",
                        cudaGetErrorString((cudaError_t)e));
    return FA2_SUCCESS;
}
