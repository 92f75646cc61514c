// Whether the current device can run the sm_90a kernels this library was built with;
// the launchers ask before taking a Hopper path (a plan made for another device must
// not reach those kernels).
#pragma once

#include <cuda_runtime.h>

namespace fa2 {

inline bool device_is_sm90()
{
#if defined(FA2_WITH_SM90A)
    int dev = 0, major = 0, minor = 0;
    return cudaGetDevice(&dev) == cudaSuccess &&
           cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
           cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) == cudaSuccess &&
           major == 9 && minor == 0;
#else
    return false;
#endif
}

}  // namespace fa2
