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
#include "sm90/fwd_sm90_overlapped_loop.cuh"
#include "sm90/fwd_sm90_serial_loop.cuh"
#include "sm90/fwd_sm90_state.cuh"
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
    using Flags = FwdSm90Flags<Tr, kMode, kScores, kKv>;
    constexpr bool kTma = Flags::kTma, kProducer = Flags::kProducer, kScored = Flags::kScored,
                   kBoundedScores = Flags::kBoundedScores,
                   kProducerCpAsync = Flags::kProducerCpAsync;
    constexpr int kBlockThreads = FwdSm90Launch<Tr, kKv>::kThreads;
    const fa2_params_t &p = args.p;
    using Elem = typename Tr::Elem;
    extern __shared__ __align__(1024) uint8_t smem[];

    const int tid = threadIdx.x;
    const int warp = tid / 32;
    const int lane = tid % 32;
    const int wg_row0 = (warp / 4) * 64;  // this warpgroup's first row in the tile

    const QueryTile tile = query_tile<Tr::kBlockM, Tr::kBlockN, true, kMode>(p);
    const auto [seq, head, kv_head, row_first, row_last, n_block_min, n_block_end, win] = tile;

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
    const FwdSm90Place at{tid, warp, lane, wg_row0, q_smem, k_smem, v_smem, bars};
    FwdSm90KvLoader<Tr, kMode, kKv> kv{args, seq, kv_head, tid, warp, lane,
                                       n_block_min * Tr::kBlockN};

    FwdSm90Rows<Tr> rows;
    zero(rows.o);
    rows.softmax.init();
    rows.variants = {};
    if constexpr (kScored)
        rows.variants = score_variants(p, seq.batch, head, seq.seqlen_q, seq.seqlen_k);
    // Softcapped scores offset by a fixed offset, not a running maximum
    rows.bounded_offset_log2 = 0.f;
    if constexpr (kBoundedScores) {
        rows.softmax.bounded_init(fa2_bounded_softcap_offset(p.softcap));
        rows.bounded_offset_log2 = rows.softmax.bounded_offset_log2(rows.variants.score_log2);
    }
    rows.diag_offset = int64_t{seq.seqlen_k} - seq.seqlen_q;

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

        if (kProducer || (Flags::kOverlappable &&
                          (!kScored || kBoundedScores || rows.variants.tanh_scale == 0.f)))
            fwd_sm90_overlapped_loop<Tr, kMode, kScores, kKv>(args, kv, tile, at, rows);
        else if constexpr (!kProducer)
            fwd_sm90_serial_loop<Tr, kMode, kScores, kKv>(args, kv, tile, at, rows);
    } else if constexpr (kMode != kDenseSeq && !kProducer) {
        if (varlen_verdict<kMode, Tr::kBlockM, Tr::kThreads>(p, seq, head, tid))
            return;  // no key to visit; a failed sequence writes no output
    }

    float inv_sum[1][2], lse[1][2];
    if (kScored || p.sinks)  // block-uniform, once per tile (sink_log2: -inf without sinks)
        rows.softmax.finish_with_sink(kScored ? rows.variants.score_log2 : p.scale_log2,
                                      sink_log2(p, head), inv_sum, lse);
    else
        rows.softmax.finish(p.scale_log2, inv_sum, lse);

    const int warp_row0 = row_first + warp * 16;
    store_o_lse<Elem>(p, seq, head, warp_row0, rows.o, inv_sum, lse, lane);
#endif
}

}  // namespace fa2
