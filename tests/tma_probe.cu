// The TMA's tiles (kernels/sm90/tma.cuh, tensor_map.h) against cp.async's
// (load_panels) in isolation: one block loads the same 128-row x 128-column bf16 tile
// both ways and writes both shared-memory images out, byte for byte. Two cases: a
// dense-like tile whose last rows lie past the tensor (zeros either way), and a
// paged-like tile of eight 16-row boxes, each from another page of a 4-D cache.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdlib.h>

#include "sm90/tensor_map.h"
#include "sm90/tma.cuh"
#include "sm90/wgmma.cuh"
#include "tma_probe.h"

namespace {

constexpr int kRows = 128, kCols = 128, kTileBytes = kRows * kCols * 2;
constexpr int kHeads = 2, kHead = 1;        // the tile's head of kHeads
constexpr int kDenseRows = 200, kFirst = 100;  // dense-like: rows 100..227 of 200
constexpr int kPageRows = 16, kPages = 10;  // paged-like: 8 boxes of 16 rows
__constant__ int kPageOf[kRows / kPageRows] = {7, 2, 9, 0, 4, 4, 1, 8};

// Element (col, head, row, outer) of the probe's tensor at `base` with these strides.
struct Layout {
    int64_t head_stride, row_stride, outer_stride;
};

__global__ void __launch_bounds__(128, 1)
tma_probe_kernel(const __grid_constant__ CUtensorMap map, const __nv_bfloat16 *base,
                 Layout layout, int paged, uint8_t *out)
{
#if defined(FA2_SM90A)
    using namespace fa2;
    extern __shared__ __align__(1024) uint8_t smem[];
    const int tid = threadIdx.x, lane = tid % 32;
    const uint32_t by_tma = (smem_addr(smem) + 1023u) & ~1023u;
    const uint32_t by_cp_async = by_tma + kTileBytes;
    const uint32_t bar = by_cp_async + kTileBytes;
    if (tid == 0) {
        mbarrier_init(bar, 1);
        fence_mbarrier_init();
    }
    __syncthreads();
    if (tid < 32) {
        if (lane == 0) mbarrier_arrive_expect_tx(bar, kTileBytes);
        __syncwarp();
        const int boxes = paged ? kRows / kPageRows : 1, box_rows = kRows / boxes;
        if (lane < boxes)
            for (int panel = 0; panel < kCols / 64; ++panel)
                tma_load_4d(by_tma + panel * kRows * 128 + lane * box_rows * 128, &map, bar,
                            panel * 64, kHead, paged ? 0 : kFirst, paged ? kPageOf[lane] : 1);
    }
    // cp.async, row by row (a paged tile's rows come from their pages)
    for (int r = 0; r < kRows; r += 8) {
        const int row = r + tid / 16;
        const int chunk = tid % 16;
        const __nv_bfloat16 *src =
            paged ? base + kHead * layout.head_stride + (row % kPageRows) * layout.row_stride +
                        kPageOf[row / kPageRows] * layout.outer_stride
                  : base + kHead * layout.head_stride + (kFirst + row) * layout.row_stride +
                        1 * layout.outer_stride;
        const bool valid = paged || kFirst + row < kDenseRows;
        cp_async_16(by_cp_async + panel_offset<kRows>(row, chunk), valid ? src + chunk * 8 : base,
                    valid);
    }
    cp_async_commit();
    cp_async_wait<0>();
    mbarrier_wait(bar, 0);
    __syncthreads();
    for (int i = tid; i < 2 * kTileBytes / 16; i += 128) {
        uint4 x;
        asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(x.x), "=r"(x.y), "=r"(x.z), "=r"(x.w)
                     : "r"(by_tma + i * 16));
        reinterpret_cast<uint4 *>(out)[i] = x;
    }
#endif
}

}  // namespace

extern "C" int fa2_tma_probe(int paged, long *mismatched_bytes)
{
    // A 4-D tensor with padded, non-monotonic strides: (col, head, row, outer).
    const int64_t outer_n = paged ? kPages : 2, rows_n = paged ? kPageRows : kDenseRows;
    const Layout layout = {136, 136 * kHeads + 8, (136 * kHeads + 8) * rows_n + 24};
    const int64_t elems = layout.outer_stride * outer_n;
    __nv_bfloat16 *host = static_cast<__nv_bfloat16 *>(malloc(2 * elems));
    uint8_t *got = static_cast<uint8_t *>(malloc(2 * kTileBytes));
    __nv_bfloat16 *dev = nullptr;
    uint8_t *dout = nullptr;
    int rc = 1;
    if (!host || !got) goto done;
    for (int64_t i = 0; i < elems; ++i)
        host[i] = __float2bfloat16(static_cast<float>((i * 2654435761u) % 2001) / 1000.f - 1.f);
    if (cudaMalloc(&dev, 2 * elems) != cudaSuccess || cudaMalloc(&dout, 2 * kTileBytes) != cudaSuccess ||
        cudaMemcpy(dev, host, 2 * elems, cudaMemcpyHostToDevice) != cudaSuccess)
        goto done;
    {
        CUtensorMap map;
        const fa2::KvLayout kv = {{kCols, kHeads, rows_n, outer_n},
                                  {1, layout.head_stride, layout.row_stride, layout.outer_stride}};
        if (fa2::encode_kv_map(&map, dev, true, kv, paged ? kPageRows : kRows) != cudaSuccess)
            goto done;
        const int smem = 2 * kTileBytes + 1024 + 16;
        if (cudaFuncSetAttribute(tma_probe_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 smem) != cudaSuccess)
            goto done;
        tma_probe_kernel<<<1, 128, smem>>>(map, dev, layout, paged, dout);
        if (cudaDeviceSynchronize() != cudaSuccess ||
            cudaMemcpy(got, dout, 2 * kTileBytes, cudaMemcpyDeviceToHost) != cudaSuccess)
            goto done;
        long diff = 0;
        for (int i = 0; i < kTileBytes; ++i) diff += got[i] != got[kTileBytes + i];
        *mismatched_bytes = diff;
        rc = 0;
    }
done:
    cudaFree(dev);
    cudaFree(dout);
    free(host);
    free(got);
    return rc;
}
