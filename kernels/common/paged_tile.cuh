// K/V tiles from a paged cache (kPagedSeq). Page lookups are the cost that contiguous
// K/V do not have, so they are kept off the copies:
//   - the 16 or so threads that copy one row's 16-byte chunks share one lookup: lane L
//     of a warp looks up the warp's L-th row and the others take its address with a
//     shuffle (a warp copies at most 32 distinct rows of a tile);
//   - the page id is read from the page table one tile ahead (fetch_tile_page), so no
//     copy waits for it;
//   - key / page_size is a multiply and a shift (common/fast_div.h);
//   - where the cache is one row space (common/paged_row_space.h, the usual layouts), the
//     lookup is a 32-bit row index, one shuffle and one wide multiply-add per copy.
// Rows past the sequence's keys and rows whose page id is out of [0, num_pages) are
// zero-filled. Used by both kernel families, which differ only in the shared-memory
// layout (a DstOffset functor: (row, chunk) -> byte offset).
#pragma once

#include <stdint.h>

#include "common/fast_div.h"
#include "common/params.h"
#include "common/ptx.cuh"
#include "common/seqinfo.cuh"

namespace fa2 {

// The key rows of one (sequence, kv head) in a paged K or V.
template <typename Elem>
struct PagedRows {
    const Elem *head;       // page 0, row 0 of this kv head
    const int32_t *pages;   // the sequence's page-table row
    int64_t page_stride, row_stride;
    int page_size, num_pages;
    uint32_t div_magic;     // key / page_size as a multiply (common/fast_div.h)
    int div_shift;
    int page_rows;          // > 0: one row space of page_rows rows per page
    uint32_t row_bytes;     // the row stride in bytes (with page_rows)

    __device__ __forceinline__ int page_index(int key) const
    {
        return static_cast<int>(fa2_fast_div(static_cast<uint32_t>(key), div_magic, div_shift));
    }

    // The page id of key `key`, or -1 when it is out of [0, num_pages).
    __device__ __forceinline__ int page_of(int key) const
    {
        const int page = __ldg(pages + page_index(key));
        return static_cast<unsigned>(page) < static_cast<unsigned>(num_pages) ? page : -1;
    }

    // Element offset from `head` of key `key`'s row, given its page id; -1 for page -1.
    __device__ __forceinline__ int64_t offset(int page, int key) const
    {
        const int in_page = key - page_index(key) * page_size;
        return page >= 0 ? page * page_stride + in_page * row_stride : int64_t{-1};
    }

    // With page_rows: key `key`'s row index in the row space, given its page id; -1 for
    // page -1.
    __device__ __forceinline__ int row_index(int page, int key) const
    {
        const int in_page = key - page_index(key) * page_size;
        return page >= 0 ? page * page_rows + in_page : -1;
    }
};

// The rows of K (kV = false) or V for one (sequence, kv head) of a paged cache.
template <typename Elem, bool kV>
__device__ __forceinline__ PagedRows<Elem> paged_rows(const fa2_params_t &p, const Sequence &s,
                                                      int kv_head)
{
    return {static_cast<const Elem *>(kV ? p.v : p.k) +
                kv_head * (kV ? p.v_head_stride : p.k_head_stride),
            p.page_table + static_cast<int64_t>(s.batch) * p.pages_per_seq,
            kV ? p.v_batch_stride : p.k_batch_stride, kV ? p.v_seq_stride : p.k_seq_stride,
            p.page_size, p.num_pages, p.page_div_magic,
            fa2_fast_div_shift(static_cast<uint32_t>(p.page_size)), p.page_rows,
            static_cast<uint32_t>((kV ? p.v_seq_stride : p.k_seq_stride) * sizeof(Elem))};
}

// Who copies what in a kRows x kChunks tile (16-byte chunks) with kThreads threads:
// kLaneChunks (kChunks rounded up to a power of two) consecutive threads copy one row,
// the block steps down kRowStep rows per pass.
template <int kRows, int kChunks, int kThreads>
struct PagedTileShape {
    static constexpr int kTileChunks = kChunks;
    static constexpr int kLaneChunks =
        kChunks <= 4 ? 4 : kChunks <= 8 ? 8 : kChunks <= 16 ? 16 : 32;
    static constexpr int kRowStep = kThreads / kLaneChunks;
    static constexpr int kPasses = kRows / kRowStep;
    static constexpr int kWarpRowsPerPass = 32 / kLaneChunks;
    static constexpr int kWarpRows = kWarpRowsPerPass * kPasses;  // distinct rows per warp
    static_assert(kChunks <= 32 && kThreads % 32 == 0, "a row within a warp");
    static_assert(kRows % kRowStep == 0, "whole passes");
    static_assert(kWarpRows <= 32, "one lane per row of a warp");

