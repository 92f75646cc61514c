// Whether a warpgroup that waits on the tensor cores slows the other warpgroup's softmax-like
// work on the same SM sub-partitions. Warpgroup 1 (the worker) runs a fixed loop over 64
// registers per thread, either softcap's chain per value (FMUL, tanh, FFMA, ex2, FADD,
// FFMA) or FFMAs only, and times it (clock64). Meanwhile warpgroup 0 (the issuer):
//   idle     returns at once;
//   blocked  issues groups of 8 x m64n128k16 (both operands in shared memory) back to
//            back, so that its warps wait inside the wgmma issue most of the time, as a
//            forward warpgroup's do in its issue phase;
//   paced    issues 4 of them (about 270 clocks, within the queue), waits for them
//            (wgmma.wait_group), again: no warp held at an issue, but the tensor cores
//            idle at each drain;
//   blocked-rs  as blocked with A from registers (P V's form);
//   blocked-n64  as blocked with m64n64k16 (the same tensor work in twice the
//            instructions);
//   pipelined-2, pipelined-4  groups of 2 (4) products, a new group issued only once at
//            most one is still in flight (wgmma.wait_group 1): the warps wait at the
//            wait, not at an issue (groups of 4 keep the tensor cores fed, of 2 do not);
//   same     runs the worker's loop too (the two softmax phases side by side).
// Median over the SMs, one block per SM. Runs on the GPU as the build's
// bench/lab/fa2_issue_neighbour (sm_90a builds).
#include <cstdint>
#include <cstdio>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "common/ptx.cuh"
#include "sm90/wgmma.cuh"

