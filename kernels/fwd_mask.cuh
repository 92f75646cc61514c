// Which keys a block of query rows may see: causal and sliding windows aligned to
// the bottom-right corner (key j visible from query i when
// i + off - window_left <= j <= i + off + window_right, off = seqlen_k - seqlen_q),
// plus the end of the key sequence.
#pragma once

#include <math.h>

#include "fwd_params.h"

namespace fa2 {

struct KeyWindow {
    int offset;        // seqlen_k - seqlen_q
    int window_left;   // -1 = unbounded
    int window_right;  // -1 = unbounded
    int seqlen_k;

    // Key columns [lo, hi) that rows [row_first, row_last] may reach (hi <= lo: none).
    __device__ __forceinline__ void key_range(int row_first, int row_last, int &lo,
                                              int &hi) const
    {
        lo = window_left >= 0 ? max(0, row_first + offset - window_left) : 0;
        hi = window_right >= 0 ? min(seqlen_k, row_last + offset + window_right + 1) : seqlen_k;
    }

    // True when some (row, key) of the block is not visible, so the block needs the
    // per-element mask.
    __device__ __forceinline__ bool block_needs_mask(int row_first, int row_last, int key_first,
                                                     int key_last) const
    {
        return key_last >= seqlen_k ||
               (window_right >= 0 && key_last > row_first + offset + window_right) ||
               (window_left >= 0 && key_first < row_last + offset - window_left);
    }

    __device__ __forceinline__ bool visible(int row, int key) const
    {
        return key < seqlen_k && (window_right < 0 || key <= row + offset + window_right) &&
               (window_left < 0 || key >= row + offset - window_left);
    }

    // visible() without short-circuit evaluation, for the backward's fully unrolled
    // fragment loops, where `&&` and `||` became a branch per element. The forward keeps
    // visible(): this form raised its d = 64 kernel from 164 to 214 registers (three
    // blocks per SM to two; docs/performance.md, "Hopper backward, fourth pass").
    __device__ __forceinline__ bool visible_flat(int row, int key) const
    {
        const int diag = row + offset;
        return (key < seqlen_k) & ((window_right < 0) | (key <= diag + window_right)) &
               ((window_left < 0) | (key >= diag - window_left));
    }
};

// The query tile a thread block owns and the key blocks [n_first, n_end) it visits.
struct QueryTile {
    int batch, head, kv_head;
    int row_first, row_last;  // last row is clamped to seqlen_q - 1
    int n_first, n_end;       // n_end <= n_first: no visible key
    KeyWindow win;
};

// Block index → tile: the query tiles of one (batch, head) are consecutive blocks
// (L2 reuse of K/V); with kLastFirst they go last-first, so the heaviest causal tiles
// start earliest.
template <int kBlockM, int kBlockN, bool kLastFirst>
__device__ __forceinline__ QueryTile query_tile(const fa2_fwd_params_t &p)
{
    QueryTile t;
    const int m_blocks = (p.seqlen_q + kBlockM - 1) / kBlockM;
    const int m = static_cast<int>(blockIdx.x % m_blocks);
    const int m_block = kLastFirst ? m_blocks - 1 - m : m;
    const int bh = static_cast<int>(blockIdx.x / m_blocks);
    t.head = bh % p.heads_q;
    t.batch = bh / p.heads_q;
    t.kv_head = t.head / (p.heads_q / p.heads_kv);
    t.row_first = m_block * kBlockM;
    t.row_last = min(t.row_first + kBlockM, p.seqlen_q) - 1;
    t.win = KeyWindow{p.seqlen_k - p.seqlen_q, p.window_left, p.window_right, p.seqlen_k};
    int key_lo, key_hi;
    t.win.key_range(t.row_first, t.row_last, key_lo, key_hi);
    t.n_first = key_lo / kBlockN;
    t.n_end = key_hi > key_lo ? (key_hi + kBlockN - 1) / kBlockN : t.n_first;
    return t;
}

}  // namespace fa2
