// Kernel launches as every launcher here makes them, in two steps so that a failure
// leaves nothing queued: allow_smem() for every kernel of a call first (the only
// fallible set-up), then launch() each. A launch returns its own status, never an
// error the application left pending. Both pass through fa2_fault() (fault_hook.h).
#pragma once

#include <cuda_runtime.h>
#include <stdint.h>

#include "fault_hook.h"

namespace fa2 {

// Raises the kernel's dynamic shared-memory limit when it needs more than 48 KiB.
template <typename Kernel>
cudaError_t allow_smem(Kernel kernel, int smem_bytes)
{
    if (smem_bytes <= 48 * 1024) return cudaSuccess;
    if (const int e = fa2_fault("cudaFuncSetAttribute")) return static_cast<cudaError_t>(e);
    return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes);
}

// A 1-D grid of `grid` blocks (none: nothing to do). The planner bounds every grid by
// 2^31 - 1 blocks; a larger one is refused here too.
template <typename Kernel, typename Params>
cudaError_t launch(Kernel kernel, int64_t grid, int threads, int smem_bytes, cudaStream_t stream,
                   const Params &p)
{
    if (grid == 0) return cudaSuccess;
    if (grid < 0 || grid > INT32_MAX) return cudaErrorInvalidConfiguration;
    if (const int e = fa2_fault("cudaLaunchKernelEx")) return static_cast<cudaError_t>(e);
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(static_cast<unsigned>(grid));
    config.blockDim = dim3(static_cast<unsigned>(threads));
    config.dynamicSmemBytes = static_cast<size_t>(smem_bytes);
    config.stream = stream;
    return cudaLaunchKernelEx(&config, kernel, p);
}

}  // namespace fa2
