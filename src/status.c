/* Version, status names and the per-thread error message. */
#include <stdarg.h>
#include <stdio.h>

#include "internal.h"

static _Thread_local char fa2_message[512];

unsigned fa2_version(void)
{
    return FA2_VERSION_NUMBER;
}

#define FA2_STR_(x) #x
#define FA2_STR(x) FA2_STR_(x)
#define FA2_VERSION_TEXT                                                                  \
    FA2_STR(FA2_VERSION_MAJOR) "." FA2_STR(FA2_VERSION_MINOR) "." FA2_STR(FA2_VERSION_PATCH)

const char *fa2_version_string(void)
{
    return FA2_VERSION_TEXT;
}

#ifndef FA2_BUILD_CUDA_VERSION
#define FA2_BUILD_CUDA_VERSION "unknown"
#endif
#ifndef FA2_BUILD_HEAD_DIMS
#define FA2_BUILD_HEAD_DIMS "" /* every head-dim bucket */
#endif
#ifndef FA2_BUILD_ARCHITECTURES
#define FA2_BUILD_ARCHITECTURES "unknown"
#endif

const char *fa2_build_info(void)
{
    /* the macros come from CMakeLists.txt */
    return "libfa2 " FA2_VERSION_TEXT "; CUDA runtime " FA2_BUILD_CUDA_VERSION
           "; GPU code " FA2_BUILD_ARCHITECTURES FA2_BUILD_HEAD_DIMS;
}

const char *fa2_status_string(fa2_status_t status)
{
    switch (status) {
    case FA2_SUCCESS:
        return "FA2_SUCCESS: no error";
    case FA2_ERROR_NULL_POINTER:
        return "FA2_ERROR_NULL_POINTER: a required pointer argument is NULL";
    case FA2_ERROR_STRUCT_SIZE:
        return "FA2_ERROR_STRUCT_SIZE: struct_size is not one this library knows "
               "(set it with the init call)";
    case FA2_ERROR_INVALID_SIZE:
        return "FA2_ERROR_INVALID_SIZE: batch, seqlen or heads out of range (seqlen at most "
               "FA2_MAX_SEQLEN)";
    case FA2_ERROR_SIZE_OVERFLOW:
        return "FA2_ERROR_SIZE_OVERFLOW: a tensor extent or offset does not fit in int64";
    case FA2_ERROR_UNSUPPORTED_DTYPE:
        return "FA2_ERROR_UNSUPPORTED_DTYPE: dtype is not FA2_DTYPE_FP16 or FA2_DTYPE_BF16";
    case FA2_ERROR_UNSUPPORTED_HEAD_DIM:
        return "FA2_ERROR_UNSUPPORTED_HEAD_DIM: head_dim is not a multiple of 8 in [8, 256]";
    case FA2_ERROR_HEADS_MISMATCH:
        return "FA2_ERROR_HEADS_MISMATCH: heads_q is not a multiple of heads_kv";
    case FA2_ERROR_BAD_STRIDE:
        return "FA2_ERROR_BAD_STRIDE: a stride is negative or not a multiple of 8";
    case FA2_ERROR_MISALIGNED:
        return "FA2_ERROR_MISALIGNED: a tensor pointer is not aligned";
    case FA2_ERROR_BAD_WINDOW:
        return "FA2_ERROR_BAD_WINDOW: bad window_left/window_right or causal";
    case FA2_ERROR_BAD_SCALE:
        return "FA2_ERROR_BAD_SCALE: softmax_scale is negative, NaN, or above "
               "FA2_MAX_SOFTMAX_SCALE";
    case FA2_ERROR_UNSUPPORTED_DEVICE:
        return "FA2_ERROR_UNSUPPORTED_DEVICE: compute capability below 8.0";
    case FA2_ERROR_SHARED_MEMORY:
        return "FA2_ERROR_SHARED_MEMORY: the tiles do not fit the device's shared memory";
    case FA2_ERROR_WORKSPACE:
        return "FA2_ERROR_WORKSPACE: workspace missing or smaller than the plan needs";
    case FA2_ERROR_NO_DEVICE:
        return "FA2_ERROR_NO_DEVICE: no CUDA device, or the device index is invalid";
    case FA2_ERROR_CUDA:
        return "FA2_ERROR_CUDA: the CUDA runtime reported an error";
    case FA2_ERROR_OVERLAP:
        return "FA2_ERROR_OVERLAP: an output overlaps an input, another output or itself";
    case FA2_ERROR_BAD_PLAN:
        return "FA2_ERROR_BAD_PLAN: the plan was changed after fa2_plan made it";
    case FA2_ERROR_DEVICE_MISMATCH:
        return "FA2_ERROR_DEVICE_MISMATCH: the current device cannot run the plan's kernels";
    case FA2_ERROR_RESERVED:
        return "FA2_ERROR_RESERVED: a reserved field is not zero";
    case FA2_ERROR_UNSUPPORTED:
        return "FA2_ERROR_UNSUPPORTED: a combination this version does not run";
    case FA2_ERROR_BAD_METADATA:
        return "FA2_ERROR_BAD_METADATA: a packed batch's device metadata failed a check";
    }
    return "unknown fa2_status_t";
}

/* Does not clear the message: `printf("%s: %s", fa2_status_string(s),
 * fa2_last_error())` must work whatever order the arguments are evaluated in. */
const char *fa2_last_error(void)
{
    return fa2_message;
}

fa2_status_t fa2_fail(fa2_status_t s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(fa2_message, sizeof fa2_message, fmt, ap);
    va_end(ap);
    return s;
}

void fa2_clear_error(void)
{
    fa2_message[0] = '\0';
}
