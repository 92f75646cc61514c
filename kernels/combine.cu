// fa2_combine's launch: the merge kernel (common/merge_kernel.cuh) over rows and heads
// laid out by the caller's strides.
#include <stdint.h>

#include "common/launch.cuh"
#include "common/merge_kernel.cuh"
#include "common/params.h"

namespace {

// Warp w merges (row w / heads, head w % heads).
template <typename TPart, typename TOut>
struct StridedMergeRows {
    using Part = TPart;
    using Out = TOut;
    using Args = fa2_combine_params_t;
    static constexpr bool kAfterPrevious = false;

    static __device__ __forceinline__ bool locate(const Args &p, int64_t w,
                                                  fa2::MergeRow<Part, Out> &r)
    {
        if (w >= p.rows * p.heads) return false;
        const int64_t row = w / p.heads;
        const int head = static_cast<int>(w % p.heads);
        r.o_parts = static_cast<const Part *>(p.o_parts) + row * p.o_parts_row_stride +
                    head * p.o_parts_head_stride;
        r.o_part_stride = p.o_parts_part_stride;
        r.lse_parts = p.lse_parts + row * p.lse_parts_row_stride + head * p.lse_parts_head_stride;
        r.lse_part_stride = p.lse_parts_part_stride;
        r.parts = p.parts;
        r.head_dim = p.head_dim;
        r.o = static_cast<Out *>(p.o) + row * p.o_row_stride + head * p.o_head_stride;
        r.lse = p.lse ? p.lse + row * p.lse_row_stride + head * p.lse_head_stride : nullptr;
        r.sink = -INFINITY;
        return true;
    }
};

template <typename TPart>
int launch_for_parts(const fa2_combine_params_t &p, cudaStream_t stream)
{
    constexpr int kThreads = 32 * fa2::kMergeWarps;
    const int64_t blocks = (p.rows * p.heads + fa2::kMergeWarps - 1) / fa2::kMergeWarps;
    switch (p.dtype) {
    case FA2_DTYPE_FP32:
        return fa2::launch(fa2::merge_kernel<StridedMergeRows<TPart, float>>, blocks, kThreads,
                           0, stream, p);
    case FA2_DTYPE_FP16:
        return fa2::launch(fa2::merge_kernel<StridedMergeRows<TPart, __half>>, blocks, kThreads,
                           0, stream, p);
    default:
        return fa2::launch(fa2::merge_kernel<StridedMergeRows<TPart, __nv_bfloat16>>, blocks,
                           kThreads, 0, stream, p);
    }
}

}  // namespace

extern "C" int fa2_combine_launch(const fa2_combine_params_t *p, void *stream)
{
    const cudaStream_t s = static_cast<cudaStream_t>(stream);
    switch (p->parts_dtype) {
    case FA2_DTYPE_FP32: return launch_for_parts<float>(*p, s);
    case FA2_DTYPE_FP16: return launch_for_parts<__half>(*p, s);
    default: return launch_for_parts<__nv_bfloat16>(*p, s);
    }
}
