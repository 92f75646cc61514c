// The backward's row kernels, shared by both kernel families: D = rowsum(dO * O) (and
// zeroing the dQ accumulator in atomic mode) before the dK/dV kernel, and the dQ
// conversion after it.
#pragma once

#include <stdint.h>

#include "common/params.h"
#include "common/bwd_rows.h"
#include "common/ptx.cuh"
#include "common/seqinfo.cuh"

namespace fa2 {

// Dot product of two vectors of 8 packed 16-bit values, in fp32.
template <typename Elem>
__device__ __forceinline__ float dot8(uint4 a, uint4 b)
{
    const uint32_t *x = reinterpret_cast<const uint32_t *>(&a);
    const uint32_t *y = reinterpret_cast<const uint32_t *>(&b);
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const float2 fx = unpack2<Elem>(x[i]), fy = unpack2<Elem>(y[i]);
        s = fmaf(fx.x, fy.x, fmaf(fx.y, fy.y, s));
    }
    return s;
}

constexpr int kDotWarps = FA2_BWD_ROW_WARPS;

// The row kernels (dot_do_o, dq_convert): lanes per query row (bwd_tiles.h), so every
// lane moves 16 bytes of each 16-bit tensor.
__host__ __device__ constexpr int row_lanes(int head_dim)
{
    return FA2_BWD_ROW_LANES(head_dim);
}

// Thread blocks (of 32 * kDotWarps threads) of a row kernel over `rows` rows.
inline int64_t row_kernel_blocks(int64_t rows, int head_dim)
{
    return fa2_bwd_row_kernel_blocks(rows, head_dim);
}

// This thread's row of a row kernel (possibly past the last) and its first column.
struct RowLane {
    int64_t row;
    int col;
};

__device__ __forceinline__ RowLane row_lane(int head_dim)
{
    const int lanes = row_lanes(head_dim);
    const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    return RowLane{t / lanes, static_cast<int>(t % lanes) * 8};
}

// D[b, h, i] = sum_c dO[b, i, h, c] * O[b, i, h, c] in fp32, row_lanes(d) lanes per
// row. In atomic mode also zeroes the row's dQ accumulator.
template <typename Elem>
__global__ void __launch_bounds__(32 * kDotWarps) dot_do_o_kernel(const fa2_params_t p)
{
    const int lanes = row_lanes(p.head_dim);
    const RowLane rl = row_lane(p.head_dim);
    const int64_t rows = stats_rows(p);
    const int64_t warp_row0 = rl.row - (threadIdx.x % 32) / lanes;
    if (warp_row0 >= rows) return;  // whole warps only: the sum below shuffles
    const bool live = rl.row < rows && rl.col < p.head_dim;
    float s = 0.f;
    if (live) {
        const FlatRow r = flat_row(p, rl.row);
        const Sequence seq = sequence<kDenseSeq>(p, r.batch);
        const uint4 o =
            *reinterpret_cast<const uint4 *>(o_row<Elem>(p, seq, r.head, r.row) + rl.col);
        const uint4 d_o =
            *reinterpret_cast<const uint4 *>(do_row<Elem>(p, seq, r.head, r.row) + rl.col);
        if (p.dq_accum) {
            float4 *acc = reinterpret_cast<float4 *>(p.dq_accum + rl.row * p.head_dim + rl.col);
            acc[0] = make_float4(0.f, 0.f, 0.f, 0.f);
            acc[1] = make_float4(0.f, 0.f, 0.f, 0.f);
        }
        s = dot8<Elem>(o, d_o);
    }
    for (int m = lanes / 2; m >= 1; m /= 2) s += __shfl_xor_sync(0xffffffffu, s, m);
    if (live && rl.col == 0) p.d_sum[rl.row] = s;
}

// dQ = scale · dq_accum, to the element type and Q's strides; row_lanes(d) lanes per
// row.
template <typename Elem>
__global__ void __launch_bounds__(32 * kDotWarps) dq_convert_kernel(const fa2_params_t p)
{
    const RowLane rl = row_lane(p.head_dim);
    if (rl.row >= stats_rows(p) || rl.col >= p.head_dim)
        return;
    const FlatRow r = flat_row(p, rl.row);
    const float4 *acc = reinterpret_cast<const float4 *>(p.dq_accum + rl.row * p.head_dim + rl.col);
    const float4 a = acc[0], b = acc[1];
    const float s = p.softmax_scale;
    uint4 out;
    out.x = pack2<Elem>(a.x * s, a.y * s);
    out.y = pack2<Elem>(a.z * s, a.w * s);
    out.z = pack2<Elem>(b.x * s, b.y * s);
    out.w = pack2<Elem>(b.z * s, b.w * s);
    const Sequence seq = sequence<kDenseSeq>(p, r.batch);
    *reinterpret_cast<uint4 *>(dq_row<Elem>(p, seq, r.head, r.row) + rl.col) = out;
}

}  // namespace fa2
