// The forward's overlapped loop with nothing but its tensor-core and softmax work, to
// compare loop shapes before building one into the kernel: kWarpgroups math warpgroups of
// 64 rows take turns (round robin) at issuing tile j's S = Q Kᵀ and tile j - 1's P V
// (8 + 8 x m64n128k16, bf16, d = 128, 128 keys), then run tile j's softmax, for `tiles`
// tiles. Operands stay in shared memory (no copies); P goes to P V from registers (as the
// kernel's wgmma_rs) or through shared memory (stmatrix, then A from shared memory).
// The softmax is the bounded softcap's (tanh, exp2 against a fixed offset, row sums) or
// plain's (row maxima across the quad, exp2, row sums, O rescaled every tile).
// Prints a warpgroup's clocks per tile (SM clocks, median over the SMs), the block's per
// 64-row tile, and the tensor cores' share of time: a 64-row tile's two products take
// 1024 clocks at an H200 SM's 4096 dense FLOP per clock. Runs on the GPU as the build's
// bench/lab/fa2_pingpong_skeleton (sm_90a builds).
#include <cstdint>
#include <cstdio>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "exp2_poly.h"
#include "common/ptx.cuh"
#include "sm90/wgmma.cuh"

namespace {

constexpr int kKeys = 128, kDim = 128, kNT = kKeys / 8;
enum Softmax { kBoundedSoftcap, kPlain };

template <int kWarpgroups>
struct Layout {
    static constexpr int kQRows = 64 * kWarpgroups;
    static constexpr uint32_t kQ = 0, kK = kQ + kQRows * kDim * 2, kV = kK + kKeys * kDim * 2,
                              kP = kV + kKeys * kDim * 2;
    static constexpr uint32_t kBytes = kP + kWarpgroups * 64 * kKeys * 2;
};

// Tile j's P (fp32 accumulator layout) into this warpgroup's 64 x 128 K-major panel tile.
__device__ __forceinline__ void store_p(uint32_t p_tile, const float (&s)[kNT][4], int warp,
                                        int lane)
{
#if defined(FA2_SM90A)
    const int m = lane / 8, row = warp * 16 + (m % 2) * 8 + lane % 8;
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) {
        uint32_t a[4];
        fa2::a_fragment<__nv_bfloat16>(a, s, kk);
        const uint32_t addr = p_tile + fa2::panel_offset<64>(row, 2 * kk + m / 2);
        asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(
                         addr),
                     "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3])
                     : "memory");
    }
#endif
}

