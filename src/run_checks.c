/* What fa2_forward and fa2_backward check before they queue anything: the plan is one
 * fa2_plan made, the current device can run it, the score variants' tensors match the
 * plan, and no output overlaps another tensor of the call. */
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "common/fault_hook.h"
#include "internal.h"

/* fa2_plan_t has no padding, so memcmp compares exactly its fields. */
_Static_assert(sizeof(fa2_problem_t) == 272, "fa2_problem_t has padding or changed");
_Static_assert(sizeof(fa2_device_info_t) == 40, "fa2_device_info_t has padding or changed");
_Static_assert(sizeof(fa2_plan_t) == 504, "fa2_plan_t has padding or changed");

fa2_status_t fa2_check_plan(const fa2_plan_t *plan)
{
    fa2_plan_t fresh;
    char why[256];
    if (plan->struct_size != sizeof(fa2_plan_t))
        return fa2_fail(FA2_ERROR_STRUCT_SIZE,
                        "plan->struct_size=%zu, expected %zu (make the plan with fa2_plan)",
                        plan->struct_size, sizeof(fa2_plan_t));
    /* Re-planning is pure host arithmetic, well under a microsecond. */
    if (fa2_plan(&plan->problem, &plan->device, &fresh) != FA2_SUCCESS) {
        snprintf(why, sizeof why, "%s", fa2_last_error());
        return fa2_fail(FA2_ERROR_BAD_PLAN, "the plan was changed after fa2_plan: %s", why);
    }
    if (memcmp(&fresh, plan, sizeof fresh) != 0)
        return fa2_fail(FA2_ERROR_BAD_PLAN,
                        "the plan was changed after fa2_plan: its fields differ from what "
                        "fa2_plan makes of plan->problem and plan->device");
    return FA2_SUCCESS;
}

/* What the run needs of a device, per device ordinal, queried once. A slot is
 * claimed (0 -> 1) by one thread, filled, then published (2); other threads query
 * the device themselves until it is. */
enum { kCachedDevices = 64 };
typedef struct device_slot_t {
    atomic_int state;
    int cc_major, cc_minor, smem_per_block_optin;
} device_slot_t;
static device_slot_t g_devices[kCachedDevices];

static fa2_status_t query_attr(int device, enum cudaDeviceAttr attr, int *value)
{
    cudaError_t e = (cudaError_t)fa2_fault("cudaDeviceGetAttribute");
    if (e == cudaSuccess)
        e = cudaDeviceGetAttribute(value, attr, device);
    if (e != cudaSuccess)
        return fa2_fail(FA2_ERROR_CUDA, "cudaDeviceGetAttribute(device %d): %s", device,
                        cudaGetErrorString(e));
    return FA2_SUCCESS;
}

static fa2_status_t current_device(int *device, int *cc_major, int *cc_minor, int *smem_optin)
{
    cudaError_t e = (cudaError_t)fa2_fault("cudaGetDevice");
    fa2_status_t s;
    if (e == cudaSuccess)
        e = cudaGetDevice(device);
    if (e != cudaSuccess)
        return fa2_fail(FA2_ERROR_NO_DEVICE, "cudaGetDevice: %s", cudaGetErrorString(e));
    if (*device >= 0 && *device < kCachedDevices &&
        atomic_load_explicit(&g_devices[*device].state, memory_order_acquire) == 2) {
        *cc_major = g_devices[*device].cc_major;
        *cc_minor = g_devices[*device].cc_minor;
        *smem_optin = g_devices[*device].smem_per_block_optin;
        return FA2_SUCCESS;
    }
    if ((s = query_attr(*device, cudaDevAttrComputeCapabilityMajor, cc_major)) ||
        (s = query_attr(*device, cudaDevAttrComputeCapabilityMinor, cc_minor)) ||
        (s = query_attr(*device, cudaDevAttrMaxSharedMemoryPerBlockOptin, smem_optin)))
        return s;
    if (*device >= 0 && *device < kCachedDevices) {
        int empty = 0;
        device_slot_t *slot = &g_devices[*device];
        if (atomic_compare_exchange_strong(&slot->state, &empty, 1)) {
            slot->cc_major = *cc_major;
            slot->cc_minor = *cc_minor;
            slot->smem_per_block_optin = *smem_optin;
            atomic_store_explicit(&slot->state, 2, memory_order_release);
        }
    }
    return FA2_SUCCESS;
}

