// The overlapped loop's softmax step for one key tile, per score instance (kScores,
// common/score_variants.cuh): the score variants and the mask applied to S, then the
// online softmax's update, which defers O's rescale to after the previous tile's P V.
#pragma once

#include <stdint.h>

#include "common/mask.cuh"
#include "common/ptx.cuh"
#include "common/score_variants.cuh"
#include "common/softmax.cuh"

namespace fa2 {

// Applies the variants and the mask to S of the tile at key_first (rows rows_first to
// rows_last of the block, this warp's 16 from rows_first + warp * 16). ALiBi on a tile
// with one sign of the distance is a column term per score and a row term per row
// (`bias`, for the update); returns that sign, or 0.
template <typename Tr, int kScores>
__device__ __forceinline__ int apply_tile_scores(float (&s)[1][Tr::kNTiles][4],
                                                 const ScoreVariants &variants,
                                                 int64_t diag_offset, const KeyWindow &window,
                                                 int rows_first, int rows_last, int key_first,
                                                 int warp, int lane, float (&bias)[1][2])
{
    int side = 0;
    if constexpr (kScores == kBoundedSoftcap) {
        apply_softcap(s, variants.tanh_scale);
    } else if constexpr (kScores == kGeneralScores) {  // ALiBi alone (softcap: serial loop)
        if ((side = alibi_tile_side(variants, diag_offset, rows_first, rows_last, key_first,
                                    key_first + Tr::kBlockN - 1)) != 0)
            apply_alibi_one_side<Tr>(s, variants, side, rows_first + warp * 16, key_first,
                                     lane, bias);
        else
            apply_score_variants<Tr, false>(s, variants, rows_first + warp * 16, key_first,
                                            lane);
    }
    if (window.block_needs_mask(rows_first, rows_last, key_first, key_first + Tr::kBlockN - 1))
        apply_mask<Tr>(s, window, rows_first + warp * 16, key_first, lane);
    return side;
}

// The softmax's update for S (scores in units that scale_log2 turns into log2 units):
// P in s, and O's rescale factors in alpha, to apply once the previous tile's P V is done
// where the return is true (kLazyRescale: false while every row of the warp keeps its
// offset; the bounded softcap: never, O keeps its scale). kSkipZeroTiles: warp_zero when
// every p of the warp underflows to 0 (s then holds no probabilities), zero when that
// holds in the whole warpgroup math_wg, whose P V is then skipped.
template <typename Tr, int kScores, bool kLazyRescale, bool kSkipZeroTiles>
__device__ __forceinline__ bool update_tile_softmax(OnlineSoftmax<1> &softmax,
                                                    float (&s)[1][Tr::kNTiles][4],
                                                    float scale_log2, float bounded_offset_log2,
                                                    float (&bias)[1][2], int side,
                                                    float (&alpha)[1][2], bool &warp_zero,
                                                    bool &zero, int math_wg)
{
    if constexpr (kScores == kBoundedSoftcap) {
        softmax.update_bounded<Tr::kNTiles>(s, scale_log2, bounded_offset_log2);
        return false;
    } else if constexpr (kSkipZeroTiles) {
        // one copy of the update for every tile (bias 0 off the one-sided path)
        const bool moves =
            softmax.update_deferred_biased_lazy_sparse(s, scale_log2, bias, alpha, warp_zero);
        // (the vote lets the compiler see a warp-uniform branch around the P V's wgmma,
        // which it would serialize otherwise)
        zero = __all_sync(0xffffffffu, named_barrier_all(4 + math_wg, 128, warp_zero));
        return moves;
    } else if constexpr (kLazyRescale) {
        return softmax.update_deferred_biased_lazy(s, scale_log2, bias, alpha);
    } else {
        if (side != 0)
            softmax.update_deferred_biased(s, scale_log2, bias, alpha);
        else
            softmax.update_deferred(s, scale_log2, alpha);
        return true;
    }
}

}  // namespace fa2
