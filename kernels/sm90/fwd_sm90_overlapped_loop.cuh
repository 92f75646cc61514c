// The Hopper forward's overlapped main loop: tile j's S = Q Kᵀ runs while tile j - 1's
// P V does, from one K buffer and two V buffers (the shared memory of two K and one V)
// filled by the math warpgroups' TMA copies, or from the producer warpgroup's stages;
// with a producer, the two math warpgroups take turns at issuing their products.
#pragma once

#include <stdint.h>

#include "common/mask.cuh"
#include "common/params.h"
#include "common/ptx.cuh"
#include "common/score_variants.cuh"
#include "common/softmax.cuh"
#include "common/warp_gemm.cuh"
#include "sm90/fwd_sm90_kv_loader.cuh"
#include "sm90/fwd_sm90_producer.cuh"
#include "sm90/fwd_sm90_products.cuh"
#include "sm90/fwd_sm90_state.cuh"
#include "sm90/fwd_sm90_tile_softmax.cuh"
#include "sm90/fwd_sm90_traits.cuh"
#include "sm90/wgmma.cuh"

namespace fa2 {

template <typename Tr, int kMode, int kScores, int kKv>
__device__ __forceinline__ void fwd_sm90_overlapped_loop(const FwdSm90Args &args,
                                                         FwdSm90KvLoader<Tr, kMode, kKv> &kv,
                                                         const QueryTile &tile,
                                                         const FwdSm90Place &at,
                                                         FwdSm90Rows<Tr> &rows)
{
#if defined(FA2_SM90A)  // (the host and other architectures compile an empty body)
    using Elem = typename Tr::Elem;
    using Flags = FwdSm90Flags<Tr, kMode, kScores, kKv>;
    [[maybe_unused]] constexpr bool kTma = Flags::kTma, kProducer = Flags::kProducer,
                                    kScored = Flags::kScored,
                                    kBoundedScores = Flags::kBoundedScores,
                                    kProducerCpAsync = Flags::kProducerCpAsync,
                                    kPingpong = Flags::kPingpong, kLateTurn = Flags::kLateTurn,
                                    kLazyRescale = Flags::kLazyRescale,
                                    kSkipZeroTiles = Flags::kSkipZeroTiles;
    const fa2_params_t &p = args.p;
    [[maybe_unused]] const int tid = at.tid, warp = at.warp, lane = at.lane,
                               wg_row0 = at.wg_row0;
    [[maybe_unused]] const uint32_t q_smem = at.q_smem, k_smem = at.k_smem, v_smem = at.v_smem,
                                    bars = at.bars;
    const Sequence &seq = tile.seq;
    [[maybe_unused]] const int row_first = tile.row_first, row_last = tile.row_last,
                               n_block_min = tile.n_first, n_block_end = tile.n_end;
    const KeyWindow &win = tile.win;
    auto &o = rows.o;
    auto &softmax = rows.softmax;
    [[maybe_unused]] const ScoreVariants &variants = rows.variants;
    [[maybe_unused]] const float bounded_offset_log2 = rows.bounded_offset_log2;
    [[maybe_unused]] const int64_t diag_offset = rows.diag_offset;
    // Tile j's S = Q Kᵀ runs while tile j - 1's P V does: one K buffer, two V
    // buffers (the shared memory of two K and one V).
    const int tiles = n_block_end - n_block_min, last_block = n_block_end - 1;
    const int rows_first = row_first, rows_last = row_last, keys = seq.seqlen_k;
    const KeyWindow window = win;
    const auto key_of = [last_block](int j) { return (last_block - j) * Tr::kBlockN; };
    // Tile j's buffers and barriers: one K buffer, or the producer's K stages
    const auto k_tile = [k_smem](int j) {
        return kProducer ? producer_k_tile<Tr>(k_smem, j) : k_smem;
    };
    const auto v_tile = [k_smem](int j) {
        return kProducer ? producer_v_tile<Tr>(k_smem, j)
                         : k_smem + (1 + (j & 1)) * Tr::kKVBytes;
    };
    const auto v_bar = [bars](int j) {
        return kProducer ? ProducerBars{bars}.v_full(j) : bars + 8 + 8 * (j & 1);
    };
    const auto v_phase = [](int j) { return static_cast<uint32_t>((j >> 1) & 1); };
    // Tile j's K and V (paged: from the pages k_page holds, v_page for tile 0).
    const auto copy_k = [&](int j) {
        if constexpr (kMode == kPagedSeq)
            kv.copy_paged_tile(&args.k_map, k_smem, bars, key_of(j), kv.k_page);
        else
            kv.copy_tile(&args.k_map, k_smem, bars, key_of(j));
    };
    const auto copy_v = [&](int j) {
        if constexpr (kMode == kPagedSeq)
            kv.copy_paged_tile(&args.v_map, v_tile(j), v_bar(j), key_of(j),
                               j == 0 ? kv.v_page : kv.k_page);
        else
            kv.copy_tile(&args.v_map, v_tile(j), v_bar(j), key_of(j));
    };
    // Paged: after tile j - 1's copies, k_page takes tile j's pages (read a tile
    // before they are used).
    const auto fetch_pages = [&](int j) {
        if constexpr (kMode == kPagedSeq)
            if (j < tiles) kv.k_page = kv.fetch_page(key_of(j));
    };
    // Tile j's K landed (the producer's cp.async rows then need a proxy fence).
    const auto wait_k = [&](int j) {
        if constexpr (kProducer)
            mbarrier_wait(ProducerBars{bars}.k_full(j), ProducerBars::k_full_phase(j));
        else
            mbarrier_wait(bars, j & 1);
        if constexpr (kProducerCpAsync) fence_proxy_async();  // cp.async's rows, to wgmma
    };
    if constexpr (!kProducer) {
        copy_v(0);
        if (tiles > 1) copy_v(1);
    }

    const auto issue_s = [&](float (&s)[1][Tr::kNTiles][4], int j) {
        const uint64_t q_desc = desc_k_major<Tr::kBlockM>(opaque(q_smem), wg_row0, 0);
        const uint64_t k_desc = desc_k_major<Tr::kBlockN>(opaque(k_tile(j)), 0, 0);
        issue_qk<Tr>(s, q_desc, k_desc);
    };
    // Pingpong: warpgroup w issues its products on its turn (barrier 2 + w), then
    // hands the turn to the other (kLateTurn: later); warpgroup 1 hands warpgroup 0
    // the first.
    // (kSkipZeroTiles: as a shuffle's result, which the compiler sees as uniform in
    // the warp; else it serializes the wgmma after the skippable P V)
    [[maybe_unused]] const int math_wg =
        kSkipZeroTiles ? __shfl_sync(0xffffffffu, warp / 4, 0) : warp / 4;
    const auto take_turn = [&] {
        if constexpr (kPingpong) named_barrier_sync(2 + math_wg, Tr::kThreads);
    };
    const auto pass_turn = [&] {
        if constexpr (kPingpong) named_barrier_arrive(3 - math_wg, Tr::kThreads);
    };

    // P of tile j in s (fp32); O's rescale factors to alpha, applied once the
    // previous tile's P V is done, where the return is true (kLazyRescale: false
    // while every row of the warp keeps its offset).
    // late_turn: pass the turn once the variants and the mask are applied.
    // zero: every p of the warpgroup's tile underflows to 0 (kSkipZeroTiles), so
    // that its P V is skipped; this warp's s then holds no probabilities when
    // warp_zero is true.
    const auto probabilities = [&](float (&s)[1][Tr::kNTiles][4], int key_first,
                                   float (&alpha)[1][2], bool late_turn,
                                   bool &warp_zero, bool &zero) -> bool {
        warp_zero = zero = false;
        float bias[1][2] = {{0.f, 0.f}};
        const int side = apply_tile_scores<Tr, kScores>(s, variants, diag_offset, window,
                                                        rows_first, rows_last, key_first, warp,
                                                        lane, bias);
        if (kLateTurn && late_turn) pass_turn();
        return update_tile_softmax<Tr, kScores, kLazyRescale, kSkipZeroTiles>(
            softmax, s, kScored ? variants.score_log2 : p.scale_log2, bounded_offset_log2, bias,
            side, alpha, warp_zero, zero, math_wg);
    };
    uint32_t pa[Tr::kBlockN / 16][4];
    bool pv_zero = false;  // the last tile's P is 0 in the whole warpgroup
    // skip: only the waits and the commit (an empty group), P being 0
    const auto issue_pv = [&](int j, bool skip) {
        mbarrier_wait(v_bar(j), v_phase(j));
        if constexpr (kProducerCpAsync) fence_proxy_async();  // cp.async's rows, to wgmma
        // A packed sequence's or a last page's V rows past the keys (tile 0's) hold
        // other values, which P's zeros there must not meet as inf or NaN: zeroed
        // (the producer's copies zero-fill them).
        if (!kProducer && kMode != kDenseSeq && j == 0 &&
            key_of(0) + Tr::kBlockN > keys) {
            zero_tile_rows<Tr::kBlockN, Tr::kHeadDim / 64>(v_tile(0), keys - key_of(0),
                                                           tid, Tr::kThreads);
            fence_proxy_async();
            __syncthreads();
        }
        wgmma_fence();
        if (!kSkipZeroTiles || !skip) {
            issue_pv_products<Tr>(o, pa, desc_mn_major<Tr::kBlockN>(opaque(v_tile(j)), 0));
        }
        wgmma_commit();
    };
    // tile j's P as the A operand: zeros where the warp's exponentials were skipped
    const auto p_operand = [&](float (&s)[1][Tr::kNTiles][4], bool warp_zero) {
        if (kSkipZeroTiles && warp_zero) {
#pragma unroll
            for (int kk = 0; kk < Tr::kBlockN / 16; ++kk)
                pa[kk][0] = pa[kk][1] = pa[kk][2] = pa[kk][3] = 0u;
        } else {
            p_fragments<Tr>(pa, s);
        }
    };

    cp_async_wait<0>();  // Q
    wait_k(0);
    fence_proxy_async();
    if constexpr (kProducer)
        named_barrier_sync(1, Tr::kThreads);  // every math thread's Q rows landed
    else
        __syncthreads();
    if (kPingpong && math_wg == 1) named_barrier_arrive(2, Tr::kThreads);
    {
        float s[1][Tr::kNTiles][4], alpha[1][2];
        take_turn();
        issue_s(s, 0);
        pass_turn();
        wgmma_wait<0>();
        reg_fence(s[0]);
        if constexpr (kProducer) {
            mbarrier_arrive(ProducerBars{bars}.k_free(0));  // S read K
        } else {
            __syncthreads();  // every warp's S read K: the buffer takes tile 1's
            if (tiles > 1) copy_k(1);
            fetch_pages(2);
        }
        bool warp_zero;
        (void)probabilities(s, key_of(0), alpha, false, warp_zero, pv_zero);
        p_operand(s, warp_zero);  // (O is 0: no rescale)
    }
    for (int j = 1; j < tiles; ++j) {
        float s[1][Tr::kNTiles][4], alpha[1][2];
        wait_k(j);
        take_turn();
        issue_s(s, j);
        issue_pv(j - 1, pv_zero);
        if constexpr (!kLateTurn) pass_turn();
        wgmma_wait<1>();  // S; the P V may still run
        reg_fence(s[0]);
        if constexpr (kProducer) {
            mbarrier_arrive(ProducerBars{bars}.k_free(j));  // S read K
        } else {
            __syncthreads();  // every warp's S read K
            if (j + 1 < tiles) copy_k(j + 1);
        }
        bool warp_zero;
        const bool rescale = probabilities(s, key_of(j), alpha, true, warp_zero, pv_zero);
        wgmma_wait<0>();  // tile j - 1's P V
        reg_fence(o[0]);
        if (!kBoundedScores && rescale) softmax.rescale(o, alpha);
        if constexpr (kProducer) {
            mbarrier_arrive(ProducerBars{bars}.v_free(j - 1));  // P V read V(j - 1)
        } else {
            // every warp's P V read V(j - 1): its buffer takes tile j + 1's
            __syncthreads();
            if (j + 1 < tiles) copy_v(j + 1);
            fetch_pages(j + 2);
        }
        p_operand(s, warp_zero);
    }
    take_turn();
    issue_pv(tiles - 1, pv_zero);
    if (math_wg == 0) pass_turn();  // (warpgroup 1's last turn is not taken)
    wgmma_wait<0>();
    reg_fence(o[0]);
#endif
}

}  // namespace fa2