fa2_status_t fa2_check_device(const fa2_plan_t *plan, int backward)
{
    int device = 0, major = 0, minor = 0, optin = 0;
    fa2_status_t s;
    const int hopper = backward ? plan->bwd_arch == 90 : plan->fwd_arch == 90;
    const int64_t smem = backward ? plan->bwd_smem_bytes : plan->smem_bytes;
    if ((s = current_device(&device, &major, &minor, &optin)))
        return s;
    if (!fa2_device_runs_plan(plan, backward, major, minor, optin))
        return fa2_fail(FA2_ERROR_DEVICE_MISMATCH,
                        "the plan was made for sm_%d%d (%" PRId64 " bytes of shared memory "
                        "per block) and runs %s kernels needing %" PRId64
                        " bytes; the current device %d is sm_%d%d with %d bytes",
                        (int)plan->device.cc_major, (int)plan->device.cc_minor,
                        plan->device.smem_per_block_optin, hopper ? "sm_90a" : "sm_80",
                        smem, device, major, minor, optin);
    return FA2_SUCCESS;
}

fa2_span_t fa2_layout_span(const fa2_problem_t *pr, fa2_layout_t layout, const char *name,
                           const void *ptr)
{
    /* Validated sizes: the last element's offset fits in int64 (check_extent). */
    int64_t bs, ss, hs;
    switch (layout) {
    case FA2_LAYOUT_Q: bs = pr->q_batch_stride, ss = pr->q_seq_stride, hs = pr->q_head_stride; break;
    case FA2_LAYOUT_K: bs = pr->k_batch_stride, ss = pr->k_seq_stride, hs = pr->k_head_stride; break;
    case FA2_LAYOUT_V: bs = pr->v_batch_stride, ss = pr->v_seq_stride, hs = pr->v_head_stride; break;
    default: bs = pr->o_batch_stride, ss = pr->o_seq_stride, hs = pr->o_head_stride; break;
    }
    const int queries = layout == FA2_LAYOUT_Q || layout == FA2_LAYOUT_O;
    const fa2_layout_dims_t dims = fa2_layout_dims(pr, queries);
    const int64_t heads = queries ? pr->heads_q : pr->heads_kv;
    fa2_span_t span = {name, (uintptr_t)ptr, (uintptr_t)ptr};
    if (dims.rows > 0) /* batch and heads are >= 1 */
        span.end += (uintptr_t)(((dims.batch - 1) * bs + (dims.rows - 1) * ss +
                                 (heads - 1) * hs + pr->head_dim) * 2);
    return span;
}

fa2_span_t fa2_bytes_span(const char *name, const void *ptr, int64_t bytes)
{
    fa2_span_t span = {name, (uintptr_t)ptr, (uintptr_t)ptr + (uintptr_t)bytes};
    return span;
}

fa2_status_t fa2_check_disjoint(const fa2_span_t *outputs, int n_outputs,
                                const fa2_span_t *inputs, int n_inputs)
{
    for (int i = 0; i < n_outputs; ++i) {
        const fa2_span_t *a = &outputs[i];
        for (int j = 0; j < n_outputs + n_inputs; ++j) {
            const fa2_span_t *b = j < n_outputs ? &outputs[j] : &inputs[j - n_outputs];
            if (j == i || (j < n_outputs && j < i))
                continue; /* itself, or a pair already compared */
            if (a->begin < a->end && b->begin < b->end && a->begin < b->end &&
                b->begin < a->end)
                return fa2_fail(FA2_ERROR_OVERLAP,
                                "%s [%p, %p) overlaps %s [%p, %p)", a->name,
                                (void *)a->begin, (void *)a->end, b->name, (void *)b->begin,
                                (void *)b->end);
        }
    }
    return FA2_SUCCESS;
}

fa2_status_t fa2_check_offsets_given(const fa2_seq_offsets_t *offsets)
{
    if (offsets && !offsets->cu_seqlens_q)
        return fa2_fail(FA2_ERROR_NULL_POINTER, "cu_seqlens_q is NULL");
    return FA2_SUCCESS;
}

