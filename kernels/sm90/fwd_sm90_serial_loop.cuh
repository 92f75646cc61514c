// The Hopper forward's serial main loop (every case the overlapped loop does not take):
// per key tile, S = Q Kᵀ while the next K tile is copied into the other K buffer, then
// the softmax, then P V from the one V buffer.
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
#include "sm90/fwd_sm90_traits.cuh"
#include "sm90/wgmma.cuh"

namespace fa2 {

template <typename Tr, int kMode, int kScores, int kKv>
__device__ __forceinline__ void fwd_sm90_serial_loop(const FwdSm90Args &args,
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
    const uint32_t v_full = bars + 16;
    const auto k_full = [bars](int it) { return bars + 8 * (it & 1); };
    int n_block = n_block_end - 1;  // its K tile is in flight
    for (int it = 0; n_block >= n_block_min; ++it, --n_block) {
        const int key_first = n_block * Tr::kBlockN;
        cp_async_wait<0>();  // Q on the first pass (and K(n_block) by cp.async)
        if constexpr (kTma)
            mbarrier_wait(k_full(it), (it >> 1) & 1);  // K(n_block)
        fence_proxy_async();
        // ...visible to wgmma; every warp is done with V and K(other)
        __syncthreads();
        kv.template load<true>(v_smem, v_full, key_first);
        cp_async_commit();

        float s[1][Tr::kNTiles][4];
        // Step-0 descriptors, built here each pass (opaque: not hoisted and held
        // in registers); the k steps add constants.
        const uint64_t q_desc = desc_k_major<Tr::kBlockM>(opaque(q_smem), wg_row0, 0);
        const uint64_t k_desc =
            desc_k_major<Tr::kBlockN>(k_smem + (it & 1) * Tr::kKVBytes, 0, 0);
        issue_qk<Tr>(s, q_desc, k_desc);
        // The next K tile is copied while the tensor cores compute S (into the buffer
        // S does not read).
        const bool prefetch = n_block > n_block_min;
        if (prefetch) {
            kv.template load<false>(k_smem + ((it + 1) & 1) * Tr::kKVBytes, k_full(it + 1),
                                    key_first - Tr::kBlockN);
            cp_async_commit();
            kv.advance_pages(key_first - Tr::kBlockN);
        }
        wgmma_wait<0>();
        reg_fence(s[0]);

        if constexpr (kBoundedScores)
            apply_softcap(s, variants.tanh_scale);
        else if constexpr (kScored)
            apply_score_variants<Tr>(s, variants, row_first + warp * 16, key_first, lane);
        if (win.block_needs_mask(row_first, row_last, key_first,
                                 key_first + Tr::kBlockN - 1))
            apply_mask<Tr>(s, win, row_first + warp * 16, key_first, lane);
        if constexpr (kBoundedScores)
            softmax.update_bounded<Tr::kNTiles>(s, variants.score_log2,
                                                      bounded_offset_log2);
        else if constexpr (kScored)
            softmax.update(s, o, variants.score_log2);
        else
            softmax.update(s, o, p.scale_log2);
        uint32_t pa[Tr::kBlockN / 16][4];
        p_fragments<Tr>(pa, s);

        if constexpr (kTma) {
            mbarrier_wait(v_full, it & 1);  // V(n_block)
            // A packed sequence's or a last page's rows past the keys hold other
            // values, which P's zeros there must not meet as inf or NaN: zeroed (a
            // dense batch's are outside the tensor map, zeros already).
            if (kMode != kDenseSeq && key_first + Tr::kBlockN > seq.seqlen_k) {
                zero_tile_rows<Tr::kBlockN, Tr::kHeadDim / 64>(
                    v_smem, seq.seqlen_k - key_first, tid, Tr::kThreads);
                fence_proxy_async();
                __syncthreads();
            }
        } else {
            if (prefetch)
                cp_async_wait<1>();  // V(n_block); K(n_block - 1) may still fly
            else
                cp_async_wait<0>();
            fence_proxy_async();
            __syncthreads();
        }
        wgmma_fence();
        issue_pv_products<Tr>(o, pa, desc_mn_major<Tr::kBlockN>(opaque(v_smem), 0));
        wgmma_commit();
        wgmma_wait<0>();
        reg_fence(o[0]);
    }
#endif
}

}  // namespace fa2