namespace {

constexpr int kRows = 64, kKeys = 128, kDim = 128;
constexpr int kTileBytes = (kRows + kKeys) * kDim * 2;  // A, B
constexpr int kValues = 64;                              // a thread's scores per tile
enum Issuer {
    kIdle,
    kBlocked,
    kPaced,
    kBlockedRs,
    kBlockedN64,
    kPipelined2,
    kPipelined4,
    kSame,
    kIssuers
};
const char *const kIssuerNames[kIssuers] = {"idle",        "blocked",     "paced",
                                            "blocked-rs",  "blocked-n64", "pipelined-2",
                                            "pipelined-4", "same"};
enum Work { kSoftcapChain, kEx2Chain, kFfmaOnly, kWorks };
const char *const kWorkNames[kWorks] = {"softcap chain", "ex2 chain", "FFMA only"};

template <int kWork>
__device__ float worker_loop(int rounds, int tid)
{
    float v[kValues];
#pragma unroll
    for (int i = 0; i < kValues; ++i) v[i] = (tid * kValues + i) * 1e-5f;
    float sum = 0.f;
    for (int r = 0; r < rounds; ++r) {
#pragma unroll
        for (int i = 0; i < kValues; ++i) {
            if constexpr (kWork == kSoftcapChain) {
                const float e = fa2::exp2_approx(fmaf(fa2::tanh_approx(v[i] * 0.03f), 43.f, -40.f));
                sum += e;
                v[i] = fmaf(e, 1e-3f, v[i]);
            } else if constexpr (kWork == kEx2Chain) {
                const float e = fa2::exp2_approx(fmaf(v[i], 43.f, -40.f));
                sum += e;
                v[i] = fmaf(e, 1e-3f, v[i]);
            } else {
                v[i] = fmaf(fmaf(fmaf(fmaf(v[i], 0.999f, 1e-4f), 0.999f, 1e-4f), 0.999f, 1e-4f),
                            0.999f, 1e-4f);
            }
        }
    }
#pragma unroll
    for (int i = 0; i < kValues; ++i) sum += v[i];
    return sum;
}

// `groups` x 8 m64nNk16, B from shared memory, A from shared memory (K-major B, as S) or
// from registers (MN-major B, as P V), committed in groups of kChunk products: back to
// back (kPipelined false), or each group only once at most one earlier one is in flight.
template <int kN, bool kRs, int kChunk = 8, bool kPipelined = false>
__device__ float issue_products(uint32_t a_tile, uint32_t b_tile, int groups, int tid)
{
    float out = 0.f;
#if defined(FA2_SM90A)
    const uint64_t a_desc = fa2::desc_k_major<kRows>(a_tile, 0, 0);
    const uint64_t b_desc = fa2::desc_k_major<kN>(b_tile, 0, 0);
    const uint64_t v_desc = fa2::desc_mn_major<kDim>(b_tile, 0);  // K = kDim rows
    float acc[kN / 8][4];
    uint32_t pa[kDim / 16][4];
#pragma unroll
    for (int kk = 0; kk < kDim / 16; ++kk)
        pa[kk][0] = pa[kk][1] = pa[kk][2] = pa[kk][3] = 0x3c233c23u + tid;
    for (int g = 0; g < groups * 8 / kChunk; ++g) {
        if (kPipelined && g >= 2) fa2::wgmma_wait<1>();
        fa2::wgmma_fence();
#pragma unroll
        for (int c = 0; c < kChunk; ++c) {
            const int kk = (g * kChunk + c) % (kDim / 16);
            if constexpr (kRs)
                fa2::wgmma_rs<__nv_bfloat16, 1>(acc, pa[kk], v_desc + fa2::mn_major_step(kk),
                                                g > 0 || c > 0);
            else
                fa2::wgmma_ss<__nv_bfloat16, 0, 0>(acc, a_desc + fa2::k_major_step<kRows>(kk),
                                                   b_desc + fa2::k_major_step<kN>(kk),
                                                   g > 0 || c > 0);
        }
        fa2::wgmma_commit();
    }
    fa2::wgmma_wait<0>();
    fa2::reg_fence(acc);
#pragma unroll
    for (int i = 0; i < kN / 8; ++i) out += acc[i][0];
#endif
    return out;
}

// clocks[block]: the worker's loop; tensor[block]: the issuer's clocks to its last product.
template <int kWork, int issuer>
__global__ void neighbour_kernel(int rounds, int groups, long long *clocks, long long *tensor,
                                 float *sink)
{
#if defined(FA2_SM90A)
    extern __shared__ __align__(1024) uint8_t smem[];
    const uint32_t base = (fa2::smem_addr(smem) + 1023u) & ~1023u;
    const int tid = threadIdx.x, wg = tid / 128;
    for (int i = tid; i < kTileBytes / 4; i += blockDim.x)  // bf16 values near 1e-2
        reinterpret_cast<uint32_t *>(smem + (base - fa2::smem_addr(smem)))[i] = 0x3c233c23u;
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();
    float out = 0.f;
    if (wg == 1) {
        const long long t0 = clock64();
        out = worker_loop<kWork>(rounds, tid);
        const long long t1 = clock64();
        if (tid == 128) clocks[blockIdx.x] = t1 - t0;
    } else if constexpr (issuer == kSame) {
        out = worker_loop<kWork>(rounds, tid);
    } else if constexpr (issuer == kBlocked || issuer == kBlockedRs || issuer == kBlockedN64 ||
                         issuer == kPipelined2 || issuer == kPipelined4) {
        const uint32_t a_tile = base, b_tile = base + kRows * kDim * 2;
        const long long t0 = clock64();
        if constexpr (issuer == kBlockedN64)
            out = issue_products<64, false>(a_tile, b_tile, groups * 2, tid);
        else if constexpr (issuer == kPipelined2 || issuer == kPipelined4)
            out = issue_products<kKeys, false, issuer == kPipelined2 ? 2 : 4, true>(
                a_tile, b_tile, groups, tid);
        else
            out = issue_products<kKeys, issuer == kBlockedRs>(a_tile, b_tile, groups, tid);
        const long long t1 = clock64();
        if (tid == 0) tensor[blockIdx.x] = t1 - t0;
    } else if constexpr (issuer == kPaced) {
        const uint32_t a_tile = base, b_tile = base + kRows * kDim * 2;
        const uint64_t a_desc = fa2::desc_k_major<kRows>(a_tile, 0, 0);
        const uint64_t b_desc = fa2::desc_k_major<kKeys>(b_tile, 0, 0);
        float acc[kKeys / 8][4];
        const long long t0 = clock64();
        for (int g = 0; g < groups; ++g) {
            fa2::wgmma_fence();
#pragma unroll
            for (int half = 0; half < 2; ++half) {  // half a group, then its wait
#pragma unroll
                for (int kk = half * 4; kk < half * 4 + 4; ++kk)
                    fa2::wgmma_ss<__nv_bfloat16, 0, 0>(acc, a_desc + fa2::k_major_step<kRows>(kk),
                                                       b_desc + fa2::k_major_step<kKeys>(kk),
                                                       g > 0 || kk > 0);
                fa2::wgmma_commit();
                fa2::wgmma_wait<0>();
                fa2::reg_fence(acc);
                fa2::wgmma_fence();
            }
        }
        fa2::wgmma_wait<0>();
        fa2::reg_fence(acc);
        const long long t1 = clock64();
        if (tid == 0) tensor[blockIdx.x] = t1 - t0;
#pragma unroll
        for (int i = 0; i < kKeys / 8; ++i) out += acc[i][0];
    }
    if (out == 12345.f) sink[tid] = out;  // keeps the work alive
#endif
}

long long median(const long long *x, int n)
{
    long long v[1024];
    for (int i = 0; i < n; ++i) {  // insertion sort: n is the SM count
        int j = i;
        for (; j > 0 && v[j - 1] > x[i]; --j) v[j] = v[j - 1];
        v[j] = x[i];
    }
    return v[n / 2];
}

template <int kWork, int kIssuer>
void launch(int sms, int smem, int rounds, int groups, long long *clocks, long long *tensor,
            float *sink)
{
    cudaFuncSetAttribute(neighbour_kernel<kWork, kIssuer>,
                         cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    neighbour_kernel<kWork, kIssuer><<<sms, 256, smem>>>(rounds, groups, clocks, tensor, sink);
}

template <int kWork>
void launch_issuer(int issuer, int sms, int smem, int rounds, int groups, long long *clocks,
                   long long *tensor, float *sink)
{
    void (*const by_issuer[kIssuers])(int, int, int, int, long long *, long long *, float *) = {
        launch<kWork, kIdle>,        launch<kWork, kBlocked>,    launch<kWork, kPaced>,
        launch<kWork, kBlockedRs>,   launch<kWork, kBlockedN64>, launch<kWork, kPipelined2>,
        launch<kWork, kPipelined4>,  launch<kWork, kSame>};
    by_issuer[issuer](sms, smem, rounds, groups, clocks, tensor, sink);
}

template <int kWork>
int run(int sms, long long *clocks, long long *tensor, float *sink, int rounds, int groups)
{
    const int smem = 160 * 1024;  // one block per SM
    long long host[1024], host_tensor[1024];
    const int n = sms < 1024 ? sms : 1024;
    long long alone = 0;
    for (int issuer = 0; issuer < kIssuers; ++issuer) {
        cudaMemset(tensor, 0, sms * sizeof(long long));
        for (int rep = 0; rep < 2; ++rep)  // the first is a warm-up
            launch_issuer<kWork>(issuer, sms, smem, rounds, groups, clocks, tensor, sink);
        if (cudaDeviceSynchronize() != cudaSuccess) {
            printf("issue_neighbour: kernel failed\n");
            return 1;
        }
        cudaMemcpy(host, clocks, n * sizeof(long long), cudaMemcpyDeviceToHost);
        cudaMemcpy(host_tensor, tensor, n * sizeof(long long), cudaMemcpyDeviceToHost);
        const long long worker = median(host, n), busy = median(host_tensor, n);
        if (issuer == kIdle) alone = worker;
        // (per m64n128k16's work: an n64 product counts half)
        const int products = issuer == kIdle || issuer == kSame ? 0 : groups * 8;
        printf("%-14s %-15s %10lld %9.3f %12lld %16.0f\n", kWorkNames[kWork],
               kIssuerNames[issuer], worker, (double)worker / alone, busy,
               products ? (double)busy / products : 0.0);
    }
    return 0;
}

}  // namespace

int main()
{
    int sms = 0;
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0) != cudaSuccess) {
        printf("issue_neighbour: no CUDA device\n");
        return 1;
    }
    long long *clocks, *tensor;
    float *sink;
    cudaMalloc(&clocks, sms * sizeof(long long));
    cudaMalloc(&tensor, sms * sizeof(long long));
    cudaMalloc(&sink, 256 * sizeof(float));
    const int rounds = 24, groups = 96;  // the issuer outlasts the worker (about 52k clocks)
    printf("worker (warpgroup 1): %d rounds of %d values per thread; issuer (warpgroup 0):\n"
           "%d groups of 8 x m64n128k16 bf16; median over %d SMs, SM clocks\n",
           rounds, kValues, groups, sms);
    printf("%-14s %-15s %10s %9s %12s %16s\n", "work", "issuer", "worker", "vs idle",
           "issuer done", "per n128 product");
    if (run<kSoftcapChain>(sms, clocks, tensor, sink, rounds, groups)) return 1;
    if (run<kEx2Chain>(sms, clocks, tensor, sink, rounds * 2, groups)) return 1;
    if (run<kFfmaOnly>(sms, clocks, tensor, sink, rounds * 4, groups)) return 1;
    return 0;
}
