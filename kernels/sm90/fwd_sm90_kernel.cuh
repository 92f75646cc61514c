// The Hopper forward kernel (sm_90a): one thread block = Br query rows of one
// (batch, head), one warpgroup per 64 rows. The same algorithm as fwd_kernel.cuh,
// with the two GEMMs on wgmma: S = Q Kᵀ with both operands in shared memory (K-major),
// O += P V with P in registers and V read MN-major. Tiles sit in the 128B-swizzled
// panel layout of wgmma.cuh; K is double buffered, V single.
#pragma once

#include <stdint.h>

#include "common/params.h"
#include "common/epilogue.cuh"
#include "common/mask.cuh"
#include "common/paged_tile.cuh"
#include "common/score_variants.cuh"
#include "common/ptx.cuh"
#include "common/seqinfo.cuh"
#include "common/softmax.cuh"
#include "common/varlen_check.cuh"
#include "common/warp_gemm.cuh"
#include "sm90/fwd_sm90_tiles.h"
#include "sm90/wgmma.cuh"

namespace fa2 {

template <int kHeadDim>
struct FwdSm90Tile;

#define FA2_FWD_SM90_TILE_SPEC(d, wg, n)            \
    template <>                                     \
    struct FwdSm90Tile<d> {                         \
        static constexpr int kWarpgroups = wg;      \
        static constexpr int kBlockN = n;           \
    };
FA2_FWD_SM90_TILES(FA2_FWD_SM90_TILE_SPEC)
#undef FA2_FWD_SM90_TILE_SPEC

template <typename Elem_, int kHeadDim_>
struct FwdSm90Traits {
    using Elem = Elem_;
    static constexpr int kHeadDim = kHeadDim_;
    static constexpr int kWarpgroups = FwdSm90Tile<kHeadDim>::kWarpgroups;
    static constexpr int kBlockM = 64 * kWarpgroups;
    static constexpr int kBlockN = FwdSm90Tile<kHeadDim>::kBlockN;
    static constexpr int kThreads = 128 * kWarpgroups;
    // apply_mask's view: each warp owns one 16-row tile of a warpgroup's 64 rows.
    static constexpr int kMTiles = 1;
    static constexpr int kNTiles = kBlockN / 8;
    static constexpr int kDTiles = kHeadDim / 8;
    static constexpr int kLoadChunks = kHeadDim / 8;
    static constexpr int kQBytes = kBlockM * kHeadDim * 2;
    static constexpr int kKVBytes = kBlockN * kHeadDim * 2;
    static constexpr int kSmemBytes = kQBytes + 3 * kKVBytes + 1024;

