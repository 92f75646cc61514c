// The Hopper forward's two products on wgmma, for one warpgroup's 64 query rows: S = Q Kᵀ
// with both operands in shared memory (K-major), and O += P V with P in registers (the
// A operand) and V read MN-major.
#pragma once

#include <stdint.h>

#include "common/warp_gemm.cuh"
#include "sm90/wgmma.cuh"

namespace fa2 {

#if defined(FA2_SM90A)
// S = Q Kᵀ from the step-0 descriptors, issued as one commit group.
template <typename Tr>
__device__ __forceinline__ void issue_qk(float (&s)[1][Tr::kNTiles][4], uint64_t q_desc,
                                         uint64_t k_desc)
{
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < Tr::kHeadDim / 16; ++kk)
        wgmma_ss<typename Tr::Elem, 0, 0>(s[0], q_desc + k_major_step<Tr::kBlockM>(kk),
                                          k_desc + k_major_step<Tr::kBlockN>(kk), kk > 0);
    wgmma_commit();
}

// O += P V's wgmmas (the caller fences and commits).
template <typename Tr>
__device__ __forceinline__ void issue_pv_products(float (&o)[1][Tr::kDTiles][4],
                                                  uint32_t (&pa)[Tr::kBlockN / 16][4],
                                                  uint64_t v_desc)
{
#pragma unroll
    for (int kk = 0; kk < Tr::kBlockN / 16; ++kk)
        wgmma_rs<typename Tr::Elem, 1>(o[0], pa[kk], v_desc + mn_major_step(kk), 1);
}

// P (fp32 in s) as P V's A operand.
template <typename Tr>
__device__ __forceinline__ void p_fragments(uint32_t (&pa)[Tr::kBlockN / 16][4],
                                            float (&s)[1][Tr::kNTiles][4])
{
#pragma unroll
    for (int kk = 0; kk < Tr::kBlockN / 16; ++kk)
        a_fragment<typename Tr::Elem>(pa[kk], s[0], kk);
}
#endif

}  // namespace fa2
