// fa2_combine's kernel: one thread per 8 elements of a (row, head); the threads of a
// (row, head) each compute the parts' weights and merge their 8 elements of O
// (common/merge.cuh).
#include <stdint.h>

#include "common/launch.cuh"
#include "common/merge.cuh"
#include "common/params.h"

namespace {

template <typename TPart, typename TOut>
__global__ void combine_kernel(const fa2_combine_params_t p)
{
    const int chunks = p.head_dim / 8;
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= p.rows * p.heads * chunks) return;
    const int chunk = static_cast<int>(i % chunks);
    const int64_t rh = i / chunks;
    const int64_t row = rh / p.heads;
    const int head = static_cast<int>(rh % p.heads);
    const float lse = fa2::merge_chunk(
        static_cast<const TPart *>(p.o_parts) + row * p.o_parts_row_stride +
            head * p.o_parts_head_stride + chunk * 8,
        p.o_parts_part_stride,
        p.lse_parts + row * p.lse_parts_row_stride + head * p.lse_parts_head_stride,
        p.lse_parts_part_stride, p.parts,
        static_cast<TOut *>(p.o) + row * p.o_row_stride + head * p.o_head_stride + chunk * 8);
    if (p.lse && chunk == 0) p.lse[row * p.lse_row_stride + head * p.lse_head_stride] = lse;
}

template <typename TPart>
int launch_for_parts(const fa2_combine_params_t &p, cudaStream_t stream)
{
    constexpr int kThreads = FA2_COMBINE_THREADS;
    const int64_t work = p.rows * p.heads * (p.head_dim / 8);
    const int64_t blocks = (work + kThreads - 1) / kThreads;
    switch (p.dtype) {
    case FA2_DTYPE_FP32:
        return fa2::launch(combine_kernel<TPart, float>, blocks, kThreads, 0, stream, p);
    case FA2_DTYPE_FP16:
        return fa2::launch(combine_kernel<TPart, __half>, blocks, kThreads, 0, stream, p);
    default:
        return fa2::launch(combine_kernel<TPart, __nv_bfloat16>, blocks, kThreads, 0, stream, p);
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
