// The producer warpgroup of the Hopper paged forward (kKvByProducer): pages of any size
// are copied with cp.async by a warpgroup of their own, so that the page lookups and
// copies leave the math warpgroups' issue slots (the FlashAttention-3 warp-specialised
// layout), and two math warpgroups share each tile it copies. (As tuning, a dense
// batch's tiles too, by TMA: produce_copied_tiles.) It fills the overlapped
// loop's buffers, FA2_WGMMA_PRODUCER_K_STAGES K and two V, each as soon as the math
// warpgroups free it, and signals each tile on mbarriers (ProducerBars):
//   K full, V full (one per buffer): each 128 producer arrivals
//             (cp.async.mbarrier.arrive.noinc: when this thread's copies have landed),
//             or for TMA one arrival that expects the tile's bytes;
//   K free, V free (one per buffer): an arrival from every math thread.
// Rows past the keys and pages out of range arrive as zeros (load_paged_tile).
#pragma once

#include <stdint.h>

#include "common/paged_tile.cuh"
#include "common/params.h"
#include "common/ptx.cuh"
#include "common/seqinfo.cuh"
#include "sm90/fwd_sm90_tiles.h"
#include "sm90/tma.cuh"
#include "sm90/wgmma.cuh"

namespace fa2 {

// Registers per thread with a producer warpgroup (setmaxnreg, one block per SM): the
// producer keeps 64 (at 56 and fewer it spilled); the math threads take the rest of what
// the block got at launch (65536 / threads each, in steps of 8): 216 with 256 of them.
constexpr int kProducerRegs = 64;
template <int kMathThreads>
constexpr int producer_math_regs()
{
    constexpr int threads = kMathThreads + 128, at_launch = 65536 / threads / 8 * 8;
    return (at_launch * threads - kProducerRegs * 128) / kMathThreads / 8 * 8;
}

// Tile j's buffers take turns: K j % kKStages, V j & 1. The barriers, 8 bytes each: K
// full, V full, K free, V free, one per buffer.
struct ProducerBars {
    static constexpr int kKStages = FA2_WGMMA_PRODUCER_K_STAGES;
    static_assert(kKStages == 1 || kKStages == 2, "one or two K buffers");
    uint32_t base;
    __device__ uint32_t k_full(int j) const { return base + 8 * (j % kKStages); }
    __device__ uint32_t v_full(int j) const { return base + 8 * kKStages + 8 * (j & 1); }
    __device__ uint32_t k_free(int j) const
    {
        return base + 8 * (kKStages + 2) + 8 * (j % kKStages);
    }
    __device__ uint32_t v_free(int j) const { return base + 8 * (2 * kKStages + 2) + 8 * (j & 1); }
    // The phase of K full that tile j waits for; K free's that tile j's copy waits for
    // (tile j - kKStages read the buffer; j >= kKStages).
    static __device__ uint32_t k_full_phase(int j) { return (j / kKStages) & 1; }
    static __device__ uint32_t k_free_phase(int j) { return (j / kKStages - 1) & 1; }
    static constexpr int kBytes = 8 * (2 * kKStages + 4);
};

// Tile j's K and V buffers, from the first K buffer (Q's end).
template <typename Tr>
__device__ __forceinline__ uint32_t producer_k_tile(uint32_t k_smem, int j)
{
    return k_smem + (j % ProducerBars::kKStages) * Tr::kKVBytes;
}
template <typename Tr>
__device__ __forceinline__ uint32_t producer_v_tile(uint32_t k_smem, int j)
{
    return k_smem + (ProducerBars::kKStages + (j & 1)) * Tr::kKVBytes;
}

// This thread's row (index in the row space, -1: zero-fill) of each of its passes over a
// tile, from its lane's fetched page id (load_paged_tile's rows, found ahead of the copies:
// K and V share them).
template <typename Shape, typename Elem>
__device__ __forceinline__ void tile_row_indices(int (&rows)[Shape::kPasses],
                                                 const PagedRows<Elem> &paged, int lane_page,
                                                 int key_first, int ptid)
{
    const int lane = ptid % 32;
    const int lane_index =
        paged.row_index(lane_page, key_first + Shape::lane_row(ptid / 32, lane));
#pragma unroll
    for (int pass = 0; pass < Shape::kPasses; ++pass)
        rows[pass] = __shfl_sync(0xffffffffu, lane_index,
                                 pass * Shape::kWarpRowsPerPass + lane / Shape::kLaneChunks);
}

// The copies of a tile whose rows tile_row_indices found (row space, whole 128-byte rows).
template <typename Shape, int kBlockN, typename Elem>
__device__ __forceinline__ void copy_tile_rows(uint32_t smem, const Elem *head, uint32_t row_bytes,
                                               const int (&rows)[Shape::kPasses], int ptid)
{
    static_assert(Shape::kLaneChunks == Shape::kTileChunks, "every lane copies");
    const int chunk = ptid % Shape::kLaneChunks, row0 = ptid / Shape::kLaneChunks;
    const char *base = reinterpret_cast<const char *>(head + chunk * 8);
#pragma unroll
    for (int pass = 0; pass < Shape::kPasses; ++pass) {
        const bool valid = rows[pass] >= 0;
        const uint32_t row = valid ? static_cast<uint32_t>(rows[pass]) : 0u;
        cp_async_16(smem + panel_offset<kBlockN>(row0 + pass * Shape::kRowStep, chunk),
                    base + static_cast<uint64_t>(row) * row_bytes, valid);
    }
}

// Tile j (keys key_of(j) = (last_block - j) block_n on) for j in [0, tiles): K and V
// into their buffers (producer_k_tile, producer_v_tile). ptid: the thread's index in the producer warpgroup. In a
// row space (the usual layouts) the next tile's rows are found before its buffer is free.
template <typename Tr, typename Elem>
__device__ __forceinline__ void produce_paged_tiles(const fa2_params_t &p, const Sequence &seq,
                                                    int kv_head, int last_block, int tiles,
                                                    uint32_t k_smem, ProducerBars bars, int ptid)
{
    using Shape = PagedTileShape<Tr::kBlockN, Tr::kLoadChunks, 128>;
    const PagedRows<Elem> k_rows = paged_rows<Elem, false>(p, seq, kv_head);
    const PagedRows<Elem> v_rows = paged_rows<Elem, true>(p, seq, kv_head);
    const auto panel = [](int row, int chunk) { return panel_offset<Tr::kBlockN>(row, chunk); };
    const auto key_of = [last_block](int j) { return (last_block - j) * Tr::kBlockN; };
    const bool row_space = k_rows.page_rows > 0 && p.head_dim == Tr::kHeadDim;
    int page = fetch_tile_page<Shape>(k_rows, key_of(0), seq.seqlen_k - key_of(0), ptid);
    int rows[Shape::kPasses];
    if (row_space) tile_row_indices<Shape>(rows, k_rows, page, key_of(0), ptid);
    for (int j = 0; j < tiles; ++j) {
        const int key_first = key_of(j);
        const uint32_t k_tile = producer_k_tile<Tr>(k_smem, j);
        const uint32_t v_smem = producer_v_tile<Tr>(k_smem, j);
        if (j >= ProducerBars::kKStages)  // S of the tile before in this buffer read K
            mbarrier_wait(bars.k_free(j), ProducerBars::k_free_phase(j));
        if (row_space)
            copy_tile_rows<Shape, Tr::kBlockN>(k_tile, k_rows.head, k_rows.row_bytes, rows, ptid);
        else
            load_paged_tile<Shape>(k_tile, k_rows, page, key_first, p.head_dim, ptid, panel);
        cp_async_arrive_noinc(bars.k_full(j));
        if (j > 1) mbarrier_wait(bars.v_free(j), ((j >> 1) + 1) & 1);  // P V of tile j - 2
        if (row_space)
            copy_tile_rows<Shape, Tr::kBlockN>(v_smem, v_rows.head, v_rows.row_bytes, rows, ptid);
        else
            load_paged_tile<Shape>(v_smem, v_rows, page, key_first, p.head_dim, ptid, panel);
        cp_async_arrive_noinc(bars.v_full(j));
        if (j + 1 < tiles) {
            page = fetch_tile_page<Shape>(k_rows, key_of(j + 1), seq.seqlen_k - key_of(j + 1),
                                          ptid);
            if (row_space) tile_row_indices<Shape>(rows, k_rows, page, key_of(j + 1), ptid);
        }
    }
    cp_async_commit();
    cp_async_wait<0>();  // every copy landed before the warpgroup leaves
}

// A K or V tile of Tr by TMA (one thread): rows [row, row + kBlockN) of
// head kv_head, batch entry `outer`, as one box per 64-column panel into dst, the
// barrier armed with the tile's bytes (rows and columns outside the map arrive as zeros).
template <typename Tr>
__device__ __forceinline__ void copy_kv_tile(const CUtensorMap *map, uint32_t dst, uint32_t bar,
                                             int kv_head, int row, int outer)
{
    mbarrier_arrive_expect_tx(bar, Tr::kKVBytes);
#pragma unroll
    for (int panel = 0; panel < Tr::kHeadDim / 64; ++panel)
        tma_load_4d(dst + panel * Tr::kBlockN * 128, map, bar, panel * 64, kv_head, row, outer);
}

// A dense batch's tiles, issued by one producer thread by the
// TMA into the same buffers as produce_paged_tiles.
template <typename Tr>
__device__ __forceinline__ void produce_copied_tiles(const CUtensorMap *k_map,
                                                     const CUtensorMap *v_map, int kv_head,
                                                     int batch, int last_block, int tiles,
                                                     uint32_t k_smem, ProducerBars bars)
{
    for (int j = 0; j < tiles; ++j) {
        const int key_first = (last_block - j) * Tr::kBlockN;
        if (j >= ProducerBars::kKStages)  // S of the tile before in this buffer read K
            mbarrier_wait(bars.k_free(j), ProducerBars::k_free_phase(j));
        copy_kv_tile<Tr>(k_map, producer_k_tile<Tr>(k_smem, j), bars.k_full(j), kv_head,
                         key_first, batch);
        if (j > 1) mbarrier_wait(bars.v_free(j), ((j >> 1) + 1) & 1);  // P V of tile j - 2
        copy_kv_tile<Tr>(v_map, producer_v_tile<Tr>(k_smem, j), bars.v_full(j), kv_head,
                         key_first, batch);
    }
}

}  // namespace fa2
