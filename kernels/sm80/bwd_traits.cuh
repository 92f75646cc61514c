// Compile-time shape of the backward kernels for one (element type, head dim, tile).
#pragma once

#include "sm80/bwd_tiles.h"

namespace fa2 {

// BwdTile<d, 0>: the bucket's main tiles; BwdTile<d, 1>: its compact tiles.
template <int kHeadDim, int kCompact>
struct BwdTile;

#define FA2_BWD_TILE_SPEC(compact, d, bn, bm, w, sl, qbm, qbn, qw) \
    template <>                                                    \
    struct BwdTile<d, compact> {                                   \
        static constexpr int kBlockN = bn;                         \
        static constexpr int kBlockM = bm;                         \
        static constexpr int kWarps = w;                           \
        static constexpr int kSlices = sl;                         \
        static constexpr int kDqBlockM = qbm;                      \
        static constexpr int kDqBlockN = qbn;                      \
        static constexpr int kDqWarps = qw;                        \
    };
#define FA2_BWD_MAIN_SPEC(...) FA2_BWD_TILE_SPEC(0, __VA_ARGS__)
#define FA2_BWD_COMPACT_SPEC(...) FA2_BWD_TILE_SPEC(1, __VA_ARGS__)
FA2_BWD_TILES(FA2_BWD_MAIN_SPEC)
FA2_BWD_COMPACT_TILES(FA2_BWD_COMPACT_SPEC)
#undef FA2_BWD_COMPACT_SPEC
#undef FA2_BWD_MAIN_SPEC
#undef FA2_BWD_TILE_SPEC

template <typename Elem_, int kHeadDim_, int kCompact = 0>
struct BwdTraits {
    using Elem = Elem_;
    using Tile = BwdTile<kHeadDim_, kCompact>;
    static constexpr int kHeadDim = kHeadDim_;
    static constexpr int kSmemCols = (kHeadDim + 63) / 64 * 64;
    static constexpr int kRowBytes = kSmemCols * 2;
    static constexpr int kLoadChunks = kHeadDim / 8;

    // dK/dV kernel: warps own key rows; the dK/dV columns of one block are a slice.
    static constexpr int kBlockN = Tile::kBlockN;
    static constexpr int kBlockM = Tile::kBlockM;
    static constexpr int kWarps = Tile::kWarps;
    static constexpr int kThreads = 32 * kWarps;
    static constexpr int kSlices = Tile::kSlices;
    static constexpr int kSliceDim = kHeadDim / kSlices;
    static constexpr int kMTiles = kBlockN / kWarps / 16;  // 16-key mma tiles per warp
    static constexpr int kKVBytes = kBlockN * kRowBytes;
    static constexpr int kQBytes = kBlockM * kRowBytes;
    static constexpr int kStatsBytes = 4 * kBlockM * 4;  // LSE and D, double buffered
    static constexpr int kDkdvSmemBytes = 2 * kKVBytes + 4 * kQBytes + kStatsBytes;

    // Atomic-dQ mode: dS (kBlockM query rows × kBlockN keys) goes through shared memory
    // and the warps split dQ = dS K (kBlockM × slice) into kDqWarpsM × kDqWarpsN parts.
    static constexpr int kDsRowBytes = kBlockN * 2 > 128 ? kBlockN * 2 : 128;
    static constexpr int kDsBytes = kBlockM * kDsRowBytes;
    static constexpr int kAtomicSmemBytes = kDkdvSmemBytes + kDsBytes;
    static constexpr int kAtomicWarpsM = kWarps < kBlockM / 16 ? kWarps : kBlockM / 16;
    static constexpr int kAtomicWarpsN = kWarps / kAtomicWarpsM;
    static constexpr int kAtomicMTiles = kBlockM / 16 / kAtomicWarpsM;
    static constexpr int kAtomicNTiles = kSliceDim / 8 / kAtomicWarpsN;

    // dQ kernel: warps own query rows.
    static constexpr int kDqBlockM = Tile::kDqBlockM;
    static constexpr int kDqBlockN = Tile::kDqBlockN;
    static constexpr int kDqWarps = Tile::kDqWarps;
    static constexpr int kDqThreads = 32 * kDqWarps;
    static constexpr int kDqMTiles = kDqBlockM / kDqWarps / 16;
    static constexpr int kDqQBytes = kDqBlockM * kRowBytes;
    static constexpr int kDqKVBytes = kDqBlockN * kRowBytes;
    static constexpr int kDqSmemBytes = 2 * kDqQBytes + 4 * kDqKVBytes;

    static_assert(kBlockN % (16 * kWarps) == 0 && kDqBlockM % (16 * kDqWarps) == 0,
                  "warps own whole 16-row mma tiles");
    static_assert(kSlices == 1 || kSliceDim % 64 == 0, "slices start on 128-byte groups");
    static_assert(kSliceDim % 16 == 0 && kBlockM % 16 == 0 && kDqBlockN % 16 == 0, "k16 steps");
    static_assert(kAtomicWarpsM * kAtomicWarpsN == kWarps && kAtomicNTiles % 2 == 0,
                  "dQ = dS K splits evenly over the warps");
};

}  // namespace fa2