    static_assert(kHeadDim % 64 == 0, "whole 128-byte panels");
    static_assert(kBlockN % 16 == 0 && kBlockN <= 256, "wgmma n and k16 steps");
};

// kMode: kDenseSeq, kPackedSeq (p.cu_seqlens_q set) or kPagedSeq (and p.page_table).
// kScored: softcap or ALiBi on (common/score_variants.cuh); sinks alone run the plain
// instance, which adds the sink at the end.
template <typename Tr, int kMode, bool kScored>
__global__ void __launch_bounds__(Tr::kThreads, 1) fwd_sm90_kernel(const fa2_params_t p)
{
#if defined(FA2_SM90A)
    using Elem = typename Tr::Elem;
    extern __shared__ __align__(1024) uint8_t smem[];

    const int tid = threadIdx.x;
    const int warp = tid / 32;
    const int lane = tid % 32;
    const int wg_row0 = (warp / 4) * 64;  // this warpgroup's first row in the tile

    const auto [seq, head, kv_head, row_first, row_last, n_block_min, n_block_end, win] =
        query_tile<Tr::kBlockM, Tr::kBlockN, true, kMode>(p);

    const uint32_t q_smem = (smem_addr(smem) + 1023u) & ~1023u;
    const uint32_t k_smem = q_smem + Tr::kQBytes;  // two buffers
    const uint32_t v_smem = k_smem + 2 * Tr::kKVBytes;
    // Paged: this lane's page ids for the next K tile and for the V tile, a tile ahead.
    using PagedShape = PagedTileShape<Tr::kBlockN, Tr::kLoadChunks, Tr::kThreads>;
    [[maybe_unused]] int k_page = -1, v_page = -1;
    const auto panel = [](int row, int chunk) { return panel_offset<Tr::kBlockN>(row, chunk); };
    auto fetch_page = [&, seq = seq, kv_head = kv_head](int key_first) {
        return fetch_tile_page<PagedShape>(paged_rows<Elem, false>(p, seq, kv_head), key_first,
                                           seq.seqlen_k - key_first, tid);
    };
    auto load_k = [&, seq = seq, kv_head = kv_head](uint32_t dst, int key_first) {
        if constexpr (kMode == kPagedSeq)
            load_paged_tile<PagedShape>(dst, paged_rows<Elem, false>(p, seq, kv_head), k_page,
                                        key_first, p.head_dim, tid, panel);
        else
            load_panels<Elem, Tr::kBlockN, Tr::kLoadChunks, Tr::kThreads>(
                dst, k_row<Elem>(p, seq, kv_head, key_first), p.k_seq_stride,
                seq.seqlen_k - key_first, p.head_dim, tid);
    };
    auto load_v = [&, seq = seq, kv_head = kv_head](uint32_t dst, int key_first) {
        if constexpr (kMode == kPagedSeq)
            load_paged_tile<PagedShape>(dst, paged_rows<Elem, true>(p, seq, kv_head), v_page,
                                        key_first, p.head_dim, tid, panel);
        else
            load_panels<Elem, Tr::kBlockN, Tr::kLoadChunks, Tr::kThreads>(
                dst, v_row<Elem>(p, seq, kv_head, key_first), p.v_seq_stride,
                seq.seqlen_k - key_first, p.head_dim, tid);
    };
    // After K(key_first)'s copies: V(key_first) takes its page, the next K tile's fetched.
    auto advance_pages = [&, keys_min = n_block_min * Tr::kBlockN](int key_first) {
        if constexpr (kMode == kPagedSeq) {
            v_page = k_page;
            if (key_first - Tr::kBlockN >= keys_min) k_page = fetch_page(key_first - Tr::kBlockN);
        }
    };

    float o[1][Tr::kDTiles][4];
    zero(o);
    OnlineSoftmax<1> softmax;
    softmax.init();
    [[maybe_unused]] ScoreVariants variants{};
    if constexpr (kScored) variants = score_variants(p, head, seq.seqlen_q, seq.seqlen_k);

    if (n_block_end > n_block_min) {
        load_panels<Elem, Tr::kBlockM, Tr::kLoadChunks, Tr::kThreads>(
            q_smem, q_row<Elem>(p, seq, head, row_first), p.q_seq_stride,
            seq.seqlen_q - row_first, p.head_dim, tid);
        cp_async_commit();
        int n_block = n_block_end - 1;
        if constexpr (kMode == kPagedSeq) k_page = fetch_page(n_block * Tr::kBlockN);
        load_k(k_smem, n_block * Tr::kBlockN);
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
            fence_proxy_async();
            __syncthreads();     // ...visible to wgmma; every warp is done with V and K(other)
            load_v(v_smem, key_first);
            cp_async_commit();

            float s[1][Tr::kNTiles][4];
            // Step-0 descriptors, built here each pass (opaque: not hoisted and held
            // in registers); the k steps add constants.
            const uint64_t q_desc = desc_k_major<Tr::kBlockM>(opaque(q_smem), wg_row0, 0);
            const uint64_t k_desc =
                desc_k_major<Tr::kBlockN>(k_smem + (it & 1) * Tr::kKVBytes, 0, 0);
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < Tr::kHeadDim / 16; ++kk)
                wgmma_ss<Elem, 0, 0>(s[0], q_desc + k_major_step<Tr::kBlockM>(kk),
                                     k_desc + k_major_step<Tr::kBlockN>(kk), kk > 0);
            wgmma_commit();
            // The next K tile is copied while the tensor cores compute S (into the buffer
            // S does not read).
            const bool prefetch = n_block > n_block_min;
            if (prefetch) {
                load_k(k_smem + ((it + 1) & 1) * Tr::kKVBytes, key_first - Tr::kBlockN);
                cp_async_commit();
                advance_pages(key_first - Tr::kBlockN);
            }
            wgmma_wait<0>();
            reg_fence(s[0]);

            if constexpr (kScored)
                apply_score_variants<Tr>(s, variants, row_first + warp * 16, key_first, lane);
            if (win.block_needs_mask(row_first, row_last, key_first, key_first + Tr::kBlockN - 1))
                apply_mask<Tr>(s, win, row_first + warp * 16, key_first, lane);
            if constexpr (kScored)
                softmax.update(s, o, variants.score_log2);
            else
                softmax.update(s, o, p.scale_log2);
            uint32_t pa[Tr::kBlockN / 16][4];
#pragma unroll
            for (int kk = 0; kk < Tr::kBlockN / 16; ++kk) a_fragment<Elem>(pa[kk], s[0], kk);

            if (prefetch)
                cp_async_wait<1>();  // V(n_block); K(n_block - 1) may still fly
            else
                cp_async_wait<0>();
            fence_proxy_async();
            __syncthreads();
            wgmma_fence();
            const uint64_t v_desc = desc_mn_major<Tr::kBlockN>(opaque(v_smem), 0);
#pragma unroll
            for (int kk = 0; kk < Tr::kBlockN / 16; ++kk)
                wgmma_rs<Elem, 1>(o[0], pa[kk], v_desc + mn_major_step(kk), 1);
            wgmma_commit();
            wgmma_wait<0>();
            reg_fence(o[0]);
        }
    } else if constexpr (kMode != kDenseSeq) {
        if (varlen_verdict<kMode, Tr::kBlockM, Tr::kThreads>(p, seq, head, tid))
            return;  // no key to visit; a failed sequence writes no output
    }

    float inv_sum[1][2], lse[1][2];
    if (kScored || p.sinks)  // block-uniform, once per tile (sink_log2: -inf without sinks)
        softmax.finish_with_sink(kScored ? variants.score_log2 : p.scale_log2,
                                 sink_log2(p, head), inv_sum, lse);
    else
        softmax.finish(p.scale_log2, inv_sum, lse);

    const int warp_row0 = row_first + warp * 16;
    store_o_lse<Elem>(p, seq, head, warp_row0, o, inv_sum, lse, lane);
#endif
}

}  // namespace fa2