// Registers as the kernel's math warpgroups would have them beside a producer warpgroup:
// about 240 with two (a 256-thread bound), 160 with three (a 384-thread bound: 168).
// kPoly > 0: the bounded softcap's exp2 of every kPoly-th n8 tile on the FMA pipe.
// kTurns = false: the warpgroups issue when ready, without taking turns.
// kPaced: S and P V issued as groups of 2 products, a group only once at most one of the
// warpgroup's earlier groups is in flight (its warps wait at wgmma.wait_group, not at
// an issue the tensor cores cannot take yet); P V from registers only.
template <int kWarpgroups, int kSoftmax, bool kPSmem, int kPoly, bool kTurns, bool kPaced>
__global__ void __launch_bounds__(kWarpgroups == 2 ? 256 : 384, 1)
    skeleton_kernel(int tiles, long long *clocks, float *sink)
{
#if defined(FA2_SM90A)
    using L = Layout<kWarpgroups>;
    extern __shared__ __align__(1024) uint8_t smem[];
    const uint32_t base = (fa2::smem_addr(smem) + 1023u) & ~1023u;
    const int tid = threadIdx.x, warp = (tid / 32) % 4, lane = tid % 32;
    const int wg = __shfl_sync(0xffffffffu, tid / 128, 0);  // seen as warp-uniform
    for (uint32_t i = tid; i < L::kP / 4; i += blockDim.x)  // bf16 values near 1e-2
        reinterpret_cast<uint32_t *>(smem + (base - fa2::smem_addr(smem)))[i] = 0x3c233c23u;
    fa2::fence_proxy_async();
    __syncthreads();

    const uint32_t p_tile = base + L::kP + wg * 64 * kKeys * 2;
    const float tanh_scale = 0.03f, score_log2 = 43.f, offset_log2 = 43.f;

    float o[kDim / 8][4];
    uint32_t pa[kKeys / 16][4];
#pragma unroll
    for (int i = 0; i < kDim / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
    float row_sum[2] = {0.f, 0.f}, row_max[2] = {-1e30f, -1e30f}, alpha[2] = {1.f, 1.f};

    const auto take_turn = [&] {
        if constexpr (kTurns) fa2::named_barrier_sync(1 + wg, 256);
    };
    const auto pass_turn = [&] {
        if constexpr (kTurns) fa2::named_barrier_arrive(1 + (wg + 1) % kWarpgroups, 256);
    };
    // (descriptors built at each issue from opaque addresses: not held in registers)
    const auto issue_s = [&](float (&s)[kNT][4]) {
        const uint64_t q_desc =
            fa2::desc_k_major<L::kQRows>(fa2::opaque(base + L::kQ), wg * 64, 0);
        const uint64_t k_desc = fa2::desc_k_major<kKeys>(fa2::opaque(base + L::kK), 0, 0);
        fa2::wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < kDim / 16; ++kk)
            fa2::wgmma_ss<__nv_bfloat16, 0, 0>(s, q_desc + fa2::k_major_step<L::kQRows>(kk),
                                               k_desc + fa2::k_major_step<kKeys>(kk), kk > 0);
        fa2::wgmma_commit();
    };
    const auto issue_pv = [&] {
        const uint64_t v_desc = fa2::desc_mn_major<kKeys>(fa2::opaque(base + L::kV), 0);
        const uint64_t p_desc = fa2::desc_k_major<64>(fa2::opaque(p_tile), 0, 0);
        fa2::wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < kKeys / 16; ++kk) {
            if constexpr (kPSmem)
                fa2::wgmma_ss<__nv_bfloat16, 0, 1>(o, p_desc + fa2::k_major_step<64>(kk),
                                                   v_desc + fa2::mn_major_step(kk), 1);
            else
                fa2::wgmma_rs<__nv_bfloat16, 1>(o, pa[kk], v_desc + fa2::mn_major_step(kk), 1);
        }
        fa2::wgmma_commit();
    };
    // groups of 2: S's four, then (with_pv) P V's four
    const auto issue_paced = [&](float (&s)[kNT][4], bool with_pv) {
        const uint64_t q_desc =
            fa2::desc_k_major<L::kQRows>(fa2::opaque(base + L::kQ), wg * 64, 0);
        const uint64_t k_desc = fa2::desc_k_major<kKeys>(fa2::opaque(base + L::kK), 0, 0);
        const uint64_t v_desc = fa2::desc_mn_major<kKeys>(fa2::opaque(base + L::kV), 0);
#pragma unroll
        for (int g = 0; g < kDim / 32; ++g) {
            if (g >= 2) fa2::wgmma_wait<1>();
            fa2::wgmma_fence();
#pragma unroll
            for (int kk = 2 * g; kk < 2 * g + 2; ++kk)
                fa2::wgmma_ss<__nv_bfloat16, 0, 0>(s, q_desc + fa2::k_major_step<L::kQRows>(kk),
                                                   k_desc + fa2::k_major_step<kKeys>(kk), kk > 0);
            fa2::wgmma_commit();
        }
        if (!with_pv) return;
#pragma unroll
        for (int g = 0; g < kKeys / 32; ++g) {
            fa2::wgmma_wait<1>();
            fa2::wgmma_fence();
#pragma unroll
            for (int kk = 2 * g; kk < 2 * g + 2; ++kk)
                fa2::wgmma_rs<__nv_bfloat16, 1>(o, pa[kk], v_desc + fa2::mn_major_step(kk), 1);
            fa2::wgmma_commit();
        }
    };
    const auto softmax = [&](float (&s)[kNT][4]) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            float offset = offset_log2;
            if constexpr (kSoftmax == kPlain) {
                float m = row_max[h];
#pragma unroll
                for (int nt = 0; nt < kNT; ++nt) m = fmaxf(m, fmaxf(s[nt][2 * h], s[nt][2 * h + 1]));
                m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
                m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
                alpha[h] = fa2::exp2_approx((row_max[h] - m) * score_log2);
                row_max[h] = m;
                offset = m * score_log2;
            }
            float sum = 0.f;
