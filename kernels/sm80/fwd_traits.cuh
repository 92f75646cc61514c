// Compile-time shape of one forward kernel: tile sizes from kernels/sm80/fwd_tiles.h and
// everything derived from them.
#pragma once

#include "sm80/fwd_tiles.h"

namespace fa2 {

// FwdTile<d, 0>: the bucket's main tile; FwdTile<d, 1>: its compact tile.
template <int kHeadDim, int kCompact>
struct FwdTile;

#define FA2_FWD_TILE_SPEC(compact, d, m, n, w)     \
    template <>                                    \
    struct FwdTile<d, compact> {                   \
        static constexpr int kBlockM = m;          \
        static constexpr int kBlockN = n;          \
        static constexpr int kWarps = w;           \
    };
#define FA2_FWD_MAIN_SPEC(d, m, n, w) FA2_FWD_TILE_SPEC(0, d, m, n, w)
#define FA2_FWD_COMPACT_SPEC(d, m, n, w) FA2_FWD_TILE_SPEC(1, d, m, n, w)
FA2_FWD_TILES(FA2_FWD_MAIN_SPEC)
FA2_FWD_COMPACT_TILES(FA2_FWD_COMPACT_SPEC)
#undef FA2_FWD_COMPACT_SPEC
#undef FA2_FWD_MAIN_SPEC
#undef FA2_FWD_TILE_SPEC

template <typename Elem_, int kHeadDim_, int kCompact = 0>
struct FwdTraits {
    using Elem = Elem_;
    static constexpr int kHeadDim = kHeadDim_;
    static constexpr int kBlockM = FwdTile<kHeadDim, kCompact>::kBlockM;  // Br
    static constexpr int kBlockN = FwdTile<kHeadDim, kCompact>::kBlockN;  // Bc
    static constexpr int kWarps = FwdTile<kHeadDim, kCompact>::kWarps;
    static constexpr int kThreads = 32 * kWarps;

    // Each warp owns kRowsPerWarp query rows: kMTiles mma tiles of 16 rows.
    static constexpr int kRowsPerWarp = kBlockM / kWarps;
    static constexpr int kMTiles = kRowsPerWarp / 16;
    static constexpr int kNTiles = kBlockN / 8;   // n8 tiles of S per row block
    static constexpr int kDTiles = kHeadDim / 8;  // n8 tiles of O per row block

    // Shared memory: rows of kSmemCols elements (multiple of 64 → 128-byte rows),
    // stored in 16-byte chunks swizzled by (chunk ^ row % 8).
    static constexpr int kSmemCols = (kHeadDim + 63) / 64 * 64;
    static constexpr int kRowBytes = kSmemCols * 2;
    static constexpr int kLoadChunks = kHeadDim / 8;  // 16-byte chunks per row loaded
    static constexpr int kQBytes = kBlockM * kRowBytes;
    static constexpr int kKVBytes = kBlockN * kRowBytes;
    static constexpr int kSmemBytes = kQBytes + 3 * kKVBytes;  // Q, K x2, V

    static_assert(kRowsPerWarp % 16 == 0, "a warp owns whole 16-row mma tiles");
    static_assert(kBlockN % 16 == 0 && kHeadDim % 16 == 0, "k16 steps");
    static_assert(kBlockM * kLoadChunks % kThreads == 0, "Q tile splits evenly");
    static_assert(kBlockN * kLoadChunks % kThreads == 0, "K/V tile splits evenly");
};

}  // namespace fa2
