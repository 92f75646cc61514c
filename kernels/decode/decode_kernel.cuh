// The decode kernel (mma.sync, sm_80 and newer): a few query tokens per sequence
// against a long K/V. One thread block = one (sequence, kv head, split, row tile):
//   - packed GQA: the query heads that share the kv head, times the query tokens, are
//     the kv head's rows (decode_row); 16 of them (kRows) are the M rows of one mma
//     tile. A kv head of more rows has several row tiles, neighbours in the grid, so
//     that they stream the same keys together (from L2 after the first);
//   - split-KV: the sequence's keys are cut into splits ranges, one block each,
//     so that a small batch still fills the GPU; the splits' results are merged by the
//     combine kernel (decode_run.cuh);
//   - the four warps of a block each stream their own key tiles (tile w, w + 4, ...; 16
//     KiB of K and V a tile) through a private kStages-deep cp.async pipeline, each with
//     its own online softmax; the warps' results are merged in shared memory at the end.
// Parts: decode_traits.cuh (shape, rows), decode_kv_loader.cuh (K/V tiles),
// decode_scores.cuh (score variants, mask), decode_epilogue.cuh (the warps' merge, the
// stores).
#pragma once

#include <stdint.h>

#include "common/grid_dependency.cuh"
#include "common/mask.cuh"
#include "common/params.h"
#include "common/ptx.cuh"
#include "common/seqinfo.cuh"
#include "common/softmax.cuh"
#include "common/varlen_check.cuh"
#include "common/warp_gemm.cuh"
#include "decode/decode_epilogue.cuh"
#include "decode/decode_kv_loader.cuh"
#include "decode/decode_scores.cuh"
#include "decode/decode_traits.cuh"

