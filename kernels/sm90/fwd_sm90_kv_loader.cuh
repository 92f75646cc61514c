// The Hopper forward's K/V loader for the math warpgroups (the producer warpgroup has its
// own, sm90/fwd_sm90_producer.cuh): a dense or packed batch's tiles by TMA, issued by
// thread 0; a paged cache's by TMA boxes (warp 0's lanes, one box each) or by cp.async
// (every math thread). Paging lives here: the page ids of the next K tile and of the V
// tile are looked up a tile ahead.
#pragma once

#include <stdint.h>

#include "common/paged_tile.cuh"
#include "common/params.h"
#include "common/ptx.cuh"
#include "common/seqinfo.cuh"
#include "sm90/fwd_sm90_traits.cuh"
#include "sm90/tma.cuh"
#include "sm90/wgmma.cuh"

namespace fa2 {

template <typename Tr, int kMode, int kKv>
struct FwdSm90KvLoader {
    using Elem = typename Tr::Elem;
    using PagedShape = PagedTileShape<Tr::kBlockN, Tr::kLoadChunks, Tr::kThreads>;
    static constexpr bool kTma = kKv == kKvByTma;

    const FwdSm90Args &args;
    Sequence seq;
    int kv_head, tid, warp, lane;
    int keys_min;  // the first key the block visits
    // Paged: this lane's page ids for the next K tile and for the V tile, a tile ahead.
    int v_page = -1, k_page = -1;

    // The page of this lane's share of the tile at key_first (by TMA: warp 0's lane j
    // holds the page id of the tile's j-th box).
    __device__ __forceinline__ int fetch_page(int key_first) const
    {
        const PagedRows<Elem> rows = paged_rows<Elem, false>(args.p, seq, kv_head);
        if constexpr (kTma) {
            const int key = key_first + lane * args.page_box_rows;
            return warp == 0 && key < min(seq.seqlen_k, key_first + Tr::kBlockN)
                       ? rows.page_of(key)
                       : -1;
        }
        return fetch_tile_page<PagedShape>(rows, key_first, seq.seqlen_k - key_first, tid);
    }

    // A K or V tile by TMA, issued by thread 0: its panels as boxes.
    __device__ __forceinline__ void copy_tile(const CUtensorMap *map, uint32_t dst, uint32_t bar,
                                              int key_first) const
    {
        if (tid != 0) return;
        copy_kv_tile<Tr>(map, dst, bar, kv_head,
                         kMode == kDenseSeq ? key_first : seq.k_start + key_first,
                         kMode == kDenseSeq ? seq.batch : 0);
    }

    // A paged tile by TMA: warp 0's lane j copies box j from page `page` (-1: past the
    // keys or out of range, outside the tensor map: zeros, no read).
    __device__ __forceinline__ void copy_paged_tile(const CUtensorMap *map, uint32_t dst,
                                                    uint32_t bar, int key_first, int page) const
    {
        const fa2_params_t &p = args.p;
        if (warp != 0) return;
        if (lane == 0) mbarrier_arrive_expect_tx(bar, Tr::kKVBytes);
        __syncwarp();  // the bytes are expected before any box can complete
        const int box_rows = args.page_box_rows;
        if (lane * box_rows >= Tr::kBlockN) return;
        const int key = key_first + lane * box_rows;
        const int in_page =
            key - paged_rows<Elem, false>(p, seq, kv_head).page_index(key) * p.page_size;
#pragma unroll
        for (int panel = 0; panel < Tr::kHeadDim / 64; ++panel)
            tma_load_4d(dst + panel * Tr::kBlockN * 128 + lane * box_rows * 128, map, bar,
                        panel * 64, kv_head, in_page, page);
    }

    // K or V (kV) of the tile at key_first into dst; `bar` counts a TMA copy's bytes.
    template <bool kV>
    __device__ __forceinline__ void load(uint32_t dst, uint32_t bar, int key_first) const
    {
        const CUtensorMap *map = kV ? &args.v_map : &args.k_map;
        if constexpr (kMode != kPagedSeq)
            copy_tile(map, dst, bar, key_first);
        else if constexpr (kTma)
            copy_paged_tile(map, dst, bar, key_first, kV ? v_page : k_page);
        else
            load_paged_tile<PagedShape>(
                dst, paged_rows<Elem, kV>(args.p, seq, kv_head), kV ? v_page : k_page,
                key_first, args.p.head_dim, tid,
                [](int row, int chunk) { return panel_offset<Tr::kBlockN>(row, chunk); });
    }

    // After K(key_first)'s copies: V(key_first) takes its page, the next K tile's fetched.
    __device__ __forceinline__ void advance_pages(int key_first)
    {
        if constexpr (kMode == kPagedSeq) {
            v_page = k_page;
            if (key_first - Tr::kBlockN >= keys_min) k_page = fetch_page(key_first - Tr::kBlockN);
        }
    }
};

}  // namespace fa2
