/* TEST-ONLY SHIM (fuzz_plan, test_built_buckets): test code, never part of libfa2.
 *
 * Stands in for the kernel launchers (kernels/fwd_launch.cu, bwd_launch.cu,
 * cache_write.cu, combine.cu) and the CUDA runtime calls the host sources make
 * (src/device.c, run_checks.c, forward.c, backward.c, varlen_check.c), so that the
 * real host C code links without a GPU, nvcc objects or libcudart. The harness sets
 * what the fakes return and reads back what the launchers were given (fuzz_shim.h). */
#include <string.h>

#include <cuda_runtime_api.h>

#include "common/params.h"
#include "fuzz_shim.h"

fuzz_shim_t g_shim;

int fa2_fwd_launch(const fa2_params_t *p, void *stream)
{
    (void)stream;
    g_shim.fwd_calls++;
    memcpy(&g_shim.fwd, p, sizeof *p);
    return g_shim.launch_error;
}

int fa2_bwd_launch(const fa2_params_t *p, void *stream, int *outputs_queued)
{
    (void)stream;
    *outputs_queued = 0;
    g_shim.bwd_calls++;
    memcpy(&g_shim.bwd, p, sizeof *p);
    return g_shim.launch_error;
}

int fa2_cache_write_launch(const fa2_cache_write_params_t *p, void *stream)
{
    (void)stream;
    g_shim.cache_calls++;
    memcpy(&g_shim.cache, p, sizeof *p);
    return g_shim.launch_error;
}

int fa2_combine_launch(const fa2_combine_params_t *p, void *stream)
{
    (void)stream;
    g_shim.combine_calls++;
    memcpy(&g_shim.combine, p, sizeof *p);
    return g_shim.launch_error;
}

/* Device-to-host copies of the metadata records: 0, except bad_check at bad_sequence. */
cudaError_t CUDARTAPI cudaMemcpy(void *dst, const void *src, size_t count,
                                 enum cudaMemcpyKind kind)
{
    if (g_shim.memcpy_error || kind != cudaMemcpyDeviceToHost || count % 4)
        return cudaErrorInvalidValue;
    const int64_t first = ((const char *)src - g_shim.records) / 4;
    for (size_t i = 0; i < count / 4; ++i)
        ((int32_t *)dst)[i] = first + (int64_t)i == g_shim.bad_sequence ? g_shim.bad_check : 0;
    return cudaSuccess;
}

cudaError_t CUDARTAPI cudaGetDeviceCount(int *count)
{
    if (g_shim.count_error)
        return (cudaError_t)g_shim.count_error;
    *count = g_shim.device_count;
    return cudaSuccess;
}

/* A driver is loaded (version 13.0) unless the fuzzed device count fails as a missing
 * driver does. */
cudaError_t CUDARTAPI cudaDriverGetVersion(int *version)
{
    *version = g_shim.count_error == cudaErrorInsufficientDriver ? 0 : 13000;
    return cudaSuccess;
}

/* An ordinal past the library's per-device cache (64 slots), so that every call
 * queries the (fuzzed) attributes afresh. */
cudaError_t CUDARTAPI cudaGetDevice(int *device)
{
    if (g_shim.device_error)
        return (cudaError_t)g_shim.device_error;
    *device = 100;
    return cudaSuccess;
}

cudaError_t CUDARTAPI cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device)
{
    (void)device;
    if (g_shim.attr_error)
        return (cudaError_t)g_shim.attr_error;
    switch (attr) {
    case cudaDevAttrComputeCapabilityMajor: *value = g_shim.attr[0]; break;
    case cudaDevAttrComputeCapabilityMinor: *value = g_shim.attr[1]; break;
    case cudaDevAttrMultiProcessorCount: *value = g_shim.attr[2]; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = g_shim.attr[3]; break;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor: *value = g_shim.attr[4]; break;
    default: *value = 0; break;
    }
    return cudaSuccess;
}

const char *CUDARTAPI cudaGetErrorString(cudaError_t error)
{
    return error == cudaSuccess ? "no error (fuzz shim)" : "an error (fuzz shim)";
}

const char *CUDARTAPI cudaGetErrorName(cudaError_t error)
{
    return error == cudaSuccess ? "cudaSuccess" : "cudaErrorFuzzShim";
}