#pragma unroll
            for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
                for (int e = 2 * h; e < 2 * h + 2; ++e) {
                    float x = s[nt][e];
                    if constexpr (kSoftmax == kBoundedSoftcap) x = fa2::tanh_approx(x * tanh_scale);
                    x = fmaf(x, score_log2, -offset);
                    s[nt][e] = kPoly > 0 && nt % (kPoly > 0 ? kPoly : 1) == kPoly - 1 ? fa2_exp2_poly(x)
                                                                    : fa2::exp2_approx(x);
                    sum += s[nt][e];
                }
            }
            row_sum[h] = row_sum[h] * alpha[h] + sum;
        }
    };
    const auto p_operand = [&](const float (&s)[kNT][4]) {
        if constexpr (kPSmem) {
            store_p(p_tile, s, warp, lane);
            fa2::fence_proxy_async();
            fa2::named_barrier_sync(1 + kWarpgroups + wg, 128);  // the warpgroup's P stored
        } else {
#pragma unroll
            for (int kk = 0; kk < kKeys / 16; ++kk) fa2::a_fragment<__nv_bfloat16>(pa[kk], s, kk);
        }
    };

    if (kTurns && wg == kWarpgroups - 1) fa2::named_barrier_arrive(1, 256);  // 0 goes first
    const long long t0 = clock64();
    {
        float s[kNT][4];
        take_turn();
        if constexpr (kPaced)
            issue_paced(s, false);
        else
            issue_s(s);
        pass_turn();
        fa2::wgmma_wait<0>();
        fa2::reg_fence(s);
        softmax(s);
        p_operand(s);
    }
    for (int j = 1; j < tiles; ++j) {
        float s[kNT][4];
        take_turn();
        if constexpr (kPaced) {
            issue_paced(s, true);
        } else {
            issue_s(s);
            issue_pv();
        }
        pass_turn();
        fa2::wgmma_wait<kPaced ? kKeys / 32 : 1>();  // S done, P V may be in flight
        fa2::reg_fence(s);
        softmax(s);
        fa2::wgmma_wait<0>();
        fa2::reg_fence(o);
        if constexpr (kSoftmax == kPlain) {
#pragma unroll
            for (int i = 0; i < kDim / 8; ++i) {
                o[i][0] *= alpha[0];
                o[i][1] *= alpha[0];
                o[i][2] *= alpha[1];
                o[i][3] *= alpha[1];
            }
        }
        p_operand(s);
    }
    take_turn();
    issue_pv();
    if (wg != kWarpgroups - 1) pass_turn();  // (the last warpgroup's last turn is not taken)
    fa2::wgmma_wait<0>();
    fa2::reg_fence(o);
    const long long t1 = clock64();
    if (tid % 128 == 0) clocks[blockIdx.x * 4 + wg] = t1 - t0;
    float out = row_sum[0] + row_sum[1];
#pragma unroll
    for (int i = 0; i < kDim / 8; ++i) out += o[i][0] + o[i][3];
    if (out == 12345.f) sink[tid] = out;  // keeps the work alive
#endif
}

long long median(const long long *x, int n, int stride, int offset)
{
    long long v[1024];
    for (int i = 0; i < n; ++i) {  // insertion sort: n is the SM count
        const long long y = x[i * stride + offset];
        int j = i;
        for (; j > 0 && v[j - 1] > y; --j) v[j] = v[j - 1];
        v[j] = y;
    }
    return v[n / 2];
}

template <int kWarpgroups, int kSoftmax, bool kPSmem, int kPoly = 0, bool kTurns = true,
          bool kPaced = false>
