// The TMA's pieces (sm_90): an mbarrier phase that also counts the bytes a bulk
// tensor copy delivers (the mbarrier itself: wgmma.cuh), and the 4-D tiled copy. A
// tensor map lives in a __grid_constant__ kernel parameter (sm90/tensor_map.h builds it
// on the host).
#pragma once

#include <cuda.h>
#include <stdint.h>

#include "sm90/wgmma.cuh"

namespace fa2 {

// After mbarrier_init, before the barrier that publishes the mbarriers: the copy
// engine (async proxy) must see them initialized.
__device__ __forceinline__ void fence_mbarrier_init()
{
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// One arrival that also expects `bytes` more bytes of copies before the phase ends.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint32_t bar, uint32_t bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar),
                 "r"(bytes)
                 : "memory");
}

// Box (c0, c1, c2, c3) of the tensor map into shared memory at dst, completing on bar.
// Elements outside the tensor arrive as zeros (and count as delivered bytes).
__device__ __forceinline__ void tma_load_4d(uint32_t dst, const CUtensorMap *map, uint32_t bar,
                                            int c0, int c1, int c2, int c3)
{
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%3, %4, %5, %6}], [%2];\n" ::"r"(dst),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
        : "memory");
}

}  // namespace fa2
