// Hopper (sm_90a) building blocks: the wgmma shared-memory descriptor, the fences
// and waits around wgmma, and the 128-byte-swizzled tile layout wgmma reads.
//
// Tile layout ("panels"): a tile of R rows × C columns (C a multiple of 64 16-bit
// elements) is stored as C/64 panels of R rows × 128 bytes; panel p starts at
// p * R * 128, row r of a panel at r * 128, and 16-byte chunk j of that row at
// (j ^ (r % 8)) * 16. Eight rows make one 1024-byte swizzle atom, so panels (and the
// tile) start on 1024-byte boundaries. This is wgmma's 128B-swizzle canonical layout
// both for K-major operands (rows = M or N, columns = K) and MN-major ones (rows = K,
// columns = M or N).
#pragma once

#include <stdint.h>

#include "common/ptx.cuh"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FA2_SM90A 1
#endif

#include "sm90/wgmma_ops.cuh"

namespace fa2 {

// Descriptor of a 128B-swizzled operand starting at shared address `addr`:
// lbo / sbo in bytes (leading / stride byte offsets).
__device__ __forceinline__ uint64_t wgmma_desc(uint32_t addr, uint32_t lbo, uint32_t sbo)
{
    return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) |
           (static_cast<uint64_t>(lbo >> 4) << 16) | (static_cast<uint64_t>(sbo >> 4) << 32) |
           (1ull << 62);
}

// K-major operand of a panel tile (rows = M or N): k16 step `kk` of the rows from
// `row0`. Consecutive 8-row atoms are 1024 bytes apart (SBO); the k offset moves the
// start address inside the 128-byte row, panel by panel.
template <int kTileRows>
__device__ __forceinline__ uint64_t desc_k_major(uint32_t tile, int row0, int kk)
{
    return wgmma_desc(tile + (kk / 4) * kTileRows * 128 + row0 * 128 + (kk % 4) * 32, 16, 1024);
}

// desc_k_major(tile, row0, kk) - desc_k_major(tile, row0, 0): the k step only moves the
// start address (14-bit field, addresses below 256 KiB: no carry), so a loop can build
// the step-0 descriptor once and add constants.
template <int kTileRows>
__device__ __forceinline__ constexpr uint64_t k_major_step(int kk)
{
    return static_cast<uint64_t>(((kk / 4) * kTileRows * 128 + (kk % 4) * 32) >> 4);
}

// MN-major operand of a panel tile (rows = K): k16 step `kk` (rows 16kk..16kk+15),
// columns from panel `panel0`. 64-column panels are kTileRows*128 bytes apart (LBO),
// 8-row atoms along K 1024 bytes (SBO).
template <int kTileRows>
__device__ __forceinline__ uint64_t desc_mn_major(uint32_t tile, int kk, int panel0 = 0)
{
    return wgmma_desc(tile + panel0 * kTileRows * 128 + kk * 16 * 128, kTileRows * 128, 1024);
}

#if defined(FA2_SM90A)
// Orders this warpgroup's earlier register accesses before the wgmma that follow.
__device__ __forceinline__ void wgmma_fence()
{
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}