int run(int sms, int tiles, long long *clocks, float *sink)
{
    static_assert(!kPaced || !kPSmem, "the paced issue takes P V's A from registers");
    const auto kernel = skeleton_kernel<kWarpgroups, kSoftmax, kPSmem, kPoly, kTurns, kPaced>;
    const int smem = Layout<kWarpgroups>::kBytes + 1024;
    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    for (int rep = 0; rep < 2; ++rep)  // the first is a warm-up
        kernel<<<sms, kWarpgroups * 128, smem>>>(tiles, clocks, sink);
    if (cudaDeviceSynchronize() != cudaSuccess) {
        printf("pingpong_skeleton: kernel failed\n");
        return 1;
    }
    long long host[4 * 1024];
    const int n = sms < 1024 ? sms : 1024;
    cudaMemcpy(host, clocks, n * 4 * sizeof(long long), cudaMemcpyDeviceToHost);
    // clocks per tile of one warpgroup = the loop's period over the block's tiles:
    // each warpgroup runs `tiles` tiles, the block kWarpgroups * tiles
    const double per_wg_tile = (double)median(host, n, 4, 0) / tiles;
    printf("%10d  %-7s  %-5s  %-15s  %9d  %-9s  %16.0f  %15.0f  %9.2f\n", kWarpgroups,
           kPaced ? "paced" : "at once", kTurns ? "yes" : "no",
           kSoftmax == kPlain ? "plain" : "bounded softcap", kPoly, kPSmem ? "shared" : "registers",
           per_wg_tile, per_wg_tile / kWarpgroups, 1024.0 / (per_wg_tile / kWarpgroups));
    return 0;
}

}  // namespace

int main()
{
    int sms = 0;
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0) != cudaSuccess) {
        printf("pingpong_skeleton: no CUDA device\n");
        return 1;
    }
    long long *clocks;
    float *sink;
    cudaMalloc(&clocks, sms * 4 * sizeof(long long));
    cudaMalloc(&sink, 512 * sizeof(float));
    const int tiles = 64;
    printf("%d tiles per warpgroup, median over %d SMs, SM clocks; tensor cores busy: 1024\n"
           "clocks of products per block tile at peak\n", tiles, sms);
    printf("%10s  %-7s  %-5s  %-15s  %9s  %-9s  %16s  %15s  %9s\n", "warpgroups", "issue",
           "turns", "softmax",
           "poly exp2", "P V's A", "per warpgroup tile", "per block tile", "tensor busy");
    int rc = 0;
    rc |= run<2, kPlain, false>(sms, tiles, clocks, sink);
    rc |= run<2, kBoundedSoftcap, false>(sms, tiles, clocks, sink);
    rc |= run<2, kPlain, true>(sms, tiles, clocks, sink);
    rc |= run<2, kBoundedSoftcap, true>(sms, tiles, clocks, sink);
    rc |= run<3, kPlain, true>(sms, tiles, clocks, sink);
    rc |= run<3, kBoundedSoftcap, true>(sms, tiles, clocks, sink);
    rc |= run<2, kBoundedSoftcap, false, 4>(sms, tiles, clocks, sink);
    rc |= run<3, kBoundedSoftcap, true, 8>(sms, tiles, clocks, sink);
    rc |= run<3, kBoundedSoftcap, true, 4>(sms, tiles, clocks, sink);
    rc |= run<3, kBoundedSoftcap, true, 2>(sms, tiles, clocks, sink);
    rc |= run<3, kPlain, true, 0, false>(sms, tiles, clocks, sink);
    rc |= run<3, kBoundedSoftcap, true, 0, false>(sms, tiles, clocks, sink);
    rc |= run<2, kBoundedSoftcap, false, 0, false>(sms, tiles, clocks, sink);
    rc |= run<2, kBoundedSoftcap, false, 4, false>(sms, tiles, clocks, sink);
    rc |= run<2, kBoundedSoftcap, false, 8, false>(sms, tiles, clocks, sink);
    rc |= run<2, kPlain, false, 0, false>(sms, tiles, clocks, sink);
    rc |= run<2, kPlain, false, 0, true, true>(sms, tiles, clocks, sink);
    rc |= run<2, kBoundedSoftcap, false, 0, true, true>(sms, tiles, clocks, sink);
    rc |= run<2, kPlain, false, 0, false, true>(sms, tiles, clocks, sink);
    rc |= run<2, kBoundedSoftcap, false, 0, false, true>(sms, tiles, clocks, sink);
    return rc;
}
