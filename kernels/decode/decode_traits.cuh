// The decode kernel's compile-time shape (from decode_tiles.h, which the planner reads
// too), its block's run-time shape (row warps, key streams) and its row numbering: a
// kv head's rows are its query heads times the query tokens.
#pragma once

#include <stdint.h>

#include "common/params.h"
#include "common/seqinfo.cuh"
#include "decode/decode_tiles.h"

namespace fa2 {

template <typename Elem_, int kHeadDim_>
struct DecodeTraits {
    using Elem = Elem_;
    static constexpr int kHeadDim = kHeadDim_;
    static constexpr int kWarps = FA2_DECODE_WARPS;
    static constexpr int kThreads = 32 * kWarps;
    static constexpr int kRows = FA2_DECODE_ROWS;
    static constexpr int kKeys = FA2_DECODE_KEYS(kHeadDim);  // keys per tile
    static constexpr int kRowBytes = FA2_DECODE_ROW_BYTES(kHeadDim);
    static constexpr int kLoadChunks = kHeadDim / 8;
    static constexpr int kPagedRows = kKeys < 32 ? kKeys : 32;  // rows of a paged part
    static constexpr int kPagedParts = kKeys / kPagedRows;
    static constexpr int kNTiles = kKeys / 8;
    static constexpr int kDTiles = kHeadDim / 8;
    static constexpr int kTileBytes = kKeys * kRowBytes;  // one K or V tile
    static constexpr int kSlotBytes = FA2_DECODE_SLOT_BYTES(kHeadDim);  // K tile, V tile
    static_assert(kSlotBytes == 2 * kTileBytes, "the planner's slot");
    // After the loop the warps' O (fp32) and row statistics reuse Q's and the slots'
    // space (the least: one row tile, one stage).
    static constexpr int kMergeBytes = kWarps * kRows * (kHeadDim + 2) * 4;
    static_assert(kMergeBytes <= kRows * kRowBytes + FA2_DECODE_SLOTS(1) * kSlotBytes,
                  "the merge fits");
    // Shared memory: Q's rows (row_warps row tiles), the slots, their mbarriers, Q's
    static constexpr __host__ __device__ int q_bytes(int row_warps)
    {
        return row_warps * kRows * kRowBytes;
    }
    static constexpr __host__ __device__ int smem_bytes(int stages, int row_warps)
    {
        return FA2_DECODE_SMEM_BYTES(kHeadDim, stages, row_warps);
    }
    static_assert(kRows == 16, "one mma row tile");
    static_assert(kKeys % 16 == 0 && kHeadDim % 16 == 0, "k16 steps");
};

// Row r of a kv head's rows: query token r / group of query head kv_head * group +
// r % group.
struct DecodeRow {
    int token, head;
};

__device__ __forceinline__ DecodeRow decode_row(int r, int group, int kv_head)
{
    return {r / group, kv_head * group + r % group};
}

// How a block's warps share the work (decode_tiles.h, as the planner counts it): a kv
// head's rows in row_blocks blocks of row_warps row tiles; the block's warps in
// key streams of row_warps warps (warp = stream * row_warps + row_warp). The warps of
// a stream compute each of its key tiles and load every row_warps-th into the stream's
// ring of stages * row_warps slots; the streams take key tiles in turn.
struct DecodeBlockShape {
    int row_warps, row_blocks, streams;

    __host__ __device__ __forceinline__ explicit DecodeBlockShape(const fa2_params_t &p)
    {
        const int rows = p.heads_q / p.heads_kv * p.seqlen_q;
        row_warps = FA2_DECODE_ROW_WARPS(rows);
        row_blocks = FA2_DECODE_ROW_BLOCKS(rows);
        streams = FA2_DECODE_WARPS / row_warps;
    }
};

// Row of the splits' accumulators for token `token` of sequence `s`.
__device__ __forceinline__ int64_t accum_row(const fa2_params_t &p, const Sequence &s,
                                             int token)
{
    return p.cu_seqlens_q ? static_cast<int64_t>(s.q_start) + token
                          : static_cast<int64_t>(s.batch) * p.seqlen_q + token;
}

}  // namespace fa2
