// Merging partial attention results (O_i, LSE_i over separate key ranges) for one
// 8-element chunk of one (row, head): fa2_combine's kernel runs it (the split decode
// merges its splits a warp per row, common/merge_kernel.cuh). LSE = log sum exp
// LSE_i, O = sum exp(LSE_i - LSE) O_i, fp32; parts with LSE_i = -inf weigh nothing
// (their O_i is not read); all of them -inf: O = 0, LSE = -inf.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>

#include "common/ptx.cuh"

namespace fa2 {

// 8 consecutive elements at `src` as floats: a 16-bit type's, or fp32's below.
template <typename T>
__device__ __forceinline__ void load8(const T *src, float (&x)[8])
{
    const uint4 v = *reinterpret_cast<const uint4 *>(src);
    const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const float2 f = unpack2<T>(words[i]);
        x[2 * i] = f.x, x[2 * i + 1] = f.y;
    }
}

template <>
__device__ __forceinline__ void load8<float>(const float *src, float (&x)[8])
{
    const float4 a = *reinterpret_cast<const float4 *>(src);
    const float4 b = *reinterpret_cast<const float4 *>(src + 4);
    x[0] = a.x, x[1] = a.y, x[2] = a.z, x[3] = a.w, x[4] = b.x, x[5] = b.y, x[6] = b.z,
    x[7] = b.w;
}

// 8 floats to `dst`, converted: to a 16-bit type, or fp32 below.
template <typename T>
__device__ __forceinline__ void store8(T *dst, const float (&x)[8])
{
    *reinterpret_cast<uint4 *>(dst) = make_uint4(pack2<T>(x[0], x[1]), pack2<T>(x[2], x[3]),
                                                 pack2<T>(x[4], x[5]), pack2<T>(x[6], x[7]));
}

template <>
__device__ __forceinline__ void store8<float>(float *dst, const float (&x)[8])
{
    *reinterpret_cast<float4 *>(dst) = make_float4(x[0], x[1], x[2], x[3]);
    *reinterpret_cast<float4 *>(dst + 4) = make_float4(x[4], x[5], x[6], x[7]);
}

// Merges chunk `o_part0` (part 0's 8 elements; part i at + i * o_part_stride) with the
// parts' LSEs (lse0, + i * lse_part_stride) into `out`; returns the merged LSE.
template <typename TPart, typename TOut>
__device__ __forceinline__ float merge_chunk(const TPart *o_part0, int64_t o_part_stride,
                                             const float *lse0, int64_t lse_part_stride,
                                             int parts, TOut *out)
{
    float top = -INFINITY;  // the largest LSE_i
    for (int part = 0; part < parts; ++part) top = fmaxf(top, lse0[part * lse_part_stride]);
    float o[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    float total = -INFINITY;
    if (top != -INFINITY) {  // else every part is empty
        float sum = 0.f;
        for (int part = 0; part < parts; ++part) sum += __expf(lse0[part * lse_part_stride] - top);
        total = top + __logf(sum);
        for (int part = 0; part < parts; ++part) {
            const float w = __expf(lse0[part * lse_part_stride] - total);
            if (w == 0.f) continue;  // an empty part (-inf) may hold anything
            float x[8];
            load8(o_part0 + part * o_part_stride, x);
#pragma unroll
            for (int e = 0; e < 8; ++e) o[e] += w * x[e];
        }
    }
    store8(out, o);
    return total;
}

}  // namespace fa2