    // The tile row whose lookup lane `lane` of warp `warp` does (>= kRows: none).
    __device__ __forceinline__ static int lane_row(int warp, int lane)
    {
        return lane < kWarpRows ? warp * kWarpRowsPerPass + lane % kWarpRowsPerPass +
                                      lane / kWarpRowsPerPass * kRowStep
                                : kRows;
    }
};

// This lane's page id for the tile at key_first (its lane_row), or -1: no row, a row
// >= rows_valid, or a page id out of range. Read a tile before load_paged_tile needs it.
template <typename Shape, typename Elem>
__device__ __forceinline__ int fetch_tile_page(const PagedRows<Elem> &rows, int key_first,
                                               int rows_valid, int tid)
{
    const int row = Shape::lane_row(tid / 32, tid % 32);
    return row < rows_valid ? rows.page_of(key_first + row) : -1;
}

// Copies the tile at key_first (cp.async) into shared memory at smem + dst_offset(row,
// chunk), given this lane's fetched page id; columns >= cols_valid zero-filled.
template <typename Shape, typename Elem, typename DstOffset>
__device__ __forceinline__ void load_paged_tile(uint32_t smem, const PagedRows<Elem> &rows,
                                                int lane_page, int key_first, int cols_valid,
                                                int tid, DstOffset dst_offset)
{
    constexpr int kChunksPerRow = Shape::kLaneChunks;  // threads per row
    const int lane = tid % 32;
    const int lane_key = key_first + Shape::lane_row(tid / 32, lane);
    const int row0 = tid / kChunksPerRow;
    const int chunk = tid % kChunksPerRow;
    const bool col_valid = chunk * 8 < cols_valid;
    if (rows.page_rows > 0) {
        const int lane_index = rows.row_index(lane_page, lane_key);
        // Rows that are not copied read row 0 of page 0 (in range; nothing is read).
        const char *base = reinterpret_cast<const char *>(rows.head + (col_valid ? chunk * 8 : 0));
#pragma unroll
        for (int pass = 0; pass < Shape::kPasses; ++pass) {
            const int index = __shfl_sync(0xffffffffu, lane_index,
                                          pass * Shape::kWarpRowsPerPass + lane / kChunksPerRow);
            const bool valid = col_valid && index >= 0;
            const uint32_t row = valid ? static_cast<uint32_t>(index) : 0u;
            if (kChunksPerRow == Shape::kTileChunks || chunk < Shape::kTileChunks)
                cp_async_16(smem + dst_offset(row0 + pass * Shape::kRowStep, chunk),
                            base + static_cast<uint64_t>(row) * rows.row_bytes, valid);
        }
        return;
    }
    const int64_t lane_offset = rows.offset(lane_page, lane_key);
#pragma unroll
    for (int pass = 0; pass < Shape::kPasses; ++pass) {
        const int64_t offset = __shfl_sync(
            0xffffffffu, lane_offset, pass * Shape::kWarpRowsPerPass + lane / kChunksPerRow);
        const bool valid = col_valid && offset >= 0;
        if (kChunksPerRow == Shape::kTileChunks || chunk < Shape::kTileChunks)  // padding lanes
            cp_async_16(smem + dst_offset(row0 + pass * Shape::kRowStep, chunk),
                        valid ? rows.head + offset + chunk * 8 : rows.head, valid);
    }
}

}  // namespace fa2
