/* fa2_device_info_query: the planner's view of a CUDA device. */
#include <cuda_runtime_api.h>

#include "internal.h"

static fa2_status_t get_attr(int device, enum cudaDeviceAttr attr, const char *name,
                             int *value)
{
    cudaError_t e = cudaDeviceGetAttribute(value, attr, device);
    if (e != cudaSuccess)
        return fa2_fail(FA2_ERROR_CUDA, "cudaDeviceGetAttribute(%s, device %d): %s", name,
                        device, cudaGetErrorString(e));
    return FA2_SUCCESS;
}

/* 1 when no CUDA driver is loaded at all (cudaDriverGetVersion then reports 0). */
static int no_driver(void)
{
    int version = 0;
    return cudaDriverGetVersion(&version) == cudaSuccess && version == 0;
}

fa2_status_t fa2_device_info_query(int device, fa2_device_info_t *info)
{
    fa2_device_info_t out = {0};
    int count = 0, major = 0, minor = 0, sms = 0, optin = 0, per_sm = 0;
    cudaError_t e;
    fa2_status_t s;

    fa2_clear_error();
    if (!info)
        return fa2_fail(FA2_ERROR_NULL_POINTER, "info is NULL");
    /* No driver, no device, or a driver too old for this runtime. */
    e = cudaGetDeviceCount(&count);
    /* Without any driver the runtime also says "insufficient driver"; the driver
     * version (0 when none is loaded) tells the two apart. */
    if (e == cudaErrorInsufficientDriver && no_driver())
        return fa2_fail(FA2_ERROR_NO_DEVICE, "no NVIDIA driver found (libcuda.so.1 cannot be "
                        "loaded): this machine has no usable NVIDIA GPU");
    if (e == cudaErrorNoDevice)
        return fa2_fail(FA2_ERROR_NO_DEVICE, "no CUDA device: the NVIDIA driver sees no GPU "
                        "(cudaGetDeviceCount: %s)", cudaGetErrorName(e));
    if (e != cudaSuccess)
        return fa2_fail(FA2_ERROR_NO_DEVICE, "cudaGetDeviceCount: %s (%s)",
                        cudaGetErrorString(e), cudaGetErrorName(e));
    if (device < 0 || device >= count)
        return fa2_fail(FA2_ERROR_NO_DEVICE, "device=%d is not a device index (%d devices)",
                        device, count);
    /* Attribute queries do not touch the current device. */
    if ((s = get_attr(device, cudaDevAttrComputeCapabilityMajor, "ComputeCapabilityMajor",
                      &major)) ||
        (s = get_attr(device, cudaDevAttrComputeCapabilityMinor, "ComputeCapabilityMinor",
                      &minor)) ||
        (s = get_attr(device, cudaDevAttrMultiProcessorCount, "MultiProcessorCount",
                      &sms)) ||
        (s = get_attr(device, cudaDevAttrMaxSharedMemoryPerBlockOptin,
                      "MaxSharedMemoryPerBlockOptin", &optin)) ||
        (s = get_attr(device, cudaDevAttrMaxSharedMemoryPerMultiprocessor,
                      "MaxSharedMemoryPerMultiprocessor", &per_sm)))
        return s;

    out.struct_size = sizeof(fa2_device_info_t);
    out.cc_major = major;
    out.cc_minor = minor;
    out.sm_count = sms;
    out.reserved0 = 0;
    out.smem_per_block_optin = optin;
    out.smem_per_sm = per_sm;
    *info = out;
    return FA2_SUCCESS;
}
