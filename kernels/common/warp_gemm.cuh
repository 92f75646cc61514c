// The two warp-level GEMM shapes every attention kernel here is made of, on
// mma.sync m16n8k16 with fp32 accumulators and swizzled shared-memory tiles
// (rows of kRowBytes, 16-byte chunks at chunk ^ (row % 8), 128-byte-aligned rows).
//
//   gemm_abt:  acc += A · Bᵀ, A and B both in shared memory, rows contiguous in k
//              (S = Q Kᵀ, dP = dO Vᵀ, Sᵀ = K Qᵀ, ...).
//   gemm_pb:   acc += P · B, P in registers in the accumulator layout of an earlier
//              gemm_abt, B in shared memory with rows contiguous in n, read
//              transposed (O += P V, dV += Pᵀ dO, dQ += dS K, ...).
#pragma once

#include <stdint.h>

#include "common/ptx.cuh"

namespace fa2 {

// Byte offset of 16-byte chunk `chunk` of row `row` in a swizzled tile.
template <int kRowBytes>
__device__ __forceinline__ uint32_t swizzled(int row, int chunk)
{
    return static_cast<uint32_t>(row * kRowBytes + ((chunk ^ (row & 7)) * 16));
}

// ldmatrix addressing for one operand. Every row this lane addresses has
// row % 8 == lane % 8, and at k-step `step` it reads chunk 2*step + hi (hi = 0 or 1
// by lane). Chunk c of such a row sits at (c / 8) * 128 + ((c % 8) ^ (lane % 8)) * 16,
// so four per-lane offsets plus compile-time immediates address every step.
struct LaneChunks {
    uint32_t offset[4];  // byte offset within a 128-byte group, for step % 4

    __device__ __forceinline__ LaneChunks(int lane, int hi)
    {
#pragma unroll
        for (int i = 0; i < 4; ++i)
            offset[i] = static_cast<uint32_t>(((2 * i + hi) ^ (lane & 7)) * 16);
    }

