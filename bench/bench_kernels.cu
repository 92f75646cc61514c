// fa2_bench's device helpers: random inputs, the standard-attention softmax, rel L2.
#include "bench_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>

namespace {

__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
template <typename T> __device__ __forceinline__ T from_float(float x);
template <> __device__ __forceinline__ __nv_bfloat16 from_float(float x) { return __float2bfloat16(x); }
template <> __device__ __forceinline__ __half from_float(float x) { return __float2half(x); }

__device__ __forceinline__ uint64_t splitmix64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

template <typename T>
__global__ void fill_uniform_kernel(T *data, int64_t n, uint64_t seed)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        uint64_t bits = splitmix64(seed * 0xD1B54A32D192ED03ull + (uint64_t)i);
        float u = (float)(bits >> 40) * (1.0f / 16777216.0f); // [0, 1), 24 bits
        float x = 2.0f * u - 1.0f;
        data[i] = from_float<T>(x == 0.0f ? 0.5f : x); // never an exact zero
    }
}

// Online (max, sum of exp) pair, merged across threads.
struct MaxSum {
    float m, l;
};

__device__ __forceinline__ MaxSum merge(MaxSum a, MaxSum b)
{
    float m = fmaxf(a.m, b.m);
    if (m == -INFINITY) return {m, 0.0f};
    return {m, a.l * __expf(a.m - m) + b.l * __expf(b.m - m)};
}

constexpr int kSoftmaxMaxThreads = 256; // fewer for short rows: one element group each
constexpr int kVec = 8; // 8 x 16-bit = one 16-byte load

// One block per row (blockDim.x a multiple of 32, <= 256). Two passes over the row: (max, sum) online, then P = exp(s-m)/l.
template <typename T, bool kVectorized>
__global__ void __launch_bounds__(kSoftmaxMaxThreads)
softmax_rows_kernel(const T *s, T *p, int64_t seqlen_q, int64_t seqlen_k, int causal)
{
    const int64_t row = blockIdx.x;
    const int64_t query = row % seqlen_q;
    const T *s_row = s + row * seqlen_k;
    T *p_row = p + row * seqlen_k;
    // Keys 0..last may be attended to (causal: bottom-right aligned diagonal).
    int64_t last = causal ? query + seqlen_k - seqlen_q : seqlen_k - 1;
    if (last > seqlen_k - 1) last = seqlen_k - 1;

    MaxSum acc = {-INFINITY, 0.0f};
    constexpr int step = kVectorized ? kVec : 1;
    const int64_t stride = (int64_t)blockDim.x * step;
    for (int64_t j0 = threadIdx.x * step; j0 <= last; j0 += stride) {
        T v[kVec];
        if (kVectorized) *reinterpret_cast<uint4 *>(v) = *reinterpret_cast<const uint4 *>(s_row + j0);
        else v[0] = s_row[j0];
#pragma unroll
        for (int t = 0; t < step; ++t) {
            if (j0 + t > last) break;
            float x = to_float(v[t]);
            float m = fmaxf(acc.m, x);
            acc.l = acc.l * __expf(acc.m - m) + __expf(x - m);
            acc.m = m;
        }
    }
    for (int offset = 16; offset > 0; offset >>= 1) {
        MaxSum other = {__shfl_xor_sync(0xffffffffu, acc.m, offset),
                        __shfl_xor_sync(0xffffffffu, acc.l, offset)};
        acc = merge(acc, other);
    }
    __shared__ MaxSum warp_acc[kSoftmaxMaxThreads / 32];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) warp_acc[warp] = acc;
    __syncthreads();
    acc = warp_acc[0];
    for (int w = 1; w < (int)blockDim.x / 32; ++w) acc = merge(acc, warp_acc[w]);
    const float inv_l = acc.l > 0.0f ? 1.0f / acc.l : 0.0f;

    for (int64_t j0 = threadIdx.x * step; j0 < seqlen_k; j0 += stride) {
        T v[kVec];
        if (kVectorized) *reinterpret_cast<uint4 *>(v) = *reinterpret_cast<const uint4 *>(s_row + j0);
        else v[0] = s_row[j0];
#pragma unroll
        for (int t = 0; t < step; ++t) {
            float x = (j0 + t <= last) ? __expf(to_float(v[t]) - acc.m) * inv_l : 0.0f;
            v[t] = from_float<T>(x);
        }
        if (kVectorized) *reinterpret_cast<uint4 *>(p_row + j0) = *reinterpret_cast<uint4 *>(v);
        else p_row[j0] = v[0];
    }
}

