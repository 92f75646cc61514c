// Driver functions reached through the runtime's entry point, so that the library does
// not link the driver library itself.
#pragma once

#include <cuda_runtime.h>

namespace fa2 {

// A driver function through the runtime's entry point (no link to the driver library);
// NULL if missing.
template <typename Fn>
static inline Fn driver_entry_point(const char *name)
{
    void *p = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
    const cudaError_t e =
        cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &found);
#else
    const cudaError_t e = cudaGetDriverEntryPoint(name, &p, cudaEnableDefault, &found);
#endif
    return e == cudaSuccess && found == cudaDriverEntryPointSuccess ? reinterpret_cast<Fn>(p)
                                                                     : nullptr;
}

}  // namespace fa2
