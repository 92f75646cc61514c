// Host side of TMA: a K or V tensor as a 4-D tensor map for the Hopper
// forward's tiles, (head_dim, heads, rows, outer) innermost first, box (64 columns,
// 1 head, box_rows rows, 1) in wgmma's 128-byte swizzled panels, zeros outside the
// tensor. cuTensorMapEncodeTiled comes through the runtime's driver entry point
// (common/launch.cuh). The planner sends a layout here only when the copy
// engine can read it (fa2_kv_tma_ready in src/).
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "common/fault_hook.h"
#include "common/launch.cuh"

namespace fa2 {

using DriverEncodeTiled = CUresult (*)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *,
                                       const cuuint64_t *, const cuuint64_t *,
                                       const cuuint32_t *, const cuuint32_t *,
                                       CUtensorMapInterleave, CUtensorMapSwizzle,
                                       CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

// cuTensorMapEncodeTiled, looked up once per translation unit; NULL if missing.
static inline DriverEncodeTiled driver_encode_tiled()
{
    static const DriverEncodeTiled fn =
        driver_entry_point<DriverEncodeTiled>("cuTensorMapEncodeTiled");
    return fn;
}

// The extents and element strides of a K or V tensor, innermost first: (head_dim,
// heads, rows, outer); stride[0] (the columns') is 1.
struct KvLayout {
    int64_t extent[4];
    int64_t stride[4];
};

// Encodes `layout` of 2-byte elements at `base` into *map with box (64, 1, box_rows, 1).
// A dimension of extent 1 takes a stride TMA accepts (it is never
// stepped). Returns a cudaError_t value.
static inline cudaError_t encode_kv_map(CUtensorMap *map, const void *base, bool bf16,
                                        const KvLayout &layout, int box_rows)
{
    if (const int e = fa2_fault("cuTensorMapEncodeTiled")) return static_cast<cudaError_t>(e);
    const DriverEncodeTiled encode = driver_encode_tiled();
    if (!encode) return cudaErrorSymbolNotFound;
    cuuint64_t dims[4], strides[3];
    for (int i = 0; i < 4; ++i) dims[i] = static_cast<cuuint64_t>(layout.extent[i]);
    for (int i = 1; i < 4; ++i)
        strides[i - 1] = layout.extent[i] > 1 ? static_cast<cuuint64_t>(layout.stride[i]) * 2 : 16;
    const cuuint32_t box[4] = {64, 1, static_cast<cuuint32_t>(box_rows), 1};
    const cuuint32_t unit[4] = {1, 1, 1, 1};
    const CUresult r = encode(map, bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                        : CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
                              4, const_cast<void *>(base), dims, strides, box, unit,
                              CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                              CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                              CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    // The driver numbers its codes as the runtime does for what can fail here.
    return static_cast<cudaError_t>(r);
}

}  // namespace fa2
