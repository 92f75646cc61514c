// One warpgroup multiplies C[64×128] = A[64×64] · B[64×128] with wgmma, the operands
// in the panel layout of kernels/sm90/wgmma.cuh: A K-major; B K-major (stored as Bᵀ, the
// S = Q Kᵀ case) or MN-major (stored as B, the O += P V case), A from shared memory or
// from registers. Checks the descriptors and fragment layouts in isolation.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "sm90/wgmma.cuh"
#include "wgmma_probe.h"

namespace {

constexpr int kM = 64, kN = 128, kK = 64;

// kMode: bit 0 = B MN-major, bit 1 = A from registers, bit 2 = swap LBO/SBO of B. A
// template argument, so that each kernel is one straight wgmma sequence (with the
// choice made at run time, ptxas had to inject warpgroup.arrive and said so).
template <int kMode>
__global__ void __launch_bounds__(128, 1)
probe_kernel(const __nv_bfloat16 *a, const __nv_bfloat16 *b, float *c)
{
#if defined(FA2_SM90A)
    __shared__ __align__(1024) uint8_t smem[(kM + kN) * kK * 2 + kK * kN * 2];
    using namespace fa2;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    constexpr bool mn_major = kMode & 1, a_regs = kMode & 2, swap = kMode & 4;
    const uint32_t a_smem = smem_addr(smem);
    const uint32_t b_smem = a_smem + kM * kK * 2;
    load_panels<__nv_bfloat16, kM, kK / 8, 128>(a_smem, a, kK, kM, kK, tid);
    if constexpr (mn_major)  // B stored [k][n]: rows = K
        load_panels<__nv_bfloat16, kK, kN / 8, 128>(b_smem, b, kN, kK, kN, tid);
    else  // Bᵀ stored [n][k]: rows = N
        load_panels<__nv_bfloat16, kN, kK / 8, 128>(b_smem, b, kK, kN, kK, tid);
    cp_async_commit();
    cp_async_wait<0>();
    fence_proxy_async();
    __syncthreads();

    float acc[kN / 8][4];
    uint32_t af[kK / 16][4];
    if constexpr (a_regs) {  // the A fragment straight from global memory, as a_fragment lays it out
        float p[kK / 8][4];
        const int r = warp * 16 + lane / 4;
        for (int n = 0; n < kK / 8; ++n)
            for (int e = 0; e < 4; ++e)
                p[n][e] = __bfloat162float(a[(r + 8 * (e / 2)) * kK + n * 8 + 2 * (lane % 4) + e % 2]);
#pragma unroll
        for (int kk = 0; kk < kK / 16; ++kk) a_fragment<__nv_bfloat16>(af[kk], p, kk);
    }
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kK / 16; ++kk) {
        uint64_t bd;
        if constexpr (!mn_major)
            bd = desc_k_major<kN>(b_smem, 0, kk);
        else if constexpr (!swap)
            bd = desc_mn_major<kK>(b_smem, kk);
        else
            bd = wgmma_desc(b_smem + kk * 16 * 128, 1024, kK * 128);
        if constexpr (a_regs) {
            wgmma_rs<__nv_bfloat16, mn_major ? 1 : 0>(acc, af[kk], bd, kk > 0);
        } else {
            const uint64_t ad = desc_k_major<kM>(a_smem, 0, kk);
            wgmma_ss<__nv_bfloat16, 0, mn_major ? 1 : 0>(acc, ad, bd, kk > 0);
        }
    }
    wgmma_commit();
    wgmma_wait<0>();
    reg_fence(acc);
    const int r = warp * 16 + lane / 4;
    for (int n = 0; n < kN / 8; ++n)
        for (int e = 0; e < 4; ++e)
            c[(r + 8 * (e / 2)) * kN + n * 8 + 2 * (lane % 4) + e % 2] = acc[n][e];
#endif
}

}  // namespace

extern "C" int fa2_wgmma_probe(int mode, double *max_rel_err)
{
    const size_t na = kM * kK, nb = kK * kN, nc = kM * kN;
    __nv_bfloat16 *ha = (__nv_bfloat16 *)malloc(na * 2), *hb = (__nv_bfloat16 *)malloc(nb * 2);
    float *hc = (float *)malloc(nc * 4);
    double *ref = (double *)calloc(nc, sizeof(double));
    uint32_t seed = 12345u + mode;
    auto rnd = [&]() {
        seed = seed * 1664525u + 1013904223u;
        return (float)((seed >> 8) & 0xFFFF) / 32768.f - 1.f;
    };
    for (size_t i = 0; i < na; ++i) ha[i] = __float2bfloat16(rnd());
    for (size_t i = 0; i < nb; ++i) hb[i] = __float2bfloat16(rnd());
    // B as [k][n] (MN-major) or Bᵀ as [n][k] (K-major); ref = A · B either way.
    for (int m = 0; m < kM; ++m)
        for (int n = 0; n < kN; ++n)
            for (int k = 0; k < kK; ++k) {
                const float bv = (mode & 1) ? __bfloat162float(hb[k * kN + n])
                                            : __bfloat162float(hb[n * kK + k]);
                ref[m * kN + n] += (double)__bfloat162float(ha[m * kK + k]) * bv;
            }
    __nv_bfloat16 *da, *db;
    float *dc;
    int rc = 1;
    if (cudaMalloc(&da, na * 2) == cudaSuccess && cudaMalloc(&db, nb * 2) == cudaSuccess &&
        cudaMalloc(&dc, nc * 4) == cudaSuccess) {
        cudaMemcpy(da, ha, na * 2, cudaMemcpyHostToDevice);
        cudaMemcpy(db, hb, nb * 2, cudaMemcpyHostToDevice);
        cudaMemset(dc, 0xFF, nc * 4);  // NaN poison
        switch (mode & 7) {
        case 0: probe_kernel<0><<<1, 128>>>(da, db, dc); break;
        case 1: probe_kernel<1><<<1, 128>>>(da, db, dc); break;
        case 2: probe_kernel<2><<<1, 128>>>(da, db, dc); break;
        case 3: probe_kernel<3><<<1, 128>>>(da, db, dc); break;
        case 4: probe_kernel<4><<<1, 128>>>(da, db, dc); break;
        case 5: probe_kernel<5><<<1, 128>>>(da, db, dc); break;
        case 6: probe_kernel<6><<<1, 128>>>(da, db, dc); break;
        default: probe_kernel<7><<<1, 128>>>(da, db, dc); break;
        }
        if (cudaDeviceSynchronize() == cudaSuccess &&
            cudaMemcpy(hc, dc, nc * 4, cudaMemcpyDeviceToHost) == cudaSuccess) {
            double num = 0, den = 0;
            for (size_t i = 0; i < nc; ++i) {
                num += (hc[i] - ref[i]) * (hc[i] - ref[i]);
                den += ref[i] * ref[i];
            }
            *max_rel_err = isfinite(num) ? sqrt(num / den) : INFINITY;
            rc = 0;
        }
        cudaFree(da);
        cudaFree(db);
        cudaFree(dc);
    }
    free(ha);
    free(hb);
    free(hc);
    free(ref);
    return rc;
}