// Register-resident rows (the common case: seqlen_k % 8 == 0, <= 16384). A row is
// read once with all its 16-byte loads in flight, reduced (max, then sum), and written
// once. kRowThreads = 32: a warp per row, 8 rows per block, no block barrier;
// kRowThreads = 256: a block per row.
template <typename T, int kRowThreads, int kVecs>
__global__ void __launch_bounds__(256)
softmax_rows_reg_kernel(const T *s, T *p, int64_t rows, int64_t seqlen_q, int64_t seqlen_k,
                        int causal)
{
    constexpr int kRowsPerBlock = 256 / kRowThreads;
    const int t = threadIdx.x % kRowThreads;
    const int64_t row = blockIdx.x * (int64_t)kRowsPerBlock + threadIdx.x / kRowThreads;
    if (kRowThreads == 32 && row >= rows) return; // whole warps only: no barrier below
    const int64_t query = row % seqlen_q;
    int64_t last = causal ? query + seqlen_k - seqlen_q : seqlen_k - 1;
    if (last > seqlen_k - 1) last = seqlen_k - 1;
    const T *s_row = s + row * seqlen_k;
    T *p_row = p + row * seqlen_k;

    T v[kVecs][kVec];
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
        const int64_t j0 = ((int64_t)i * kRowThreads + t) * kVec;
        if (j0 < seqlen_k) *reinterpret_cast<uint4 *>(v[i]) = *reinterpret_cast<const uint4 *>(s_row + j0);
    }
    float m = -INFINITY;
#pragma unroll
    for (int i = 0; i < kVecs; ++i)
#pragma unroll
        for (int e = 0; e < kVec; ++e)
            if (((int64_t)i * kRowThreads + t) * kVec + e <= last) m = fmaxf(m, to_float(v[i][e]));
    __shared__ float partial[2][8];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (int offset = 16; offset > 0; offset >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, offset));
    if (kRowThreads == 256) {
        if (lane == 0) partial[0][warp] = m;
        __syncthreads();
        m = partial[0][0];
        for (int w = 1; w < 8; ++w) m = fmaxf(m, partial[0][w]);
    }
    float l = 0.0f;
#pragma unroll
    for (int i = 0; i < kVecs; ++i)
#pragma unroll
        for (int e = 0; e < kVec; ++e)
            if (((int64_t)i * kRowThreads + t) * kVec + e <= last) l += __expf(to_float(v[i][e]) - m);
    for (int offset = 16; offset > 0; offset >>= 1) l += __shfl_xor_sync(0xffffffffu, l, offset);
    if (kRowThreads == 256) {
        if (lane == 0) partial[1][warp] = l;
        __syncthreads();
        l = 0.0f;
        for (int w = 0; w < 8; ++w) l += partial[1][w];
    }
    const float inv_l = l > 0.0f ? 1.0f / l : 0.0f; // fully masked row: all zeros
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
        const int64_t j0 = ((int64_t)i * kRowThreads + t) * kVec;
        if (j0 >= seqlen_k) continue;
#pragma unroll
        for (int e = 0; e < kVec; ++e)
            v[i][e] = from_float<T>(j0 + e <= last ? __expf(to_float(v[i][e]) - m) * inv_l : 0.0f);
        *reinterpret_cast<uint4 *>(p_row + j0) = *reinterpret_cast<const uint4 *>(v[i]);
    }
}

template <typename T>
__global__ void rel_l2_kernel(const T *a, const T *ref, int64_t n, double *sums)
{
    double diff2 = 0.0, ref2 = 0.0;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        double r = to_float(ref[i]), d = (double)to_float(a[i]) - r;
        diff2 += d * d;
        ref2 += r * r;
    }
    for (int offset = 16; offset > 0; offset >>= 1) {
        diff2 += __shfl_xor_sync(0xffffffffu, diff2, offset);
        ref2 += __shfl_xor_sync(0xffffffffu, ref2, offset);
    }
    if (threadIdx.x % 32 == 0) {
        atomicAdd(&sums[0], diff2);
        atomicAdd(&sums[1], ref2);
    }
}

int grid_for(int64_t n, int threads)
{
    int64_t blocks = (n + threads - 1) / threads;
    return (int)(blocks < 4096 ? (blocks > 0 ? blocks : 1) : 4096);
}

template <typename T, int kRowThreads, int kVecs>
void launch_reg(const void *s, void *p, int64_t rows, int64_t seqlen_q, int64_t seqlen_k,
                int causal, cudaStream_t stream)
{
    const int64_t blocks = (rows + 256 / kRowThreads - 1) / (256 / kRowThreads);
    softmax_rows_reg_kernel<T, kRowThreads, kVecs><<<(unsigned)blocks, 256, 0, stream>>>(
        (const T *)s, (T *)p, rows, seqlen_q, seqlen_k, causal);
}

