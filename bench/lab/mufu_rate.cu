// Results per clock and SM of the special-function unit's instructions the score variants
// use (ex2.approx, tanh.approx) against FFMA, measured in clocks of the SM (clock64), one
// block per SM of 32 warps (or of 4 and 8: one and two per sub-partition), 8 independent
// chains per thread. Runs on the GPU as the build's bench/lab/fa2_mufu_rate (sm_90a builds).
#include <cstdint>
#include <cstdio>
#include <cuda_runtime.h>

enum Op { kEx2, kTanh, kFfma, kEx2Tanh, kTanhF16x2, kEx2F16x2, kTanhBf16x2 };

__device__ __forceinline__ float ex2(float x)
{
    float y;
    asm volatile("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

__device__ __forceinline__ float tanh_approx(float x)
{
    float y;
    asm volatile("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// Packed forms: two results per instruction (PTX; ptxas may split them)
__device__ __forceinline__ float tanh_f16x2(float x)
{
    uint32_t y;
    asm volatile("tanh.approx.f16x2 %0, %1;" : "=r"(y) : "r"(__float_as_uint(x)));
    return __uint_as_float(y);
}

__device__ __forceinline__ float ex2_f16x2(float x)
{
    uint32_t y;  // (both halves' sign bits set: inputs negative, results in (0, 1])
    asm volatile("ex2.approx.f16x2 %0, %1;"
                 : "=r"(y)
                 : "r"(__float_as_uint(x) | 0x80008000u));
    return __uint_as_float(y);
}

__device__ __forceinline__ float tanh_bf16x2(float x)
{
    uint32_t y;
    asm volatile("tanh.approx.bf16x2 %0, %1;" : "=r"(y) : "r"(__float_as_uint(x)));
    return __uint_as_float(y);
}

template <Op kOp>
__global__ void rate_kernel(int iters, float seed, float *sink, long long *clocks)
{
    float v[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = seed * (threadIdx.x + i);
    __syncthreads();
    const long long t0 = clock64();
    for (int it = 0; it < iters; ++it) {
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            if constexpr (kOp == kEx2) v[i] = ex2(-v[i]);
            if constexpr (kOp == kTanh) v[i] = tanh_approx(v[i]);
            if constexpr (kOp == kFfma) v[i] = fmaf(v[i], 0.999f, 1e-3f);
            if constexpr (kOp == kEx2Tanh) v[i] = (i & 1) ? ex2(-v[i]) : tanh_approx(v[i]);
            if constexpr (kOp == kTanhF16x2) v[i] = tanh_f16x2(v[i]);
            if constexpr (kOp == kEx2F16x2) v[i] = ex2_f16x2(v[i]);
            if constexpr (kOp == kTanhBf16x2) v[i] = tanh_bf16x2(v[i]);
        }
    }
    __syncthreads();
    const long long t1 = clock64();
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < 8; ++i) s += v[i];
    if (s == 12345.f) sink[threadIdx.x] = s;  // keeps the chains alive
    if (threadIdx.x == 0) clocks[blockIdx.x] = t1 - t0;
}

// threads: per block (one block per SM): 1024 = 8 warps per sub-partition, 128 = one
// warp each (as in the forward's softmax phase: one math warp of each warpgroup per
// sub-partition).
template <Op kOp>
static double results_per_clock(int sms, float *sink, long long *clocks, int threads = 1024)
{
    const int iters = 4096;
    rate_kernel<kOp><<<sms, threads>>>(iters, 1e-3f, sink, clocks);  // warm-up
    rate_kernel<kOp><<<sms, threads>>>(iters, 1e-3f, sink, clocks);
    if (cudaDeviceSynchronize() != cudaSuccess) return -1.0;
    long long host[1024];
    cudaMemcpy(host, clocks, sms * sizeof(long long), cudaMemcpyDeviceToHost);
    long long worst = 0;
    for (int i = 0; i < sms; ++i) worst = host[i] > worst ? host[i] : worst;
    const int per_op = kOp == kTanhF16x2 || kOp == kEx2F16x2 || kOp == kTanhBf16x2 ? 2 : 1;
    return (double)threads * iters * 8 * per_op / (double)worst;
}

int main()
{
    int sms = 0;
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0) != cudaSuccess) {
        printf("mufu_rate: no CUDA device\n");
        return 1;
    }
    if (sms > 1024) sms = 1024;
    float *sink;
    long long *clocks;
    cudaMalloc(&sink, 1024 * sizeof(float));
    cudaMalloc(&clocks, 1024 * sizeof(long long));
    printf("results per SM clock (%d SMs, one block of 32 warps each):\n", sms);
    printf("  ex2.approx.ftz.f32   %6.2f\n", results_per_clock<kEx2>(sms, sink, clocks));
    printf("  tanh.approx.f32      %6.2f\n", results_per_clock<kTanh>(sms, sink, clocks));
    printf("  ex2 and tanh, 1:1    %6.2f\n", results_per_clock<kEx2Tanh>(sms, sink, clocks));
    printf("  ffma (dependent)     %6.2f\n", results_per_clock<kFfma>(sms, sink, clocks));
    printf("one warp per sub-partition (128 threads per SM):\n");
    printf("  ex2.approx.ftz.f32   %6.2f\n", results_per_clock<kEx2>(sms, sink, clocks, 128));
    printf("  tanh.approx.f32      %6.2f\n", results_per_clock<kTanh>(sms, sink, clocks, 128));
    printf("  ex2 and tanh, 1:1    %6.2f\n", results_per_clock<kEx2Tanh>(sms, sink, clocks, 128));
    printf("two warps per sub-partition (256 threads per SM):\n");
    printf("  ex2 and tanh, 1:1    %6.2f\n", results_per_clock<kEx2Tanh>(sms, sink, clocks, 256));
    printf("packed forms, results (two per instruction), 8 warps per sub-partition:\n");
    printf("  tanh.approx.f16x2    %6.2f\n", results_per_clock<kTanhF16x2>(sms, sink, clocks));
    printf("  ex2.approx.f16x2     %6.2f\n", results_per_clock<kEx2F16x2>(sms, sink, clocks));
    printf("  tanh.approx.bf16x2   %6.2f\n", results_per_clock<kTanhBf16x2>(sms, sink, clocks));
    return 0;
}
