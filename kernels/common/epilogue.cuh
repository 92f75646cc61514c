// The forward's epilogue, shared by both kernel families: O = accumulator / row sum to
// the element type, and the LSE of every valid row (when the caller asked for it).
#pragma once

#include "common/params.h"
#include "common/seqinfo.cuh"
#include "common/warp_gemm.cuh"

namespace fa2 {

// o: a warp's kMTiles m16 tiles of output (m16n8 accumulator layout) from query row
// warp_row0; inv_sum and lse: per tile, the rows lane/4 and lane/4 + 8.
template <typename Elem, int kMTiles, int kDTiles>
__device__ __forceinline__ void store_o_lse(const fa2_params_t &p, const Sequence &seq, int head,
                                            int warp_row0, const float (&o)[kMTiles][kDTiles][4],
                                            const float (&inv_sum)[kMTiles][2],
                                            const float (&lse)[kMTiles][2], int lane)
{
    store_acc<Elem>(o, inv_sum, o_row<Elem>(p, seq, head, 0), p.o_seq_stride, warp_row0,
                    seq.seqlen_q, 0, p.head_dim, lane);
    if (p.lse && (lane & 3) == 0) {
        float *lse_out = p.lse + stats_row(p, seq, head);
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int row = warp_row0 + mt * 16 + (lane >> 2) + 8 * h;
                if (row < seq.seqlen_q) lse_out[row] = lse[mt][h];
            }
    }
}

}  // namespace fa2
