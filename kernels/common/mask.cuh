// The query tile of a forward or dQ thread block and the key blocks it visits; the
// mask arithmetic itself (KeyWindow) is in mask_window.cuh.
#pragma once

#include <math.h>

#include "common/params.h"
#include "common/mask_window.cuh"
#include "common/seqinfo.cuh"

namespace fa2 {

// The query tile a thread block owns and the key blocks [n_first, n_end) it visits.
struct QueryTile {
    Sequence seq;
    int head, kv_head;
    int row_first, row_last;  // last row is clamped to the sequence's seqlen_q - 1
    int n_first, n_end;       // n_end <= n_first: no visible key
    KeyWindow win;
};

// Block index → tile: the query tiles of one (batch, head) are consecutive blocks
// (L2 reuse of K/V); with kLastFirst they go last-first, so the heaviest causal tiles
// start earliest.
template <int kBlockM, int kBlockN, bool kLastFirst, int kMode>
__device__ __forceinline__ QueryTile query_tile(const fa2_params_t &p)
{
    static_assert((1 << 30) % kBlockM == 0,
                  "a query tile must divide FA2_MAX_SEQLEN: its padding rows are tested in int32");
    QueryTile t;
    // The grid covers the longest sequence (p.seqlen_q); a packed batch's shorter
    // sequences leave tiles without rows: they visit no key and write nothing.
    const int m_blocks = (p.seqlen_q + kBlockM - 1) / kBlockM;
    const int bh = static_cast<int>(blockIdx.x / m_blocks);
    t.head = bh % p.heads_q;
    t.seq = sequence<kMode>(p, bh / p.heads_q);
    t.kv_head = t.head / (p.heads_q / p.heads_kv);
    const int seq_blocks =
        kMode != kDenseSeq ? (t.seq.seqlen_q + kBlockM - 1) / kBlockM : m_blocks;
    const int m = static_cast<int>(blockIdx.x % m_blocks);
    const int m_block = kLastFirst ? seq_blocks - 1 - m : m;
    t.row_first = m_block * kBlockM;
    t.row_last = min(t.row_first + kBlockM, t.seq.seqlen_q) - 1;
    t.win = KeyWindow{t.seq.seqlen_k - t.seq.seqlen_q, p.window_left, p.window_right,
                      t.seq.seqlen_k};
    if (kMode != kDenseSeq && m >= seq_blocks) {
        t.row_first = t.seq.seqlen_q;  // no row: the epilogue writes nothing
        t.n_first = t.n_end = 0;
        return t;
    }
    tile_key_blocks<kBlockN>(t.win, t.row_first, t.row_last, t.n_first, t.n_end);
    return t;
}

// Sets scores of invisible (row, key) pairs to -inf. row0/key0: the tile's first
// query row and key of this warp's fragment origin. Each row's visible keys are one
// interval (KeyWindow::key_range), taken once per row relative to this thread's first
// column, so an element costs two compares with its column's constant offset and a
// select, without branches.
template <typename Tr>
__device__ __forceinline__ void apply_mask(float (&s)[Tr::kMTiles][Tr::kNTiles][4],
                                           const KeyWindow &win, int row0, int key0, int lane)
{
    const int col0 = key0 + 2 * (lane & 3);
#pragma unroll
    for (int mt = 0; mt < Tr::kMTiles; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = row0 + mt * 16 + (lane >> 2) + 8 * h;
            int lo, hi;
            win.key_range(row, row, lo, hi);
            lo -= col0;
            hi -= col0;
#pragma unroll
            for (int nt = 0; nt < Tr::kNTiles; ++nt)
#pragma unroll
                for (int c = 0; c < 2; ++c) {
                    const int col = nt * 8 + c;  // from col0
                    if ((col < lo) | (col >= hi)) s[mt][nt][2 * h + c] = -INFINITY;
                }
        }
}

}  // namespace fa2
