// Which keys a block of query rows may see: causal and sliding windows aligned to
// the bottom-right corner (key j visible from query i when
// i + off - window_left <= j <= i + off + window_right, off = seqlen_k - seqlen_q),
// plus the end of the key sequence.
#pragma once

#include <math.h>

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
};

}  // namespace fa2
