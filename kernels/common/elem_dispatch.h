// The plan's element type (fa2_params_t.dtype) as a C++ type, for the types this build
// compiled (CMake's FA2_DTYPES, common/built_buckets.h): with_elem(dtype, run) returns
// run(ElemTag<T>{}) for the plan's type, and cudaErrorInvalidValue for a type the build
// left out (the planner refuses those first). A left-out type's kernels are never named.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "common/built_buckets.h"
#include "fa2.h"

namespace fa2 {

template <typename T>
struct ElemTag {
    using type = T;
};

template <typename Run>
cudaError_t with_elem(int32_t dtype, Run &&run)
{
    if (dtype == FA2_DTYPE_BF16) {
        if constexpr (FA2_BUILT_BF16) return run(ElemTag<__nv_bfloat16>{});
    } else if (dtype == FA2_DTYPE_FP16) {
        if constexpr (FA2_BUILT_FP16) return run(ElemTag<__half>{});
    }
    return cudaErrorInvalidValue;
}

}  // namespace fa2

// The element type of an ElemTag argument `tag` in a generic lambda.
#define FA2_ELEM(tag) typename decltype(tag)::type
