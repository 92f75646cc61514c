// The decode kernel (mma.sync, sm_80 and newer): a few query tokens per sequence
// against a long K/V. One thread block = one (sequence, kv head, split, row block):
//   - packed GQA: the query heads that share the kv head, times the query tokens, are
//     the kv head's rows (decode_row); a warp computes 16 of them (one mma row tile),
//     a block 16, 32 or 64 (its row warps, decode_traits.cuh); a kv head of more
//     than 64 rows has several row blocks, neighbours in the grid;
//   - split-KV: the sequence's keys are cut into splits ranges, one block each,
//     so that a small batch still fills the GPU; the splits' results are merged by the
//     combine kernel (decode_run.cuh);
//   - the block's four warps form 4 / row_warps key streams that take the split's key
//     tiles (16 KiB of K and V each) in turn; a stream's row warps load its tiles in
//     turn into one shared ring (decode_ring.cuh) and each computes every one of them
//     for its rows, so a K/V row is read once per row block; each warp keeps its own
//     online softmax, and the streams' results are merged in shared memory at the end.
// Parts: decode_traits.cuh (shape, rows), decode_ring.cuh (slots, mbarriers),
// decode_kv_loader.cuh (K/V tiles), decode_scores.cuh (score variants, mask),
// decode_epilogue.cuh (the warps' merge, the stores).
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
#include "decode/decode_ring.cuh"
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
    const DecodeBlockShape shape(p);
    const int rw = warp % shape.row_warps, stream = warp / shape.row_warps;
    const int row_block = static_cast<int>(blockIdx.x % shape.row_blocks);
    const int split = static_cast<int>(blockIdx.x / shape.row_blocks % splits);
    const int kv_head = static_cast<int>(blockIdx.x / shape.row_blocks / splits % p.heads_kv);
    const int batch = static_cast<int>(blockIdx.x / shape.row_blocks / splits / p.heads_kv);
    const Sequence seq = sequence<kMode>(p, batch);
    // The block's rows: block_row0.. of the kv head's group * seqlen_q, block_real of
    // them; this warp's: row0.., m_real of them.
    const int block_row0 = row_block * shape.row_warps * Tr::kRows;
    const int all_rows = group * seq.seqlen_q;
    const int block_real = max(0, min(shape.row_warps * Tr::kRows, all_rows - block_row0));
    const int row0 = block_row0 + rw * Tr::kRows;
    const int m_real = max(0, min(Tr::kRows, all_rows - row0));

    // The keys the sequence's tokens may see (bottom-right aligned): [lo, hi).
    const KeyWindow win{seq.seqlen_k - seq.seqlen_q, p.window_left, p.window_right,
                        seq.seqlen_k};
    int lo = 0, hi = seq.seqlen_k;
    if (p.window_left >= 0) lo = max(0, seq.seqlen_k - seq.seqlen_q - p.window_left);
    if (p.window_right >= 0) hi = min(hi, seq.seqlen_k + p.window_right);
    // This split's tiles of kKeys keys; the stream's: t_first + stream + i * streams,
    // for i < n.
    const int tiles = hi > lo ? (hi - lo + Tr::kKeys - 1) / Tr::kKeys : 0;
    const int per_split =
        p.split_tiles > 0 ? p.split_tiles : (tiles + splits - 1) / splits;
    const int t_first = split * per_split + stream;
    const int t_end = block_real > 0 ? min(tiles, split * per_split + per_split) : 0;
    const int n = t_end > t_first ? (t_end - t_first + shape.streams - 1) / shape.streams : 0;
    auto tile = [&](int i) { return t_first + i * shape.streams; };

    const int stages = p.decode_stages, depth = stages * shape.row_warps;
    const DecodeSmem<Tr> sm(smem_addr(smem), stages, shape.row_warps);
    const DecodeRing<Tr> ring = sm.ring(stream, depth);
    sm.init(shape.row_warps, tid);
    __syncthreads();  // the mbarriers

    // Q: row r from its token and head (rows >= block_real zero-filled); first, so that
    // its mbarrier counts only Q's copies.
    for (int i = tid; i < shape.row_warps * Tr::kRows * Tr::kLoadChunks; i += Tr::kThreads) {
        const int r = i / Tr::kLoadChunks, chunk = i % Tr::kLoadChunks;
        const DecodeRow row = decode_row(block_row0 + r, group, kv_head);
        const bool valid = r < block_real && chunk * 8 < p.head_dim;
        const Elem *src = valid ? q_row<Elem>(p, seq, row.head, row.token) + chunk * 8
                                : static_cast<const Elem *>(p.q);
        cp_async_16(sm.q + swizzled<Tr::kRowBytes>(r, chunk), src, valid);
    }
    cp_async_arrive_noinc(sm.q_loaded);

    using Loader = DecodeKvLoader<Tr, kMode>;
    const Loader kv{p, seq, kv_head, lo, hi, lane};
    // Prologue: this warp's first `stages` tiles (rw, rw + row_warps, ...).
    typename Loader::Pages pages{};
    if constexpr (kMode == kPagedSeq)
        if (rw < n) pages = kv.fetch_pages(tile(rw));
    for (int i = rw; i < min(n, depth); i += shape.row_warps) {
        const RingPos at{i, 0};
        kv.load(tile(i), ring.k_buf(at), ring.v_buf(at), pages);
        ring.loaded(at);
        if constexpr (kMode == kPagedSeq)
            if (i + shape.row_warps < n) pages = kv.fetch_pages(tile(i + shape.row_warps));
    }

    // A packed batch's checks (varlen_check.cuh): a failed sequence writes nothing.
    if constexpr (kMode != kDenseSeq) {
        const int check = varlen_verdict<kMode, Tr::kThreads>(
            p, seq, kv_head == 0 && split == 0 && row_block == 0, tid);
        if (check) {  // the copies land, and their arrivals, before the block leaves
            mbarrier_wait(sm.q_loaded, 0);
            for (int i = rw; i < min(n, depth); i += shape.row_warps)
                ring.wait_full(RingPos{i, 0});
            return;
        }
    }
    mbarrier_wait(sm.q_loaded, 0);  // every thread's copies of Q

    float o[1][Tr::kDTiles][4];
    zero(o);
    OnlineSoftmax<1> softmax;
    softmax.init();
    const DecodeScores<Tr> scores(p, seq, group, kv_head, row0, lane);
    const float score_log2 = scores.score_log2;
    const uint32_t q_warp = sm.q + Tr::q_bytes(rw);
    // Tile i's place, and tile i - row_warps's: the tile whose slot is refilled now, by
    // the warp that loaded it, once the stream's other warps (a tile or so behind at
    // most) are done with it.
    RingPos at{0, 0}, behind{0, 0};
    for (int i = 0; i < n; ++i) {
        const int j = i - shape.row_warps, ahead = j + depth;
        if (j >= 0) {
            if ((j & (shape.row_warps - 1)) == rw && ahead < n) {
                if (shape.row_warps > 1) ring.wait_empty(behind);  // (one warp: its own)
                kv.load(tile(ahead), ring.k_buf(behind), ring.v_buf(behind), pages);
                ring.loaded(behind);
                if constexpr (kMode == kPagedSeq)
                    if (ahead + shape.row_warps < n)
                        pages = kv.fetch_pages(tile(ahead + shape.row_warps));
            }
            behind.advance(depth);
        }
        ring.wait_full(at);

        if (m_real > 0) {  // (a row block's last warps may have no rows)
            float s[1][Tr::kNTiles][4];
            zero(s);
            gemm_abt<Elem, Tr::kRowBytes, 1, Tr::kNTiles, Tr::kHeadDim / 16>(
                s, q_warp, ring.k_buf(at), lane);
            scores.apply(s, lo + tile(i) * Tr::kKeys, hi, win, seq.seqlen_q, row0, m_real,
                         group, lane);
            // At most 8 real rows (GQA <= 8, one token): no exponentials for rows 8-15.
            if (m_real <= 8)
                softmax.template update<Tr::kNTiles, Tr::kDTiles, 1>(s, o, score_log2);
            else
                softmax.update(s, o, score_log2);
            gemm_pb<Elem, Tr::kRowBytes, 1, Tr::kDTiles, Tr::kKeys / 16>(o, s,
                                                                        ring.v_buf(at), lane);
        }
        if (shape.row_warps > 1)
            ring.release(at, lane);
        else
            __syncwarp();  // the warp's lanes are done with the slot it refills next
        at.advance(depth);
    }
    cp_async_wait<0>();

    const DecodeEpilogue<Tr> epilogue(smem, shape.row_warps);  // over Q and the slots
    __syncthreads();  // every warp is done with the K/V slots
    epilogue.stash(o, softmax, score_log2, warp, lane);
    __syncthreads();
    epilogue.store(p, seq, block_row0, block_real, group, kv_head, split, tid);
}

}  // namespace fa2
