// Which kernels already have their shared-memory limit raised, so that a call raises it
// only the first time: the driver call costs about 0.75 us, a seventh of a small
// forward's C call. The limit belongs to a kernel within one CUDA context; a reset
// device gets a new context with a new id, whose kernels start at 48 KiB again, so a
// grant is kept with its context's id. One lock-free table per translation unit (the
// kernels it launches): a slot is claimed once for a kernel, then its grant is replaced
// atomically; when the table is full, kernels are raised on every call as before.
#pragma once

#include <cuda.h>
#include <stdint.h>

#include "common/driver_entry.cuh"

namespace fa2 {

using DriverCtxGetCurrent = CUresult (*)(CUcontext *);
using DriverCtxGetId = CUresult (*)(CUcontext, unsigned long long *);

// The id of the calling thread's current context (unique within the process); 0 when
// there is none or the driver cannot tell.
static inline unsigned long long current_context_id()
{
    static const DriverCtxGetCurrent get_current =
        driver_entry_point<DriverCtxGetCurrent>("cuCtxGetCurrent");
    static const DriverCtxGetId get_id = driver_entry_point<DriverCtxGetId>("cuCtxGetId");
    CUcontext context = nullptr;
    unsigned long long id = 0;
    if (!get_current || !get_id || get_current(&context) != CUDA_SUCCESS || !context ||
        get_id(context, &id) != CUDA_SUCCESS)
        return 0;
    return id;
}

// A grant packs (context id, bytes): the bytes take the low 20 bits (shared memory per
// block is below 1 MiB), the id the rest.
constexpr int kGrantByteBits = 20;
constexpr int kGrantSlots = 128;

struct SmemGrant {
    const void *kernel;        // claimed once, never released
    unsigned long long grant;  // 0: none yet
};

static SmemGrant g_smem_grants[kGrantSlots];

// The kernel's slot, claimed if it has none; NULL when the table is full.
static inline SmemGrant *smem_grant_slot(const void *kernel)
{
    const uintptr_t start = reinterpret_cast<uintptr_t>(kernel) >> 4;
    for (int i = 0; i < kGrantSlots; ++i) {
        SmemGrant *slot = &g_smem_grants[(start + i) % kGrantSlots];
        const void *owner = __atomic_load_n(&slot->kernel, __ATOMIC_ACQUIRE);
        if (owner == kernel) return slot;
        if (owner) continue;
        const void *expected = nullptr;
        if (__atomic_compare_exchange_n(&slot->kernel, &expected, kernel, false,
                                        __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE) ||
            expected == kernel)
            return slot;
    }
    return nullptr;
}

// Whether the kernel's limit is at least `bytes` in the context.
static inline bool smem_granted(const SmemGrant *slot, unsigned long long context, int bytes)
{
    const unsigned long long grant = __atomic_load_n(&slot->grant, __ATOMIC_ACQUIRE);
    return grant >> kGrantByteBits == context &&
           static_cast<int>(grant & ((1ull << kGrantByteBits) - 1)) >= bytes;
}

// Records a limit just raised (ids too large to pack are not recorded).
static inline void smem_record_grant(SmemGrant *slot, unsigned long long context, int bytes)
{
    if (context >> (64 - kGrantByteBits) || bytes >= (1 << kGrantByteBits)) return;
    __atomic_store_n(&slot->grant, context << kGrantByteBits | static_cast<unsigned long long>(bytes),
                     __ATOMIC_RELEASE);
}

}  // namespace fa2
