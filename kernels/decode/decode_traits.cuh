// The decode kernel's compile-time shape (from decode_tiles.h, which the planner reads
// too) and its row numbering: a kv head's rows are its query heads times the query
// tokens, kRows of them a block.
#pragma once

#include <stdint.h>

#include "common/params.h"
#include "common/seqinfo.cuh"
#include "decode/decode_tiles.h"

namespace fa2 {

template <typename Elem_, int kHeadDim_, int kStages_>
struct DecodeTraits {
    using Elem = Elem_;
    static constexpr int kHeadDim = kHeadDim_;
    static constexpr int kWarps = FA2_DECODE_WARPS;
    static constexpr int kThreads = 32 * kWarps;
    static constexpr int kRows = FA2_DECODE_ROWS;
    static constexpr int kKeys = FA2_DECODE_KEYS(kHeadDim);  // keys per warp tile
    static constexpr int kStages = kStages_;
    static constexpr int kRowBytes = FA2_DECODE_ROW_BYTES(kHeadDim);
    static constexpr int kLoadChunks = kHeadDim / 8;
    static constexpr int kPagedRows = kKeys < 32 ? kKeys : 32;  // rows of a paged part
    static constexpr int kPagedParts = kKeys / kPagedRows;
    static constexpr int kNTiles = kKeys / 8;
    static constexpr int kDTiles = kHeadDim / 8;
    static constexpr int kQBytes = kRows * kRowBytes;
    static constexpr int kTileBytes = kKeys * kRowBytes;         // one K or V tile
    static constexpr int kWarpBytes = kStages * 2 * kTileBytes;  // a warp's buffers
    static constexpr int kSmemBytes = FA2_DECODE_SMEM_BYTES(kHeadDim, kStages);
    // After the loop the warps' O (fp32) and row statistics reuse the K/V buffers.
    static constexpr int kMergeBytes = kWarps * kRows * (kHeadDim + 2) * 4;
    static_assert(kSmemBytes == kQBytes + kWarps * kWarpBytes, "the planner's size");
    static_assert(kMergeBytes <= kWarps * kWarpBytes, "the merge fits the K/V space");
    static_assert(kRows == 16, "one mma row tile");
    static_assert(kStages >= 2, "a tile in flight while one is computed");
    static_assert(kKeys % 16 == 0 && kHeadDim % 16 == 0, "k16 steps");
};

// Row r of the block's M rows: query token r / group of query head kv_head * group +
// r % group.
struct DecodeRow {
    int token, head;
};

__device__ __forceinline__ DecodeRow decode_row(int r, int group, int kv_head)
{
    return {r / group, kv_head * group + r % group};
}

// Row tiles of kRows per kv head: the kv head's rows are group x the (largest)
// seqlen_q (the planner's count, decode_tiles.h).
__host__ __device__ __forceinline__ int decode_row_tiles(const fa2_params_t &p)
{
    return FA2_DECODE_ROW_TILES(p.heads_q / p.heads_kv * p.seqlen_q);
}

// Row of the splits' accumulators for token `token` of sequence `s`.
__device__ __forceinline__ int64_t accum_row(const fa2_params_t &p, const Sequence &s,
                                             int token)
{
    return p.cu_seqlens_q ? static_cast<int64_t>(s.q_start) + token
                          : static_cast<int64_t>(s.batch) * p.seqlen_q + token;
}

}  // namespace fa2
