// The Hopper forward kernel's compile-time shape (tile, threads, shared memory), how its
// K/V tiles reach shared memory, and its kernel parameter.
#pragma once

#include <cuda.h>
#include <stdint.h>

#include "common/params.h"
#include "common/score_variants.cuh"
#include "common/seqinfo.cuh"
#include "sm90/fwd_sm90_tiles.h"

namespace fa2 {

template <int kHeadDim>
struct FwdSm90Tile;

#define FA2_FWD_SM90_TILE_SPEC(d, wg, n)            \
    template <>                                     \
    struct FwdSm90Tile<d> {                         \
        static constexpr int kWarpgroups = wg;      \
        static constexpr int kBlockN = n;           \
    };
FA2_FWD_SM90_TILES(FA2_FWD_SM90_TILE_SPEC)
#undef FA2_FWD_SM90_TILE_SPEC

// kWarpgroups_: the tile table's, or another for one path (the producer's two).
template <typename Elem_, int kHeadDim_, int kWarpgroups_ = FwdSm90Tile<kHeadDim_>::kWarpgroups>
struct FwdSm90Traits {
    using Elem = Elem_;
    static constexpr int kHeadDim = kHeadDim_;
    static constexpr int kWarpgroups = kWarpgroups_;
    static constexpr int kBlockM = 64 * kWarpgroups;
    static constexpr int kBlockN = FwdSm90Tile<kHeadDim>::kBlockN;
    static constexpr int kThreads = 128 * kWarpgroups;
    // apply_mask's view: each warp owns one 16-row tile of a warpgroup's 64 rows.
    static constexpr int kMTiles = 1;
    static constexpr int kNTiles = kBlockN / 8;
    static constexpr int kDTiles = kHeadDim / 8;
    static constexpr int kLoadChunks = kHeadDim / 8;
    static constexpr int kQBytes = kBlockM * kHeadDim * 2;
    static constexpr int kKVBytes = kBlockN * kHeadDim * 2;
    static constexpr int kSmemBytes = kQBytes + 3 * kKVBytes + 1024;

    static_assert(kHeadDim % 64 == 0, "whole 128-byte panels");
    static_assert(kBlockN % 16 == 0 && kBlockN <= 256, "wgmma n and k16 steps");
};

// How K/V tiles reach shared memory: by TMA (dense, packed, paged with
// pages of whole boxes), or for a paged cache by cp.async from the math threads or from a
// producer warpgroup of its own (sm90/fwd_sm90_producer.cuh).
enum KvCopy { kKvByTma, kKvByCpAsync, kKvByProducer };

// Threads per block: the producer warpgroup adds 128; shared memory: its K stages past
// the first add a K buffer each (fa2_fwd_sm90_producer_smem_bytes).
template <typename Tr, int kKv>
struct FwdSm90Launch {
    static constexpr int kThreads = Tr::kThreads + (kKv == kKvByProducer ? 128 : 0);
    static constexpr int kSmemBytes =
        Tr::kSmemBytes +
        (kKv == kKvByProducer ? (FA2_WGMMA_PRODUCER_K_STAGES - 1) * Tr::kKVBytes : 0);
};

// An instance's compile-time choices (fwd_sm90_kernel.cuh: kMode, kScores, kKv).
template <typename Tr, int kMode, int kScores, int kKv>
struct FwdSm90Flags {
    static constexpr bool kTma = kKv == kKvByTma, kProducer = kKv == kKvByProducer;
    static constexpr bool kScored = kScores != kPlainScores;
    static constexpr bool kBoundedScores = kScores == kBoundedSoftcap;
    // The producer's copies: a paged cache's by cp.async, a dense batch's by TMA
    static constexpr bool kProducerCpAsync = kProducer && kMode == kPagedSeq;
    // The math warpgroups take turns at issuing their products
    static constexpr bool kPingpong = kProducer;
    // ...and the bounded softcap's passes the turn once its tanh is applied, the others'
    // once both products are issued
    static constexpr bool kLateTurn = kPingpong && kBoundedScores;
    // The overlapped loop skips O's rescale while its rows keep their offsets: in the
    // scored instances (in the plain ones the gain was not measured)
    static constexpr bool kLazyRescale = kScored;
    // The general instance skips the P V of tiles whose every p underflows to 0 (ALiBi's
    // far from the diagonal), in the overlapped loop with its lazy rescale.
    static constexpr bool kSkipZeroTiles = kScored && !kBoundedScores && kLazyRescale;
    // S of tile j overlaps P V of tile j - 1 when K and V come by TMA, at head
    // dims to 128 with plain scores and at 128 with ALiBi alone or a softcap that bounds
    // the scores (measured slower at 256, and with softcap under a running maximum).
    static constexpr bool kOverlappable =
        kProducer || (kTma && (kScored ? Tr::kHeadDim == 128 : Tr::kHeadDim <= 128));
    static_assert(kTma || kMode == kPagedSeq || (kProducer && kMode == kDenseSeq),
                  "packed K/V by TMA");
};

// The kernel's parameter: the call's, and K's and V's tensor maps (sm90/tensor_map.h):
// a dense or packed batch's with box (64 columns, 1 head, kBlockN rows, 1); a paged
// cache's, when page_box_rows > 0, with box (64, 1, page_box_rows, 1), page_box_rows
// rows of one page (a tile's share of a page, or the page itself when a tile holds
// several). page_box_rows = 0: the paged kernel copies with cp.async instead.
struct FwdSm90Args {
    fa2_params_t p;
    CUtensorMap k_map, v_map;
    int page_box_rows;
};

}  // namespace fa2
