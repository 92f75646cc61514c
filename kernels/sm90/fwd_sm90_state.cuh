// What the Hopper forward's main loops share with its kernel: where the thread and the
// block's buffers are, and the running state of the block's query rows.
#pragma once

#include <stdint.h>

#include "common/score_variants.cuh"
#include "common/softmax.cuh"

namespace fa2 {

// The thread and the block's shared memory: Q, K's buffers, V's, and the mbarriers.
struct FwdSm90Place {
    int tid, warp, lane;
    int wg_row0;  // this warpgroup's first row in the tile
    uint32_t q_smem, k_smem, v_smem, bars;
};

// This thread's rows: O (unnormalized), the softmax's running state, the score variants
// and, for a bounded softcap, its fixed offset in log2 units; ALiBi on tiles with one
// sign of the distance takes the diagonal key of row r as r + diag_offset.
template <typename Tr>
struct FwdSm90Rows {
    float o[1][Tr::kDTiles][4];
    OnlineSoftmax<1> softmax;
    ScoreVariants variants;
    float bounded_offset_log2;
    int64_t diag_offset;
};

}  // namespace fa2
