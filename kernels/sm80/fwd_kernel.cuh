// The fused forward kernel (sm_80 path): one thread block = Br query rows of one
// (batch, head). Q stays in shared memory; K/V tiles stream through it (K double
// buffered, V single), S = Q K^T and O += P V run on mma.sync m16n8k16 with fp32
// accumulators, P never leaves registers, and O is divided by the row sum once at
// the end.
#pragma once

#include <stdint.h>

#include "common/epilogue.cuh"
#include "common/mask.cuh"
#include "common/paged_tile.cuh"
#include "common/score_variants.cuh"
#include "common/params.h"
#include "sm80/fwd_traits.cuh"
#include "common/ptx.cuh"
#include "common/seqinfo.cuh"
#include "common/softmax.cuh"
#include "common/varlen_check.cuh"
#include "common/warp_gemm.cuh"

namespace fa2 {

// Who looks up which rows of a paged K/V tile (common/paged_tile.cuh).
template <typename Tr>
using FwdPagedShape = PagedTileShape<Tr::kBlockN, Tr::kLoadChunks, Tr::kThreads>;

// Keys key_first.. of K (kV = false) or V into a tile: rows past the sequence's keys
// zero-filled; a paged cache's rows each from its page (this lane's page id: lane_page).
template <typename Tr, int kMode, bool kV>
__device__ __forceinline__ void load_kv(uint32_t smem, const fa2_params_t &p,
                                        const Sequence &seq, int kv_head, int key_first,
                                        int lane_page, int tid)
{
    using Elem = typename Tr::Elem;
    if constexpr (kMode == kPagedSeq) {
        load_paged_tile<FwdPagedShape<Tr>>(
            smem, paged_rows<Elem, kV>(p, seq, kv_head), lane_page, key_first, p.head_dim, tid,
            [](int row, int chunk) { return swizzled<Tr::kRowBytes>(row, chunk); });
    } else {
        const Elem *rows =
            kV ? v_row<Elem>(p, seq, kv_head, key_first) : k_row<Elem>(p, seq, kv_head, key_first);
        load_tile<Elem, Tr::kBlockN, Tr::kLoadChunks, Tr::kRowBytes, Tr::kThreads>(
            smem, rows, kV ? p.v_seq_stride : p.k_seq_stride, seq.seqlen_k - key_first,
            p.head_dim, tid);
    }
}

// Paged: this lane's page id for the K/V tile at key_first.
template <typename Tr>
__device__ __forceinline__ int fetch_kv_page(const fa2_params_t &p, const Sequence &seq,
                                             int kv_head, int key_first, int tid)
{
    return fetch_tile_page<FwdPagedShape<Tr>>(paged_rows<typename Tr::Elem, false>(p, seq, kv_head),
                                              key_first, seq.seqlen_k - key_first, tid);
}

// kMode: kDenseSeq, kPackedSeq (p.cu_seqlens_q set) or kPagedSeq (and p.page_table).
// kScored: softcap or ALiBi on (common/score_variants.cuh); sinks alone run the plain
// instance, which adds the sink at the end.
template <typename Tr, int kMode, bool kScored>
__global__ void __launch_bounds__(Tr::kThreads, 1) fwd_kernel(const fa2_params_t p)
{
    using Elem = typename Tr::Elem;
    extern __shared__ __align__(128) uint8_t smem[];

    const int tid = threadIdx.x;
    const int warp = tid / 32;
    const int lane = tid % 32;

    const auto [seq, head, kv_head, row_first, row_last, n_block_min, n_block_end, win] =
        query_tile<Tr::kBlockM, Tr::kBlockN, true, kMode>(p);

    const uint32_t q_smem = smem_addr(smem);
    const uint32_t k_smem[2] = {q_smem + Tr::kQBytes, q_smem + Tr::kQBytes + Tr::kKVBytes};
    const uint32_t v_smem = q_smem + Tr::kQBytes + 2 * Tr::kKVBytes;

    float o[Tr::kMTiles][Tr::kDTiles][4];
    zero(o);
    OnlineSoftmax<Tr::kMTiles> softmax;
    softmax.init();
    [[maybe_unused]] ScoreVariants variants{};
    if constexpr (kScored) variants = score_variants(p, seq.batch, head, seq.seqlen_q, seq.seqlen_k);

    if (n_block_end > n_block_min) {
        load_tile<Elem, Tr::kBlockM, Tr::kLoadChunks, Tr::kRowBytes, Tr::kThreads>(
            q_smem, q_row<Elem>(p, seq, head, row_first), p.q_seq_stride,
            seq.seqlen_q - row_first, p.head_dim, tid);
        cp_async_commit();
        int n_block = n_block_end - 1;
        // Paged: this lane's page ids for the next K tile and for the V tile, a tile ahead.
        [[maybe_unused]] int k_page = -1, v_page = -1;
        // After K(key_first)'s copies: V(key_first) takes its page, the next K tile's fetched.
        auto advance_pages = [&, seq = seq, kv_head = kv_head,
                              keys_min = n_block_min * Tr::kBlockN](int key_first) {
            if constexpr (kMode == kPagedSeq) {
                v_page = k_page;
                if (key_first - Tr::kBlockN >= keys_min)
                    k_page = fetch_kv_page<Tr>(p, seq, kv_head, key_first - Tr::kBlockN, tid);
            }
        };
        if constexpr (kMode == kPagedSeq)
            k_page = fetch_kv_page<Tr>(p, seq, kv_head, n_block * Tr::kBlockN, tid);
        load_kv<Tr, kMode, false>(k_smem[0], p, seq, kv_head, n_block * Tr::kBlockN, k_page,
                                  tid);
        cp_async_commit();
        advance_pages(n_block * Tr::kBlockN);
        // A packed batch's checks: a failed sequence writes nothing (its first copies,
        // already issued, read only in-range rows).
        if constexpr (kMode != kDenseSeq) {
            if (varlen_verdict<kMode, Tr::kBlockM, Tr::kThreads>(p, seq, head, tid)) {
                cp_async_wait<0>();
                return;
            }
        }

        for (int it = 0; n_block >= n_block_min; ++it, --n_block) {
            const int key_first = n_block * Tr::kBlockN;
            cp_async_wait<0>();  // K(n_block), and Q on the first pass
            __syncthreads();     // ...visible to all; every warp is done with V and K(other)
            load_kv<Tr, kMode, true>(v_smem, p, seq, kv_head, key_first, v_page, tid);
            cp_async_commit();
            const bool prefetch = n_block > n_block_min;
            if (prefetch) {
                const int next_first = key_first - Tr::kBlockN;
                load_kv<Tr, kMode, false>(k_smem[(it + 1) & 1], p, seq, kv_head, next_first,
                                          k_page, tid);
                cp_async_commit();
                advance_pages(next_first);
            }

            float s[Tr::kMTiles][Tr::kNTiles][4];
            zero(s);
            gemm_abt<Elem, Tr::kRowBytes, Tr::kMTiles, Tr::kNTiles, Tr::kHeadDim / 16>(
                s, q_smem + warp * Tr::kRowsPerWarp * Tr::kRowBytes, k_smem[it & 1], lane);
            if constexpr (kScored)
                apply_score_variants<Tr>(s, variants, row_first + warp * Tr::kRowsPerWarp,
                                         key_first, lane);
            if (win.block_needs_mask(row_first, row_last, key_first, key_first + Tr::kBlockN - 1))
                apply_mask<Tr>(s, win, row_first + warp * Tr::kRowsPerWarp, key_first, lane);
            if constexpr (kScored)
                softmax.update(s, o, variants.score_log2);
            else
                softmax.update(s, o, p.scale_log2);

            if (prefetch)
                cp_async_wait<1>();  // V(n_block); K(n_block - 1) may still fly
            else
                cp_async_wait<0>();
            __syncthreads();
            gemm_pb<Elem, Tr::kRowBytes, Tr::kMTiles, Tr::kDTiles, Tr::kBlockN / 16>(o, s, v_smem,
                                                                                 lane);
        }
    } else if constexpr (kMode != kDenseSeq) {
        if (varlen_verdict<kMode, Tr::kBlockM, Tr::kThreads>(p, seq, head, tid))
            return;  // no key to visit; a failed sequence writes no output
    }

    float inv_sum[Tr::kMTiles][2], lse[Tr::kMTiles][2];
    if (kScored || p.sinks)  // block-uniform, once per tile (sink_log2: -inf without sinks)
        softmax.finish_with_sink(kScored ? variants.score_log2 : p.scale_log2,
                                 sink_log2(p, head), inv_sum, lse);
    else
        softmax.finish(p.scale_log2, inv_sum, lse);

    const int warp_row0 = row_first + warp * Tr::kRowsPerWarp;
    store_o_lse<Elem>(p, seq, head, warp_row0, o, inv_sum, lse, lane);
}

}  // namespace fa2
