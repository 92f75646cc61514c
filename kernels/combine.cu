// fa2_combine's kernel: one thread per 8 elements of a (row, head); the threads of a
// (row, head) each compute the parts' weights (max, then sum of exponentials, in fp32)
// and merge their 8 elements of O.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>

#include "common/launch.cuh"
#include "common/params.h"

namespace {

// 8 consecutive elements at `src` as floats.
template <typename T>
__device__ __forceinline__ void load8(const T *src, float (&x)[8]);

template <>
__device__ __forceinline__ void load8<float>(const float *src, float (&x)[8])
{
    const float4 a = *reinterpret_cast<const float4 *>(src);
    const float4 b = *reinterpret_cast<const float4 *>(src + 4);
    x[0] = a.x, x[1] = a.y, x[2] = a.z, x[3] = a.w, x[4] = b.x, x[5] = b.y, x[6] = b.z,
    x[7] = b.w;
}

template <>
__device__ __forceinline__ void load8<__half>(const __half *src, float (&x)[8])
{
    const uint4 v = *reinterpret_cast<const uint4 *>(src);
    const __half2 *h = reinterpret_cast<const __half2 *>(&v);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const float2 f = __half22float2(h[i]);
        x[2 * i] = f.x, x[2 * i + 1] = f.y;
    }
}

template <>
__device__ __forceinline__ void load8<__nv_bfloat16>(const __nv_bfloat16 *src, float (&x)[8])
{
    const uint4 v = *reinterpret_cast<const uint4 *>(src);
    const __nv_bfloat162 *h = reinterpret_cast<const __nv_bfloat162 *>(&v);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const float2 f = __bfloat1622float2(h[i]);
        x[2 * i] = f.x, x[2 * i + 1] = f.y;
    }
}

// 8 floats to `dst`, converted.
template <typename T>
__device__ __forceinline__ void store8(T *dst, const float (&x)[8]);

template <>
__device__ __forceinline__ void store8<float>(float *dst, const float (&x)[8])
{
    *reinterpret_cast<float4 *>(dst) = make_float4(x[0], x[1], x[2], x[3]);
    *reinterpret_cast<float4 *>(dst + 4) = make_float4(x[4], x[5], x[6], x[7]);
}

template <>
__device__ __forceinline__ void store8<__half>(__half *dst, const float (&x)[8])
{
    uint4 v;
    __half2 *h = reinterpret_cast<__half2 *>(&v);
#pragma unroll
    for (int i = 0; i < 4; ++i) h[i] = __floats2half2_rn(x[2 * i], x[2 * i + 1]);
    *reinterpret_cast<uint4 *>(dst) = v;
}

template <>
__device__ __forceinline__ void store8<__nv_bfloat16>(__nv_bfloat16 *dst, const float (&x)[8])
{
    uint4 v;
    __nv_bfloat162 *h = reinterpret_cast<__nv_bfloat162 *>(&v);
#pragma unroll
    for (int i = 0; i < 4; ++i) h[i] = __floats2bfloat162_rn(x[2 * i], x[2 * i + 1]);
    *reinterpret_cast<uint4 *>(dst) = v;
}

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
    const float *lse =
        p.lse_parts + row * p.lse_parts_row_stride + head * p.lse_parts_head_stride;

    float top = -INFINITY;  // the largest LSE_i
    for (int part = 0; part < p.parts; ++part)
        top = fmaxf(top, lse[part * p.lse_parts_part_stride]);
    float o[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    float total = -INFINITY;
    if (top != -INFINITY) {  // else every part is empty: O = 0, LSE = -inf
        float sum = 0.f;
        for (int part = 0; part < p.parts; ++part)
            sum += __expf(lse[part * p.lse_parts_part_stride] - top);
        total = top + __logf(sum);
        const TPart *src = static_cast<const TPart *>(p.o_parts) + row * p.o_parts_row_stride +
                           head * p.o_parts_head_stride + chunk * 8;
        for (int part = 0; part < p.parts; ++part) {
            const float w = __expf(lse[part * p.lse_parts_part_stride] - total);
            if (w == 0.f) continue;  // an empty part (-inf) may hold anything
            float x[8];
            load8(src + part * p.o_parts_part_stride, x);
#pragma unroll
            for (int e = 0; e < 8; ++e) o[e] += w * x[e];
        }
    }
    store8(static_cast<TOut *>(p.o) + row * p.o_row_stride + head * p.o_head_stride + chunk * 8,
           o);
    if (p.lse && chunk == 0) p.lse[row * p.lse_row_stride + head * p.lse_head_stride] = total;
}

template <typename TPart>
int launch_for_parts(const fa2_combine_params_t &p, cudaStream_t stream)
{
    constexpr int kThreads = 256;
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
