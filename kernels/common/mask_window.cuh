// The index arithmetic of the masks: which (query row, key) pairs are visible, which
// key blocks a query tile visits and which query tiles a key block visits. Pure int32
// arithmetic, no CUDA: under nvcc the functions are __host__ __device__, under a plain
// C++ compiler ordinary inline functions, so tests/fuzz/fuzz_mask.cpp runs them on the
// CPU against an int64 model.
//
// Windows are aligned to the bottom-right corner: key j is visible from query i when
// i + offset - window_left <= j <= i + offset + window_right, offset = seqlen_k -
// seqlen_q, and j < seqlen_k. The sums stay inside int32 because seqlen_q, seqlen_k <=
// FA2_MAX_SEQLEN = 2^22 (any bound up to 2^30 would do) and the host passes windows through fa2_kernel_window_left/right
// (kernels/common/params.h), so a window is -1 or below its sequence length; and, for the
// padding rows of a last query tile that the kernels test too, because every query tile
// height divides 2^30 (tests/fuzz/fuzz_mask.cpp asserts that of the tile tables).
#pragma once

#if defined(__CUDACC__)
#define FA2_MASK_FN __host__ __device__ __forceinline__
#else
#define FA2_MASK_FN inline
#endif

namespace fa2 {

// CUDA's max/min on the device (the ternary form, equivalent, compiles to other
// comparisons there and reschedules the kernels), plain ternaries on the host.
FA2_MASK_FN int max_int(int a, int b)
{
#if defined(__CUDA_ARCH__)
    return max(a, b);
#else
    return a > b ? a : b;
#endif
}

FA2_MASK_FN int min_int(int a, int b)
{
#if defined(__CUDA_ARCH__)
    return min(a, b);
#else
    return a < b ? a : b;
#endif
}

struct KeyWindow {
    int offset;        // seqlen_k - seqlen_q
    int window_left;   // -1 = unbounded
    int window_right;  // -1 = unbounded
    int seqlen_k;

    // Key columns [lo, hi) that rows [row_first, row_last] may reach (hi <= lo: none).
    FA2_MASK_FN void key_range(int row_first, int row_last, int &lo, int &hi) const
    {
        lo = window_left >= 0 ? max_int(0, row_first + offset - window_left) : 0;
        hi = window_right >= 0 ? min_int(seqlen_k, row_last + offset + window_right + 1)
                               : seqlen_k;
    }

    // True when some (row, key) of the block is not visible, so the block needs the
    // per-element mask.
    FA2_MASK_FN bool block_needs_mask(int row_first, int row_last, int key_first,
                                      int key_last) const
    {
        return key_last >= seqlen_k ||
               (window_right >= 0 && key_last > row_first + offset + window_right) ||
               (window_left >= 0 && key_first < row_last + offset - window_left);
    }

    FA2_MASK_FN bool visible(int row, int key) const
    {
        return key < seqlen_k && (window_right < 0 || key <= row + offset + window_right) &&
               (window_left < 0 || key >= row + offset - window_left);
    }

    // visible() without short-circuit evaluation, for the backward's fully unrolled
    // fragment loops, where `&&` and `||` became a branch per element. (The forward's
    // apply_mask compares each key with its row's key_range instead.)
    FA2_MASK_FN bool visible_flat(int row, int key) const
    {
        const int diag = row + offset;
        return (key < seqlen_k) & ((window_right < 0) | (key <= diag + window_right)) &
               ((window_left < 0) | (key >= diag - window_left));
    }
};

// Query rows [lo, hi] that can see some key of [key_first, key_last] (hi < lo: none).
FA2_MASK_FN void query_range(const KeyWindow &w, int seqlen_q, int key_first, int key_last,
                             int &lo, int &hi)
{
    lo = w.window_right >= 0 ? max_int(0, key_first - w.offset - w.window_right) : 0;
    hi = w.window_left >= 0 ? min_int(seqlen_q - 1, key_last - w.offset + w.window_left)
                            : seqlen_q - 1;
}

// Key blocks [n_first, n_end) of kBlockN keys that a query tile of rows
// [row_first, row_last] visits (n_end <= n_first: none).
template <int kBlockN>
FA2_MASK_FN void tile_key_blocks(const KeyWindow &w, int row_first, int row_last, int &n_first,
                                 int &n_end)
{
    int key_lo, key_hi;
    w.key_range(row_first, row_last, key_lo, key_hi);
    n_first = key_lo / kBlockN;
    n_end = key_hi > key_lo ? (key_hi + kBlockN - 1) / kBlockN : n_first;
}

// Query tiles [m_first, m_first + m_count) of kBlockM rows that a key block of keys
// [key_first, key_last] visits.
template <int kBlockM>
FA2_MASK_FN void block_query_tiles(const KeyWindow &w, int seqlen_q, int key_first,
                                   int key_last, int &m_first, int &m_count)
{
    static_assert((1 << 30) % kBlockM == 0,
                  "a query tile must divide FA2_MAX_SEQLEN: its padding rows are tested in int32");
    int q_lo, q_hi;
    query_range(w, seqlen_q, key_first, key_last, q_lo, q_hi);
    m_first = q_lo / kBlockM;
    m_count = q_hi >= q_lo ? q_hi / kBlockM - m_first + 1 : 0;
}

}  // namespace fa2