template <typename T>
cudaError_t softmax_rows(const void *s, void *p, int64_t heads, int64_t seqlen_q,
                         int64_t seqlen_k, int causal, cudaStream_t stream)
{
    const int64_t rows = heads * seqlen_q;
    if (rows > 0x7fffffff) return cudaErrorInvalidValue;
    if (seqlen_k % kVec == 0 && seqlen_k <= 16384) {
        const int64_t groups = seqlen_k / kVec; // 16-byte groups per row
        if (groups <= 32) launch_reg<T, 32, 1>(s, p, rows, seqlen_q, seqlen_k, causal, stream);
        else if (groups <= 64) launch_reg<T, 32, 2>(s, p, rows, seqlen_q, seqlen_k, causal, stream);
        else if (groups <= 128) launch_reg<T, 32, 4>(s, p, rows, seqlen_q, seqlen_k, causal, stream);
        else if (groups <= 256) launch_reg<T, 32, 8>(s, p, rows, seqlen_q, seqlen_k, causal, stream);
        else if (groups <= 512) launch_reg<T, 256, 2>(s, p, rows, seqlen_q, seqlen_k, causal, stream);
        else if (groups <= 1024) launch_reg<T, 256, 4>(s, p, rows, seqlen_q, seqlen_k, causal, stream);
        else launch_reg<T, 256, 8>(s, p, rows, seqlen_q, seqlen_k, causal, stream);
        return cudaGetLastError();
    }
    // Any other length: one block per row, online (max, sum), two passes over memory.
    const bool vectorized = seqlen_k % kVec == 0;
    const int64_t groups = vectorized ? seqlen_k / kVec : seqlen_k;
    int64_t threads = (groups + 31) / 32 * 32;
    if (threads > kSoftmaxMaxThreads) threads = kSoftmaxMaxThreads;
    if (vectorized)
        softmax_rows_kernel<T, true><<<(unsigned)rows, (unsigned)threads, 0, stream>>>(
            (const T *)s, (T *)p, seqlen_q, seqlen_k, causal);
    else
        softmax_rows_kernel<T, false><<<(unsigned)rows, (unsigned)threads, 0, stream>>>(
            (const T *)s, (T *)p, seqlen_q, seqlen_k, causal);
    return cudaGetLastError();
}

struct EmptyBigParams {
    char bytes[1024];
};

__global__ void empty_kernel(int64_t) {}
__global__ void empty_big_kernel(EmptyBigParams) {}

} // namespace

extern "C" int bench_empty_launch(int big_params, void *stream)
{
    cudaStream_t st = (cudaStream_t)stream;
    if (big_params)
        empty_big_kernel<<<1, 32, 0, st>>>(EmptyBigParams{});
    else
        empty_kernel<<<1, 32, 0, st>>>(0);
    return (int)cudaGetLastError();
}

extern "C" int bench_set_smem_attribute(int smem_bytes)
{
    cudaFunction_t function = nullptr;
    cudaError_t e = cudaGetFuncBySymbol(&function, reinterpret_cast<const void *>(empty_kernel));
    if (e != cudaSuccess) return (int)e;
    return (int)cudaFuncSetAttribute(reinterpret_cast<const void *>(empty_kernel),
                                     cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes);
}

extern "C" int bench_fill_uniform(void *data, int64_t n, int is_bf16, uint64_t seed,
                                  void *stream)
{
    cudaStream_t st = (cudaStream_t)stream;
    if (is_bf16)
        fill_uniform_kernel<<<grid_for(n, 256), 256, 0, st>>>((__nv_bfloat16 *)data, n, seed);
    else
        fill_uniform_kernel<<<grid_for(n, 256), 256, 0, st>>>((__half *)data, n, seed);
    return (int)cudaGetLastError();
}

extern "C" int bench_softmax_rows(const void *s, void *p, int64_t heads, int64_t seqlen_q,
                                  int64_t seqlen_k, int causal, int is_bf16, void *stream)
{
    cudaStream_t st = (cudaStream_t)stream;
    return (int)(is_bf16 ? softmax_rows<__nv_bfloat16>(s, p, heads, seqlen_q, seqlen_k, causal, st)
                         : softmax_rows<__half>(s, p, heads, seqlen_q, seqlen_k, causal, st));
}

extern "C" int bench_rel_l2(const void *a, const void *ref, int64_t n, int is_bf16,
                            double *rel, void *stream)
{
    cudaStream_t st = (cudaStream_t)stream;
    double *sums = nullptr, host[2] = {0.0, 0.0};
    cudaError_t err = cudaMalloc(&sums, 2 * sizeof(double));
    if (err != cudaSuccess) return (int)err;
    err = cudaMemsetAsync(sums, 0, 2 * sizeof(double), st);
    if (err == cudaSuccess) {
        if (is_bf16)
            rel_l2_kernel<<<grid_for(n, 256), 256, 0, st>>>((const __nv_bfloat16 *)a,
                                                            (const __nv_bfloat16 *)ref, n, sums);
        else
            rel_l2_kernel<<<grid_for(n, 256), 256, 0, st>>>((const __half *)a,
                                                            (const __half *)ref, n, sums);
        err = cudaGetLastError();
    }
    if (err == cudaSuccess) err = cudaMemcpyAsync(host, sums, sizeof host, cudaMemcpyDeviceToHost, st);
    if (err == cudaSuccess) err = cudaStreamSynchronize(st);
    cudaFree(sums);
    if (err == cudaSuccess) *rel = sqrt(host[0]) / sqrt(host[1]);
    return (int)err;
}
