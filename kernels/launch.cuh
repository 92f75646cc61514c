// One kernel launch as every launcher here does it: a 1-D grid (empty: nothing to do),
// the dynamic shared-memory limit raised when the block needs more than 48 KiB, and
// the launch error returned.
#pragma once

#include <cuda_runtime.h>
#include <stdint.h>

namespace fa2 {

template <typename Kernel, typename Params>
cudaError_t launch(Kernel kernel, int64_t grid, int threads, int smem_bytes, cudaStream_t stream,
                   const Params &p)
{
    if (grid == 0) return cudaSuccess;
    if (grid < 0 || grid > INT32_MAX) return cudaErrorInvalidConfiguration;
    if (smem_bytes > 48 * 1024) {
        const cudaError_t err =
            cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes);
        if (err != cudaSuccess) return err;
    }
    kernel<<<static_cast<unsigned>(grid), threads, smem_bytes, stream>>>(p);
    return cudaGetLastError();
}

}  // namespace fa2
