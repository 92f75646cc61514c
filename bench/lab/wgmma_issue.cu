// How long a warpgroup's wgmma take to issue against how long they take to finish: one
// group is S's shape in the forward (8 x m64n128k16, bf16, both operands in shared
// memory, K = 128), issued `groups` times back to back by one or two warpgroups of a
// block (one block per SM), in SM clocks (clock64) from the first issue. If issuing
// returns about when the products finish, a warp cannot run other work behind its own
// products (instructions issue in order), only behind the other warpgroup's. Runs on
// the GPU as the build's bench/lab/fa2_wgmma_issue (sm_90a builds).
#include <cstdint>
#include <cstdio>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "sm90/wgmma.cuh"

namespace {

constexpr int kRows = 64, kKeys = 128, kDim = 128;
constexpr int kTileBytes = (kRows * 2 + kKeys) * kDim * 2;  // A for two warpgroups, B

// clocks[block][warpgroup][0: issue done, 1: all done]
__global__ void issue_kernel(int groups, int warpgroups, long long *clocks, float *sink)
{
#if defined(FA2_SM90A)
    extern __shared__ __align__(1024) uint8_t smem[];
    const uint32_t base = (fa2::smem_addr(smem) + 1023u) & ~1023u;
    const int tid = threadIdx.x, wg = tid / 128;
    for (int i = tid; i < kTileBytes / 4; i += blockDim.x)  // bf16 ones
        reinterpret_cast<uint32_t *>(smem + (base - fa2::smem_addr(smem)))[i] = 0x3f803f80u;
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();
    if (wg >= warpgroups) return;
    const uint32_t a_tile = base, b_tile = base + kRows * 2 * kDim * 2;
    const uint64_t a_desc = fa2::desc_k_major<kRows * 2>(a_tile, wg * kRows, 0);
    const uint64_t b_desc = fa2::desc_k_major<kKeys>(b_tile, 0, 0);
    float acc[kKeys / 8][4];
    const long long t0 = clock64();
    for (int g = 0; g < groups; ++g) {
        fa2::wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < kDim / 16; ++kk)
            fa2::wgmma_ss<__nv_bfloat16, 0, 0>(acc, a_desc + fa2::k_major_step<kRows * 2>(kk),
                                               b_desc + fa2::k_major_step<kKeys>(kk),
                                               g > 0 || kk > 0);
        fa2::wgmma_commit();
    }
    const long long t1 = clock64();
    fa2::wgmma_wait<0>();
    fa2::reg_fence(acc);
    const long long t2 = clock64();
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < kKeys / 8; ++i) s += acc[i][0];
    if (s == 12345.f) sink[tid] = s;  // keeps the products alive
    if (tid % 128 == 0) {
        clocks[(blockIdx.x * 2 + wg) * 2] = t1 - t0;
        clocks[(blockIdx.x * 2 + wg) * 2 + 1] = t2 - t0;
    }
#endif
}

// The median over n blocks of warpgroup 0's clock `which` (0 issued, 1 done).
long long median_of(const long long *clocks, int n, int which)
{
    long long v[1024];
    for (int i = 0; i < n; ++i) {  // insertion sort: n is the SM count
        long long x = clocks[i * 4 + which];
        int j = i;
        for (; j > 0 && v[j - 1] > x; --j) v[j] = v[j - 1];
        v[j] = x;
    }
    return v[n / 2];
}

}  // namespace

int main()
{
    int sms = 0;
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0) != cudaSuccess) {
        printf("wgmma_issue: no CUDA device\n");
        return 1;
    }
    long long *clocks;
    float *sink;
    cudaMalloc(&clocks, sms * 4 * sizeof(long long));
    cudaMalloc(&sink, 256 * sizeof(float));
    const int smem = 160 * 1024;  // one block per SM
    static_assert(kTileBytes + 1024 <= 160 * 1024, "the tiles fit");
    cudaFuncSetAttribute(issue_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    printf("groups of 8 x m64n128k16 bf16 (S of one warpgroup's tile), median over %d SMs,\n"
           "SM clocks from the first issue; ideal at 4096 dense FLOP per clock: 512 per group\n",
           sms);
    printf("warpgroups  groups  issued after  done after  done per group\n");
    long long *host = new long long[sms * 4];
    for (int warpgroups = 1; warpgroups <= 2; ++warpgroups) {
        for (int groups : {1, 2, 4, 8}) {
            for (int rep = 0; rep < 2; ++rep)  // the first is a warm-up
                issue_kernel<<<sms, 256, smem>>>(groups, warpgroups, clocks, sink);
            if (cudaDeviceSynchronize() != cudaSuccess) {
                printf("wgmma_issue: kernel failed\n");
                return 1;
            }
            cudaMemcpy(host, clocks, sms * 4 * sizeof(long long), cudaMemcpyDeviceToHost);
            // warpgroup 0's figures, median over the SMs
            const int n = sms < 1024 ? sms : 1024;
            const long long issued = median_of(host, n, 0), done = median_of(host, n, 1);
            printf("%10d  %6d  %12lld  %10lld  %14.0f\n", warpgroups, groups, issued, done,
                   (double)done / groups);
        }
    }
    delete[] host;
    return 0;
}