__device__ __forceinline__ void wgmma_commit()
{
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

// Waits until at most kPending committed wgmma groups are in flight.
template <int kPending>
__device__ __forceinline__ void wgmma_wait()
{
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}

// Shared memory written by ordinary stores or cp.async, read next by wgmma: each
// writing thread fences before the barrier that publishes it.
__device__ __forceinline__ void fence_proxy_async()
{
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
#endif

// Keeps the compiler from moving accesses of an accumulator across a wgmma wait.
template <int kN>
__device__ __forceinline__ void reg_fence(float (&d)[kN][4])
{
#pragma unroll
    for (int i = 0; i < kN; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(d[i][e])::"memory");
}

// desc_mn_major(tile, kk, panel0) - desc_mn_major(tile, 0, panel0), the same way.
__device__ __forceinline__ constexpr uint64_t mn_major_step(int kk)
{
    return static_cast<uint64_t>((kk * 16 * 128) >> 4);
}

// Hides a value's origin from the compiler, so that what is built from it in a loop
// (e.g. shared-memory descriptors) is rebuilt there, not hoisted and kept in registers.
__device__ __forceinline__ uint32_t opaque(uint32_t x)
{
    asm volatile("" : "+r"(x));
    return x;
}

// Byte offset of 16-byte chunk `chunk` (8 elements) of row `row` in a panel tile.
template <int kTileRows>
__device__ __forceinline__ uint32_t panel_offset(int row, int chunk)
{
    return static_cast<uint32_t>((chunk / 8) * kTileRows * 128 + row * 128 +
                                 (((chunk % 8) ^ (row & 7)) << 4));
}

// Copies rows [0, kRows) of a tile at `gmem` (row stride `row_stride` elements) into
// a panel tile with kThreads threads (cp.async), zero-filling rows >= rows_valid and
// columns >= cols_valid. kChunks: 16-byte chunks per row (all panels' chunks).
template <typename Elem, int kRows, int kChunks, int kThreads>
__device__ __forceinline__ void load_panels(uint32_t smem, const Elem *gmem, int64_t row_stride,
                                            int rows_valid, int cols_valid, int tid)
{
    static_assert(kRows * kChunks % kThreads == 0, "tile splits evenly over threads");
    static_assert(kThreads % kChunks == 0 && (kThreads / kChunks) % 8 == 0,
                  "each thread keeps one chunk column, stepping whole swizzle atoms");
    constexpr int kPerThread = kRows * kChunks / kThreads;
    constexpr int kRowStep = kThreads / kChunks;
    const int row0 = tid / kChunks;
    const int chunk = tid % kChunks;
    const bool col_valid = chunk * 8 < cols_valid;
    const Elem *src = gmem + row0 * row_stride + chunk * 8;
    const uint32_t dst = smem + panel_offset<kRows>(row0, chunk);
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
        const bool valid = col_valid && row0 + i * kRowStep < rows_valid;
        cp_async_16(dst + i * kRowStep * 128, valid ? src : gmem, valid);
        src += kRowStep * row_stride;
    }
}

// Zeroes rows [first_row, kRows) of a panel tile (every panel), with `threads` threads
// from `tid`: whole 128-byte panel rows, so the swizzle does not matter.
template <int kRows, int kPanels>
__device__ __forceinline__ void zero_tile_rows(uint32_t smem, int first_row, int tid, int threads)
{
    const int chunks = (kRows - first_row) * 8;  // per panel
#pragma unroll
    for (int panel = 0; panel < kPanels; ++panel)
        for (int i = tid; i < chunks; i += threads)
            asm volatile("st.shared.v4.b32 [%0], {%1, %1, %1, %1};\n" ::"r"(
                             smem + panel * kRows * 128 + first_row * 128 + i * 16),
                         "r"(0)
                         : "memory");
}

// P (fp32, m16n8 accumulator layout, columns 16kk..16kk+15) as the m16k16 A fragment.
template <typename Elem, int kN>
__device__ __forceinline__ void a_fragment(uint32_t (&a)[4], const float (&p)[kN][4], int kk)
{
    a[0] = pack2<Elem>(p[2 * kk][0], p[2 * kk][1]);
    a[1] = pack2<Elem>(p[2 * kk][2], p[2 * kk][3]);
    a[2] = pack2<Elem>(p[2 * kk + 1][0], p[2 * kk + 1][1]);
    a[3] = pack2<Elem>(p[2 * kk + 1][2], p[2 * kk + 1][3]);
}

// Named barriers (0 is __syncthreads): `threads` threads take part, a multiple of 32.
__device__ __forceinline__ void named_barrier_arrive(int id, int threads)
{
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

__device__ __forceinline__ void named_barrier_sync(int id, int threads)
{
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// named_barrier_sync() that also returns whether `pred` holds in every taking-part thread.
__device__ __forceinline__ bool named_barrier_all(int id, int threads, bool pred)
{
    uint32_t all;
    asm volatile(
        "{\n .reg .pred p, q;\n setp.ne.u32 p, %1, 0;\n bar.red.and.pred q, %2, %3, p;\n"
        " selp.u32 %0, 1, 0, q;\n}\n"
        : "=r"(all)
        : "r"(static_cast<uint32_t>(pred)), "r"(id), "r"(threads)
        : "memory");
    return all != 0;
}

// Hands registers between the warpgroups of a block (sm_90a; every thread of the
// warpgroup executes it): kRegs per thread from now on.
template <int kRegs>
__device__ __forceinline__ void set_max_regs_dec()
{
#if defined(FA2_SM90A)
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
#endif
}

template <int kRegs>
__device__ __forceinline__ void set_max_regs_inc()
{
#if defined(FA2_SM90A)
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
#endif
}

// mbarrier (shared memory, CTA scope): init with the number of arrivals per phase;
// arrive (release); wait until the phase of the given parity has completed (acquire).
__device__ __forceinline__ void mbarrier_init(uint32_t bar, int arrivals)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(arrivals) : "memory");
}

__device__ __forceinline__ void mbarrier_arrive(uint32_t bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

__device__ __forceinline__ void mbarrier_wait(uint32_t bar, uint32_t parity)
{
    asm volatile(
        "{\n"
        ".reg .pred done;\n"
        "WAIT:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra WAIT;\n"
        "}\n" ::"r"(bar),
        "r"(parity)
        : "memory");
}

}  // namespace fa2