void fa2_offset_spans(const fa2_problem_t *pr, const fa2_seq_offsets_t *offsets,
                      fa2_span_t spans[FA2_OFFSET_SPANS])
{
    const fa2_seq_offsets_t none = {NULL, NULL, NULL, NULL};
    const fa2_seq_offsets_t *o = offsets ? offsets : &none;
    const int64_t offsets_bytes = (pr->batch + 1) * 4, per_seq_bytes = pr->batch * 4;
    spans[0] = fa2_bytes_span("cu_seqlens_q", o->cu_seqlens_q, o->cu_seqlens_q ? offsets_bytes : 0);
    spans[1] = fa2_bytes_span("cu_seqlens_k", o->cu_seqlens_k,
                              o->cu_seqlens_k && !pr->page_size ? offsets_bytes : 0);
    spans[2] = fa2_bytes_span("seqused_k", o->seqused_k, o->seqused_k ? per_seq_bytes : 0);
    spans[3] = fa2_bytes_span("page_table", o->page_table,
                              o->page_table ? per_seq_bytes * pr->pages_per_seq : 0);
}

fa2_status_t fa2_check_entry_point(const fa2_plan_t *plan, const fa2_seq_offsets_t *offsets,
                                   const char *dense_call, const char *packed_call)
{
    const int paged = plan->problem.page_size != 0;
    fa2_status_t s;
    if (!offsets != !plan->problem.total_q)
        return fa2_fail(FA2_ERROR_UNSUPPORTED,
                        "%s: the plan is for a %s batch (total_q=%" PRId64 "): call %s",
                        offsets ? packed_call : dense_call, offsets ? "dense" : "packed",
                        plan->problem.total_q, offsets ? dense_call : packed_call);
    if (!offsets)
        return FA2_SUCCESS;
    if (paged && !offsets->page_table)
        return fa2_fail(FA2_ERROR_NULL_POINTER, "page_table is NULL (the plan's K/V are paged)");
    if (paged && !offsets->seqused_k)
        return fa2_fail(FA2_ERROR_NULL_POINTER,
                        "seqused_k is NULL (a paged plan takes the key counts from it)");
    if (!paged && !offsets->cu_seqlens_k)
        return fa2_fail(FA2_ERROR_NULL_POINTER, "cu_seqlens_k is NULL");
    if (!paged && offsets->page_table)
        return fa2_fail(FA2_ERROR_UNSUPPORTED,
                        "page_table is given but the plan's K/V are not paged (page_size=0)");
    if ((s = fa2_check_align("cu_seqlens_q", offsets->cu_seqlens_q, 4)) ||
        (!paged && (s = fa2_check_align("cu_seqlens_k", offsets->cu_seqlens_k, 4))) ||
        (s = fa2_check_align("seqused_k", offsets->seqused_k, 4)) ||
        (s = fa2_check_align("page_table", offsets->page_table, 4)))
        return s;
    return FA2_SUCCESS;
}

fa2_status_t fa2_check_score_tensors(const fa2_problem_t *pr, const fa2_score_tensors_t *scores,
                                     int backward, const char *with_call)
{
    const struct {
        const char *name;
        const void *ptr;
        int planned;
        const char *variant, *field;
    } t[3] = {{"alibi_slopes", scores ? scores->alibi_slopes : NULL, pr->alibi != 0, "ALiBi",
               "alibi"},
              {"sinks", scores ? scores->sinks : NULL, pr->sinks != 0, "sinks", "sinks"},
              {"dsinks", scores ? scores->dsinks : NULL, backward && pr->sinks, "sinks",
               "sinks"}};
    fa2_status_t s;
    for (int i = 0; i < 3; ++i)
        if (!scores && t[i].planned)
            return fa2_fail(FA2_ERROR_UNSUPPORTED,
                            "the plan has %s (problem.%s=1): pass its tensors with %s",
                            t[i].variant, t[i].field, with_call);
    for (int i = 0; i < 3; ++i)
        if (t[i].ptr && !t[i].planned)
            return fa2_fail(FA2_ERROR_UNSUPPORTED,
                            "%s is given but the plan has no %s (problem.%s=0)", t[i].name,
                            t[i].variant, t[i].field);
    for (int i = 0; i < 3; ++i)
        if (t[i].planned && !t[i].ptr)
            return fa2_fail(FA2_ERROR_NULL_POINTER, "%s is NULL (problem.%s=1)", t[i].name,
                            t[i].field);
    for (int i = 0; i < 3; ++i)
        if ((s = fa2_check_align(t[i].name, t[i].ptr, 4)))
            return s;
    return FA2_SUCCESS;
}