namespace fa2 {

// kMode: kDenseOrPackedSeq (packed when p.cu_seqlens_q is set) or kPagedSeq (and p.page_table).
template <typename Tr, int kMode>
__global__ void __launch_bounds__(Tr::kThreads, 1) decode_kernel(const fa2_params_t p)
{
    using Elem = typename Tr::Elem;
    extern __shared__ __align__(128) uint8_t smem[];
    allow_dependent_launch();  // the combine kernel's blocks may wait on the free SMs
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int splits = p.splits;
    const int group = p.heads_q / p.heads_kv;
    const int row_tiles = decode_row_tiles(p);
    const int row_tile = static_cast<int>(blockIdx.x % row_tiles);
    const int split = static_cast<int>(blockIdx.x / row_tiles % splits);
    const int kv_head = static_cast<int>(blockIdx.x / row_tiles / splits % p.heads_kv);
    const int batch = static_cast<int>(blockIdx.x / row_tiles / splits / p.heads_kv);
    const Sequence seq = sequence<kMode>(p, batch);
    // This block's rows: row0.. of the kv head's group * seqlen_q, m_real of them
    const int row0 = row_tile * Tr::kRows;
    const int m_real = max(0, min(Tr::kRows, group * seq.seqlen_q - row0));

    // The keys the sequence's tokens may see (bottom-right aligned): [lo, hi).
    const KeyWindow win{seq.seqlen_k - seq.seqlen_q, p.window_left, p.window_right,
                        seq.seqlen_k};
    int lo = 0, hi = seq.seqlen_k;
    if (p.window_left >= 0) lo = max(0, seq.seqlen_k - seq.seqlen_q - p.window_left);
    if (p.window_right >= 0) hi = min(hi, seq.seqlen_k + p.window_right);
    // This split's tiles of kKeys keys.
    const int tiles = hi > lo ? (hi - lo + Tr::kKeys - 1) / Tr::kKeys : 0;
    const int per_split =
        p.split_tiles > 0 ? p.split_tiles : (tiles + splits - 1) / splits;
    const int t_first = split * per_split;
    const int t_end = m_real > 0 ? min(tiles, t_first + per_split) : t_first;

    const uint32_t q_smem = smem_addr(smem);
    const uint32_t kv_smem = q_smem + Tr::kQBytes + warp * Tr::kWarpBytes;
    auto k_buf = [&](int stage) { return kv_smem + stage * 2 * Tr::kTileBytes; };
    auto v_buf = [&](int stage) { return kv_smem + stage * 2 * Tr::kTileBytes + Tr::kTileBytes; };

    // Q: row r from its token and head (rows >= m_real zero-filled).
    for (int i = tid; i < Tr::kRows * Tr::kLoadChunks; i += Tr::kThreads) {
        const int r = i / Tr::kLoadChunks, chunk = i % Tr::kLoadChunks;
        const DecodeRow row = decode_row(row0 + r, group, kv_head);
        const bool valid = r < m_real && chunk * 8 < p.head_dim;
        const Elem *src = valid ? q_row<Elem>(p, seq, row.head, row.token) + chunk * 8
                                : static_cast<const Elem *>(p.q);
        cp_async_16(q_smem + swizzled<Tr::kRowBytes>(r, chunk), src, valid);
    }
    cp_async_commit();

    using Loader = DecodeKvLoader<Tr, kMode>;
    const Loader kv{p, seq, kv_head, lo, hi, lane};
    // Prologue: the warp's first kStages - 1 tiles in flight (one commit group each,
    // empty past t_end, so that the waits below count groups alike).
    int t = t_first + warp;
    typename Loader::Pages pages{};
    if constexpr (kMode == kPagedSeq)
        if (t < t_end) pages = kv.fetch_pages(t);
#pragma unroll
    for (int i = 0; i < Tr::kStages - 1; ++i) {
        const int tile = t + i * Tr::kWarps;
        if (tile < t_end) kv.load(tile, k_buf(i), v_buf(i), pages);
        cp_async_commit();
        if constexpr (kMode == kPagedSeq)
            if (tile + Tr::kWarps < t_end) pages = kv.fetch_pages(tile + Tr::kWarps);
    }

    // A packed batch's checks (varlen_check.cuh): a failed sequence writes nothing.
    if constexpr (kMode != kDenseSeq) {
        const int check = varlen_verdict<kMode, Tr::kThreads>(
            p, seq, kv_head == 0 && split == 0 && row_tile == 0, tid);
        if (check) {
            cp_async_wait<0>();
            return;
        }
    }
    cp_async_wait<Tr::kStages - 1>();  // Q (this thread's copies)
    __syncthreads();                   // ...and everyone's

    float o[1][Tr::kDTiles][4];
    zero(o);
    OnlineSoftmax<1> softmax;
    softmax.init();
    const DecodeScores<Tr> scores(p, seq, group, kv_head, row0, lane);
    const float score_log2 = scores.score_log2;
    for (int stage = 0; t < t_end; t += Tr::kWarps) {
        // The tile kStages - 1 rounds ahead, into the stage computed last round.
        const int ahead = t + (Tr::kStages - 1) * Tr::kWarps;
        const int last = stage == 0 ? Tr::kStages - 1 : stage - 1;
        if (ahead < t_end) kv.load(ahead, k_buf(last), v_buf(last), pages);
        cp_async_commit();
        if constexpr (kMode == kPagedSeq)
            if (ahead + Tr::kWarps < t_end) pages = kv.fetch_pages(ahead + Tr::kWarps);
        cp_async_wait<Tr::kStages - 1>();  // tile t's K and V
        __syncwarp();

        float s[1][Tr::kNTiles][4];
        zero(s);
        gemm_abt<Elem, Tr::kRowBytes, 1, Tr::kNTiles, Tr::kHeadDim / 16>(s, q_smem, k_buf(stage),
                                                                       lane);
        scores.apply(s, lo + t * Tr::kKeys, hi, win, seq.seqlen_q, row0, m_real, group, lane);
        // At most 8 real rows (GQA <= 8, one token): no exponentials for rows 8-15.
        if (m_real <= 8)
            softmax.template update<Tr::kNTiles, Tr::kDTiles, 1>(s, o, score_log2);
        else
            softmax.update(s, o, score_log2);
        gemm_pb<Elem, Tr::kRowBytes, 1, Tr::kDTiles, Tr::kKeys / 16>(o, s, v_buf(stage), lane);
        __syncwarp();  // the stage is reloaded next round
        stage = stage + 1 == Tr::kStages ? 0 : stage + 1;
    }
    cp_async_wait<0>();

    const DecodeEpilogue<Tr> epilogue(smem);
    __syncthreads();  // every warp is done with the K/V buffers
    epilogue.stash(o, softmax, score_log2, warp, lane);
    __syncthreads();
    epilogue.store(p, seq, row0, m_real, group, kv_head, split, tid);
}

}  // namespace fa2
