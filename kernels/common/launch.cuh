// Kernel launches as every launcher here makes them, in two steps so that a failure
// leaves nothing queued: allow_smem() for every kernel of a call first (the only
// fallible set-up), then launch() each. Neither reports nor clears an error the
// application left pending in the runtime: a launch returns its own status, and the
// shared-memory attribute is set through the driver (cudaFuncSetAttribute clears the
// runtime's pending error; measured with CUDA 13.0). Both pass through fa2_fault()
// (fault_hook.h).
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "common/driver_entry.cuh"
#include "common/fault_hook.h"
#include "common/smem_grants.cuh"

namespace fa2 {

using DriverSetAttribute = CUresult (*)(CUfunction, CUfunction_attribute, int);

// cuFuncSetAttribute, looked up once per translation unit; NULL if missing. Internal
// linkage: no symbol shared between objects.
static inline DriverSetAttribute driver_set_attribute()
{
    static const DriverSetAttribute fn =
        driver_entry_point<DriverSetAttribute>("cuFuncSetAttribute");
    return fn;
}

// Raises the kernel's dynamic shared-memory limit when it needs more than 48 KiB, once
// per context (smem_grants.cuh).
template <typename Kernel>
cudaError_t allow_smem(Kernel kernel, int smem_bytes)
{
    if (smem_bytes <= 48 * 1024) return cudaSuccess;
    if (const int e = fa2_fault("cuFuncSetAttribute")) return static_cast<cudaError_t>(e);
    const void *symbol = reinterpret_cast<const void *>(kernel);
    const unsigned long long context = current_context_id();
    SmemGrant *grant = context ? smem_grant_slot(symbol) : nullptr;
    if (grant && smem_granted(grant, context, smem_bytes)) return cudaSuccess;
    const DriverSetAttribute set = driver_set_attribute();
    cudaFunction_t function = nullptr;
    if (!set) return cudaErrorSymbolNotFound;
    const cudaError_t e = cudaGetFuncBySymbol(&function, symbol);
    if (e != cudaSuccess) return e;
    // The driver's codes for what can fail here equal the runtime's (both number them
    // alike since CUDA 11).
    const cudaError_t set_error = static_cast<cudaError_t>(
        set(reinterpret_cast<CUfunction>(function),
            CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem_bytes));
    if (set_error == cudaSuccess && grant) smem_record_grant(grant, context, smem_bytes);
    return set_error;
}

// A 1-D grid of `grid` blocks (none: nothing to do). The planner bounds every grid by
// 2^31 - 1 blocks; a larger one is refused here too. after_previous (sm_90 and newer
// only): the kernel may start before the previous kernel in the stream ends
// (programmatic dependent launch) and must call wait_for_previous_grid()
// (common/grid_dependency.cuh) before it reads that kernel's results.
template <typename Kernel, typename Params>
cudaError_t launch(Kernel kernel, int64_t grid, int threads, int smem_bytes, cudaStream_t stream,
                   const Params &p, bool after_previous = false)
{
    if (grid == 0) return cudaSuccess;
    if (grid < 0 || grid > INT32_MAX) return cudaErrorInvalidConfiguration;
    if (const int e = fa2_fault("cudaLaunchKernelEx")) return static_cast<cudaError_t>(e);
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(static_cast<unsigned>(grid));
    config.blockDim = dim3(static_cast<unsigned>(threads));
    config.dynamicSmemBytes = static_cast<size_t>(smem_bytes);
    config.stream = stream;
    cudaLaunchAttribute overlap = {};
    if (after_previous) {
        overlap.id = cudaLaunchAttributeProgrammaticStreamSerialization;
        overlap.val.programmaticStreamSerializationAllowed = 1;
        config.attrs = &overlap;
        config.numAttrs = 1;
    }
    return cudaLaunchKernelEx(&config, kernel, p);
}

// A call of one kernel: its shared-memory attribute, then the launch.
template <typename Kernel, typename Params>
cudaError_t launch_one(Kernel kernel, int64_t grid, int threads, int smem_bytes,
                       cudaStream_t stream, const Params &p)
{
    const cudaError_t err = allow_smem(kernel, smem_bytes);
    if (err != cudaSuccess) return err;
    return launch(kernel, grid, threads, smem_bytes, stream, p);
}

}  // namespace fa2
