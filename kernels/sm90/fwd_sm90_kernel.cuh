// The Hopper forward kernel (sm_90a): one thread block = Br query rows of one
// (batch, head), one warpgroup per 64 rows. The same algorithm as fwd_kernel.cuh,
// with the two GEMMs on wgmma: S = Q Kᵀ with both operands in shared memory (K-major),
// O += P V with P in registers and V read MN-major. Tiles sit in the 128B-swizzled
// panel layout of wgmma.cuh; K is double buffered, V single, or (the overlapped loop,
// same memory) one K buffer and two V.
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
#include "sm90/fwd_sm90_producer.cuh"
#include "sm90/fwd_sm90_kv_loader.cuh"
#include "sm90/fwd_sm90_traits.cuh"
#include "sm90/fwd_sm90_tiles.h"
#include "sm90/tma.cuh"
#include "sm90/wgmma.cuh"

namespace fa2 {

// kMode: kDenseSeq, kPackedSeq (p.cu_seqlens_q set) or kPagedSeq (and p.page_table).
// kScores (ScoreKind, common/score_variants.cuh): kPlainScores without softcap or ALiBi
// (sinks alone run the plain instance, which adds the sink at the end); kBoundedSoftcap
// for a softcap that bounds the scores (FA2_SCORES_BOUNDED_SOFTCAP: no running maximum);
// kGeneralScores for the other softcaps and ALiBi.
// kKv (KvCopy): by TMA, thread 0 issues a tile's boxes, or warp 0's lanes a
// paged tile's, one page each (an mbarrier counts the bytes); by cp.async (paged only:
// args.page_box_rows = 0), every math thread copies; by the producer warpgroup (paged;
// the overlapped loop only, so no softcap unless it bounds the scores). Three paged
// instances, so that none carries another's code.
template <typename Tr, int kMode, int kScores, int kKv>
__global__ void __launch_bounds__(FwdSm90Launch<Tr, kKv>::kThreads, 1)
    fwd_sm90_kernel(const __grid_constant__ FwdSm90Args args)
{
#if defined(FA2_SM90A)
    constexpr bool kTma = kKv == kKvByTma, kProducer = kKv == kKvByProducer;
    constexpr bool kScored = kScores != kPlainScores, kBoundedScores = kScores == kBoundedSoftcap;
    // The producer's copies: a paged cache's by cp.async, a dense batch's by TMA
    constexpr bool kProducerCpAsync = kProducer && kMode == kPagedSeq;
    // The math warpgroups take turns at issuing their products
    constexpr bool kPingpong = kProducer;
    // ...and the bounded softcap's passes the turn once its tanh is applied, the others'
    // once both products are issued
    constexpr bool kLateTurn = kPingpong && kBoundedScores;
    // The overlapped loop skips O's rescale while its rows keep their offsets: in the
    // scored instances (in the plain ones the gain was not measured)
    constexpr bool kLazyRescale = kScored;
    // The general instance skips the P V of tiles whose every p underflows to 0 (ALiBi's
    // far from the diagonal), in the overlapped loop with its lazy rescale.
    constexpr bool kSkipZeroTiles = kScored && !kBoundedScores && kLazyRescale;
    static_assert(kTma || kMode == kPagedSeq || (kProducer && kMode == kDenseSeq),
                  "packed K/V by TMA");
    constexpr int kBlockThreads = FwdSm90Launch<Tr, kKv>::kThreads;
    const fa2_params_t &p = args.p;
    // S of tile j overlaps P V of tile j - 1 when K and V come by TMA, at head
    // dims to 128 with plain scores and at 128 with ALiBi alone or a softcap that bounds
    // the scores (measured slower at 256, and with softcap under a running maximum).
    constexpr bool kOverlappable =
        kProducer || (kTma && (kScored ? Tr::kHeadDim == 128 : Tr::kHeadDim <= 128));
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
    // The mbarriers (TMA: K buffers 0 and 1 then V; producer: ProducerBars): in
    // the alignment pad when it has room, else past V (the pad is then too small and the
    // rest of it follows V).
    constexpr uint32_t kBarBytes = kProducer ? ProducerBars::kBytes : 24;
    // (past V: past the last K/V buffer, 3 of them but for the producer's K stages)
    constexpr int kKVBuffers = kProducer ? ProducerBars::kKStages + 2 : 3;
    const uint32_t bars = q_smem - smem_addr(smem) >= kBarBytes
                              ? smem_addr(smem)
                              : k_smem + kKVBuffers * Tr::kKVBytes;
    const uint32_t v_full = bars + 16;
    const auto k_full = [bars](int it) { return bars + 8 * (it & 1); };
    FwdSm90KvLoader<Tr, kMode, kKv> kv{args, seq, kv_head, tid, warp, lane,
                                           n_block_min * Tr::kBlockN};

    float o[1][Tr::kDTiles][4];
    zero(o);
    OnlineSoftmax<1> softmax;
    softmax.init();
    [[maybe_unused]] ScoreVariants variants{};
    if constexpr (kScored) variants = score_variants(p, seq.batch, head, seq.seqlen_q, seq.seqlen_k);
    // Softcapped scores offset by a fixed offset, not a running maximum
    [[maybe_unused]] float bounded_offset_log2 = 0.f;
    if constexpr (kBoundedScores) {
        softmax.bounded_init(fa2_bounded_softcap_offset(p.softcap));
        bounded_offset_log2 = softmax.bounded_offset_log2(variants.score_log2);
    }
    // ALiBi on tiles with one sign of the distance: a column term per score, a row term
    // for the softmax (apply_alibi_one_side); the diagonal key of row r is r + this.
    [[maybe_unused]] const int64_t diag_offset = int64_t{seq.seqlen_k} - seq.seqlen_q;

    if constexpr (kTma) {
        if (tid == 0) {
            mbarrier_init(k_full(0), 1);
            mbarrier_init(k_full(1), 1);
            mbarrier_init(v_full, 1);
            fence_mbarrier_init();
        }
        __syncthreads();
    } else if constexpr (kProducer) {
        const ProducerBars producer_bars{bars};
        // full: each producer thread's cp.async arrival, or TMA's bytes
        constexpr int kFullArrivals = kProducerCpAsync ? 128 : 1;
        if (tid == 0) {
            for (int b = 0; b < ProducerBars::kKStages; ++b)
                mbarrier_init(producer_bars.k_full(b), kFullArrivals);
            mbarrier_init(producer_bars.v_full(0), kFullArrivals);
            mbarrier_init(producer_bars.v_full(1), kFullArrivals);
            for (int b = 0; b < ProducerBars::kKStages; ++b)
                mbarrier_init(producer_bars.k_free(b), Tr::kThreads);
            mbarrier_init(producer_bars.v_free(0), Tr::kThreads);
            mbarrier_init(producer_bars.v_free(1), Tr::kThreads);
            fence_mbarrier_init();
        }
        __syncthreads();
    }
    if constexpr (kProducer) {
        // The checks, then the warpgroups part: from here on no code is shared, so that
        // each is compiled within its own register count.
        if constexpr (kMode != kDenseSeq)
            if (varlen_verdict<kMode, Tr::kBlockM, kBlockThreads>(p, seq, head, tid)) return;
        if (tid >= Tr::kThreads) {
            set_max_regs_dec<kProducerRegs>();
            if (n_block_end <= n_block_min) return;
            if constexpr (kProducerCpAsync)
                produce_paged_tiles<Tr, Elem>(p, seq, kv_head, n_block_end - 1,
                                              n_block_end - n_block_min, k_smem, ProducerBars{bars},
                                              tid - Tr::kThreads);
            else if (tid == Tr::kThreads)
                produce_copied_tiles<Tr>(&args.k_map, &args.v_map, kv_head, seq.batch,
                                         n_block_end - 1, n_block_end - n_block_min, k_smem,
                                         ProducerBars{bars});
            return;
        }
        static_assert(producer_math_regs<Tr::kThreads>() <= 256, "one block per SM");
        set_max_regs_inc<producer_math_regs<Tr::kThreads>()>();
    }

    if (n_block_end > n_block_min) {
        load_panels<Elem, Tr::kBlockM, Tr::kLoadChunks, Tr::kThreads>(
            q_smem, q_row<Elem>(p, seq, head, row_first), p.q_seq_stride,
            seq.seqlen_q - row_first, p.head_dim, tid);
        cp_async_commit();
        int n_block = n_block_end - 1;
        if constexpr (!kProducer) {
            if constexpr (kMode == kPagedSeq) kv.k_page = kv.fetch_page(n_block * Tr::kBlockN);
            kv.template load<false>(k_smem, k_full(0), n_block * Tr::kBlockN);
            cp_async_commit();
            kv.advance_pages(n_block * Tr::kBlockN);
        }
        // A packed batch's checks: a failed sequence writes nothing (its first copies,
        // already issued, read only in-range rows; they land before the block ends).
        if constexpr (kMode != kDenseSeq && !kProducer) {
            if (varlen_verdict<kMode, Tr::kBlockM, Tr::kThreads>(p, seq, head, tid)) {
                cp_async_wait<0>();
                if constexpr (kTma) mbarrier_wait(k_full(0), 0);
                return;
            }
        }

        if (kProducer ||
            (kOverlappable && (!kScored || kBoundedScores || variants.tanh_scale == 0.f))) {
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
                wgmma_fence();
#pragma unroll
                for (int kk = 0; kk < Tr::kHeadDim / 16; ++kk)
                    wgmma_ss<Elem, 0, 0>(s[0], q_desc + k_major_step<Tr::kBlockM>(kk),
                                         k_desc + k_major_step<Tr::kBlockN>(kk), kk > 0);
                wgmma_commit();
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
                [[maybe_unused]] int side = 0;
                [[maybe_unused]] float bias[1][2] = {{0.f, 0.f}};
                if constexpr (kScored) {  // ALiBi alone, or softcap bounding the scores
                    if constexpr (kBoundedScores)
                        apply_softcap(s, variants.tanh_scale);
                    else if ((side = alibi_tile_side(variants, diag_offset, rows_first,
                                                     rows_last, key_first,
                                                     key_first + Tr::kBlockN - 1)) != 0)
                        apply_alibi_one_side<Tr>(s, variants, side, rows_first + warp * 16,
                                                 key_first, lane, bias);
                    else
                        apply_score_variants<Tr, false>(s, variants, rows_first + warp * 16,
                                                        key_first, lane);
                }
                if (window.block_needs_mask(rows_first, rows_last, key_first,
                                            key_first + Tr::kBlockN - 1))
                    apply_mask<Tr>(s, window, rows_first + warp * 16, key_first, lane);
                if (kLateTurn && late_turn) pass_turn();
                const float scale_log2 = kScored ? variants.score_log2 : p.scale_log2;
                if constexpr (kBoundedScores) {  // O keeps its scale
                    softmax.update_bounded<Tr::kNTiles>(s, variants.score_log2,
                                                              bounded_offset_log2);
                    return false;
                } else if constexpr (kSkipZeroTiles) {
                    // one copy of the update for every tile (bias 0 off the one-sided path)
                    const bool moves = softmax.update_deferred_biased_lazy_sparse(
                        s, scale_log2, bias, alpha, warp_zero);
                    // (the vote lets the compiler see a warp-uniform branch around the
                    // P V's wgmma, which it would serialize otherwise)
                    zero = __all_sync(0xffffffffu,
                                      named_barrier_all(4 + math_wg, 128, warp_zero));
                    return moves;
                } else if constexpr (kLazyRescale) {
                    return softmax.update_deferred_biased_lazy(s, scale_log2, bias, alpha);
                } else {
                    if (side != 0)
                        softmax.update_deferred_biased(s, scale_log2, bias, alpha);
                    else
                        softmax.update_deferred(s, scale_log2, alpha);
                    return true;
                }
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
                    const uint64_t v_desc = desc_mn_major<Tr::kBlockN>(opaque(v_tile(j)), 0);
#pragma unroll
                    for (int kk = 0; kk < Tr::kBlockN / 16; ++kk)
                        wgmma_rs<Elem, 1>(o[0], pa[kk], v_desc + mn_major_step(kk), 1);
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
#pragma unroll
                    for (int kk = 0; kk < Tr::kBlockN / 16; ++kk)
                        a_fragment<Elem>(pa[kk], s[0], kk);
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
        } else if constexpr (!kProducer) {
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
#pragma unroll
                for (int kk = 0; kk < Tr::kBlockN / 16; ++kk)
                    a_fragment<Elem>(pa[kk], s[0], kk);

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
                const uint64_t v_desc = desc_mn_major<Tr::kBlockN>(opaque(v_smem), 0);
#pragma unroll
                for (int kk = 0; kk < Tr::kBlockN / 16; ++kk)
                    wgmma_rs<Elem, 1>(o[0], pa[kk], v_desc + mn_major_step(kk), 1);
                wgmma_commit();
                wgmma_wait<0>();
                reg_fence(o[0]);
            }
        }
    } else if constexpr (kMode != kDenseSeq && !kProducer) {
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
