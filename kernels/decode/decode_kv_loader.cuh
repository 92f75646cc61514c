// The decode kernel's K/V loader: a warp copies one tile of kKeys keys (K and V) into a
// pipeline stage with cp.async, from a dense or packed batch's rows or through a
// paged cache's page table. A paged tile goes in parts of kPagedRows keys
// (paged_tile.cuh: at most one row per lane), whose page ids are fetched a tile ahead.
#pragma once

#include "common/paged_tile.cuh"
#include "common/params.h"
#include "common/ptx.cuh"
#include "common/seqinfo.cuh"
#include "decode/decode_traits.cuh"

namespace fa2 {

template <typename Tr, int kMode>
struct DecodeKvLoader {
    using Elem = typename Tr::Elem;
    using PagedShape = PagedTileShape<Tr::kPagedRows, Tr::kLoadChunks, 32>;
    struct Pages {
        int id[Tr::kPagedParts];  // this lane's page id of each part
    };

    const fa2_params_t &p;
    const Sequence &seq;
    int kv_head, lo, hi, lane;  // keys [lo, hi) of the sequence are read

    // Tile t's page ids (paged; -1 otherwise).
    __device__ __forceinline__ Pages fetch_pages(int t) const
    {
        Pages pages;
#pragma unroll
        for (int part = 0; part < Tr::kPagedParts; ++part) {
            const int key_first = lo + t * Tr::kKeys + part * Tr::kPagedRows;
            if constexpr (kMode == kPagedSeq)
                pages.id[part] = fetch_tile_page<PagedShape>(
                    paged_rows<Elem, false>(p, seq, kv_head), key_first, hi - key_first, lane);
            else
                pages.id[part] = -1;
        }
        return pages;
    }

    // Tile t (keys lo + t * kKeys ..) to k_dst and v_dst (shared addresses); keys past
    // hi are zero-filled.
    __device__ __forceinline__ void load(int t, uint32_t k_dst, uint32_t v_dst,
                                         const Pages &pages) const
    {
        const int key_first = lo + t * Tr::kKeys;
        if constexpr (kMode == kPagedSeq) {
#pragma unroll
            for (int part = 0; part < Tr::kPagedParts; ++part) {
                const int row0 = part * Tr::kPagedRows;
                const auto swz = [row0](int row, int chunk) {
                    return swizzled<Tr::kRowBytes>(row0 + row, chunk);
                };
                load_paged_tile<PagedShape>(k_dst, paged_rows<Elem, false>(p, seq, kv_head),
                                            pages.id[part], key_first + row0, p.head_dim, lane,
                                            swz);
                load_paged_tile<PagedShape>(v_dst, paged_rows<Elem, true>(p, seq, kv_head),
                                            pages.id[part], key_first + row0, p.head_dim, lane,
                                            swz);
            }
        } else {
            load_tile<Elem, Tr::kKeys, Tr::kLoadChunks, Tr::kRowBytes, 32>(
                k_dst, k_row<Elem>(p, seq, kv_head, key_first), p.k_seq_stride, hi - key_first,
                p.head_dim, lane);
            load_tile<Elem, Tr::kKeys, Tr::kLoadChunks, Tr::kRowBytes, 32>(
                v_dst, v_row<Elem>(p, seq, kv_head, key_first), p.v_seq_stride, hi - key_first,
                p.head_dim, lane);
        }
    }
};

}  // namespace fa2