    // Address of chunk 2*step + hi in the row starting at `row_addr`.
    __device__ __forceinline__ uint32_t at(uint32_t row_addr, int step) const
    {
        return row_addr + (step / 4) * 128 + offset[step % 4];
    }
};

template <int kM, int kN>
__device__ __forceinline__ void zero(float (&acc)[kM][kN][4])
{
#pragma unroll
    for (int m = 0; m < kM; ++m)
#pragma unroll
        for (int n = 0; n < kN; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[m][n][e] = 0.f;
}

// acc[kM][kN] += A · Bᵀ over kK k16 steps. a_rows: address of this warp's first A
// row (kM*16 rows); b_rows: address of the first B row (kN*8 rows).
template <typename Elem, int kRowBytes, int kM, int kN, int kK>
__device__ __forceinline__ void gemm_abt(float (&acc)[kM][kN][4], uint32_t a_rows,
                                         uint32_t b_rows, int lane)
{
    static_assert(kN % 2 == 0, "B is read 16 rows at a time");
    // A: lanes 0-15 address rows 0-15 at k 0-7, lanes 16-31 the same rows at k 8-15.
    const uint32_t a_row = a_rows + (lane & 15) * kRowBytes;
    const LaneChunks a_chunks(lane, lane >> 4);
    // B: lanes address n 0-7 / 8-15 (lane bit 4) at k 0-7 / 8-15 (lane bit 3).
    const uint32_t b_row = b_rows + ((lane & 7) + ((lane >> 4) << 3)) * kRowBytes;
    const LaneChunks b_chunks(lane, (lane >> 3) & 1);
#pragma unroll
    for (int kk = 0; kk < kK; ++kk) {
        uint32_t a[kM][4];
#pragma unroll
        for (int m = 0; m < kM; ++m)
            ldmatrix_x4(a[m], a_chunks.at(a_row + m * 16 * kRowBytes, kk));
#pragma unroll
        for (int np = 0; np < kN / 2; ++np) {
            uint32_t b[4];
            ldmatrix_x4(b, b_chunks.at(b_row + np * 16 * kRowBytes, kk));
#pragma unroll
            for (int m = 0; m < kM; ++m) {
                mma_16816<Elem>(acc[m][2 * np], a[m], b[0], b[1]);
                mma_16816<Elem>(acc[m][2 * np + 1], a[m], b[2], b[3]);
            }
        }
    }
}

// acc[kM][kN] += P · B, where P[kM][2*kK] holds fp32 values in the m16n8 accumulator
// layout (rounded to Elem here: two adjacent n8 tiles are one m16k16 A tile) and B
// is kK*16 rows (k) of a tile whose rows are contiguous in n, starting at b_rows,
// read from column chunk 0 (add a multiple of 128 bytes to b_rows for later columns).
template <typename Elem, int kRowBytes, int kM, int kN, int kK>
__device__ __forceinline__ void gemm_pb(float (&acc)[kM][kN][4], const float (&p)[kM][2 * kK][4],
                                        uint32_t b_rows, int lane)
{
    static_assert(kN % 2 == 0, "B is read 16 columns at a time");
    // B (transposed load): lanes address k 0-15 at n 0-7 / 8-15 (lane bit 4).
    const uint32_t b_row = b_rows + (lane & 15) * kRowBytes;
    const LaneChunks b_chunks(lane, lane >> 4);
#pragma unroll
    for (int kk = 0; kk < kK; ++kk) {
        uint32_t a[kM][4];
#pragma unroll
        for (int m = 0; m < kM; ++m) {
            a[m][0] = pack2<Elem>(p[m][2 * kk][0], p[m][2 * kk][1]);
            a[m][1] = pack2<Elem>(p[m][2 * kk][2], p[m][2 * kk][3]);
            a[m][2] = pack2<Elem>(p[m][2 * kk + 1][0], p[m][2 * kk + 1][1]);
            a[m][3] = pack2<Elem>(p[m][2 * kk + 1][2], p[m][2 * kk + 1][3]);
        }
#pragma unroll
        for (int np = 0; np < kN / 2; ++np) {
            uint32_t b[4];
            ldmatrix_x4_trans(b, b_chunks.at(b_row + kk * 16 * kRowBytes, np));
#pragma unroll
            for (int m = 0; m < kM; ++m) {
                mma_16816<Elem>(acc[m][2 * np], a[m], b[0], b[1]);
                mma_16816<Elem>(acc[m][2 * np + 1], a[m], b[2], b[3]);
            }
        }
    }
}

// acc[kM][kN] += A · B, A in shared memory with rows contiguous in k (this warp's
// first row at a_rows), B in shared memory with rows contiguous in n, read
// transposed from column chunk b_chunk0 (any multiple of 2 chunks: a run-time value).
template <typename Elem, int kARowBytes, int kBRowBytes, int kM, int kN, int kK>
__device__ __forceinline__ void gemm_ab(float (&acc)[kM][kN][4], uint32_t a_rows, uint32_t b_rows,
                                        int b_chunk0, int lane)
{
    static_assert(kN % 2 == 0, "B is read 16 columns at a time");
    const uint32_t a_row = a_rows + (lane & 15) * kARowBytes;
    const LaneChunks a_chunks(lane, lane >> 4);
    const uint32_t b_row = b_rows + (lane & 15) * kBRowBytes;
    const int b_chunk = b_chunk0 + (lane >> 4);
#pragma unroll
    for (int kk = 0; kk < kK; ++kk) {
        uint32_t a[kM][4];
#pragma unroll
        for (int m = 0; m < kM; ++m)
            ldmatrix_x4(a[m], a_chunks.at(a_row + m * 16 * kARowBytes, kk));
#pragma unroll
        for (int np = 0; np < kN / 2; ++np) {
            uint32_t b[4];
            ldmatrix_x4_trans(b, b_row + kk * 16 * kBRowBytes +
                                     (((b_chunk + 2 * np) ^ (lane & 7)) << 4));
#pragma unroll
            for (int m = 0; m < kM; ++m) {
                mma_16816<Elem>(acc[m][2 * np], a[m], b[0], b[1]);
                mma_16816<Elem>(acc[m][2 * np + 1], a[m], b[2], b[3]);
            }
        }
    }
}

// Writes an accumulator (m16n8 layout) as Elem: row r of the warp's fragment goes to
// base + (row0 + r) * row_stride when row0 + r < rows_end, columns col0 + c when
// col0 + c < cols_end (a multiple of 2), each row multiplied by scale[m][half].
template <typename Elem, int kM, int kN>
__device__ __forceinline__ void store_acc(const float (&acc)[kM][kN][4],
                                          const float (&scale)[kM][2], Elem *base,
                                          int64_t row_stride, int row0, int rows_end, int col0,
                                          int cols_end, int lane)
{
#pragma unroll
    for (int m = 0; m < kM; ++m)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = row0 + m * 16 + (lane >> 2) + 8 * h;
            if (row >= rows_end) continue;
            Elem *out = base + row * row_stride;
#pragma unroll
            for (int n = 0; n < kN; ++n) {
                const int col = col0 + n * 8 + 2 * (lane & 3);
                if (col < cols_end)
                    *reinterpret_cast<uint32_t *>(out + col) =
                        pack2<Elem>(acc[m][n][2 * h] * scale[m][h], acc[m][n][2 * h + 1] * scale[m][h]);
            }
        }
}

// The same factor for every row.
template <int kM>
__device__ __forceinline__ void fill_scale(float (&scale)[kM][2], float value)
{
#pragma unroll
    for (int m = 0; m < kM; ++m) scale[m][0] = scale[m][1] = value;
}

// Copies rows [0, kRows) of a tile starting at `gmem` (row stride `row_stride`
// elements) into swizzled shared memory with kThreads threads, zero-filling rows
// >= rows_valid and columns >= cols_valid. kChunks: 16-byte chunks per row copied.
template <typename Elem, int kRows, int kChunks, int kRowBytes, int kThreads>
__device__ __forceinline__ void load_tile(uint32_t smem, const Elem *gmem, int64_t row_stride,
                                          int rows_valid, int cols_valid, int tid)
{
    static_assert(kRows * kChunks % kThreads == 0, "tile splits evenly over threads");
    constexpr int kPerThread = kRows * kChunks / kThreads;
    if constexpr (kThreads % kChunks == 0 && (kThreads / kChunks) % 8 == 0) {
        // Each thread keeps one chunk column and steps down a multiple of 8 rows:
        // the swizzle repeats, so the shared address advances by a constant.
        constexpr int kRowStep = kThreads / kChunks;
        const int row0 = tid / kChunks;
        const int chunk = tid % kChunks;
        const bool col_valid = chunk * 8 < cols_valid;
        const Elem *src = gmem + row0 * row_stride + chunk * 8;
        const uint32_t dst = smem + swizzled<kRowBytes>(row0, chunk);
#pragma unroll
        for (int i = 0; i < kPerThread; ++i) {
            const bool valid = col_valid && row0 + i * kRowStep < rows_valid;
            cp_async_16(dst + i * kRowStep * kRowBytes, valid ? src : gmem, valid);
            src += kRowStep * row_stride;
        }
    } else {
#pragma unroll
        for (int i = 0; i < kPerThread; ++i) {
            const int idx = tid + i * kThreads;
            const int row = idx / kChunks;
            const int chunk = idx % kChunks;
            const bool valid = row < rows_valid && chunk * 8 < cols_valid;
            const Elem *src = valid ? gmem + row * row_stride + chunk * 8 : gmem;
            cp_async_16(smem + swizzled<kRowBytes>(row, chunk), src, valid);
        }
    }
}

}  // namespace fa2
