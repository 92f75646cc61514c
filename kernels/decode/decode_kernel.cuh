// The decode kernel (mma.sync, sm_80 and newer): a few query tokens per sequence
// against a long K/V. One thread block = one (sequence, kv head, split):
//   - packed GQA: the query heads that share the kv head, times the query tokens (at
//     most 16 rows: kRows), are the M rows of one mma tile, so each K/V byte is read
//     once per kv head, not once per query head;
//   - split-KV: the sequence's keys are cut into splits ranges, one block each,
//     so that a small batch still fills the GPU; the splits' results are merged by the
//     combine kernel (decode_run.cuh);
//   - the four warps of a block each stream their own key tiles (tile w, w + 4, ...; 16
//     KiB of K and V a tile) through a private kStages-deep cp.async pipeline, each with
//     its own online softmax; the warps' results are merged in shared memory at the end.
#pragma once

#include <stdint.h>

#include "common/grid_dependency.cuh"
#include "common/mask.cuh"
#include "common/paged_tile.cuh"
#include "common/score_variants.cuh"
#include "common/params.h"
#include "common/ptx.cuh"
#include "common/seqinfo.cuh"
#include "common/softmax.cuh"
#include "common/varlen_check.cuh"
#include "common/warp_gemm.cuh"
#include "decode/decode_tiles.h"

namespace fa2 {

template <typename Elem_, int kHeadDim_, int kStages_>
struct DecodeTraits {
    using Elem = Elem_;
    static constexpr int kHeadDim = kHeadDim_;
    static constexpr int kWarps = FA2_DECODE_WARPS;
    static constexpr int kThreads = 32 * kWarps;
    static constexpr int kRows = FA2_DECODE_ROWS;
    static constexpr int kKeys = FA2_DECODE_KEYS(kHeadDim);  // keys per warp tile
    static constexpr int kStages = kStages_;
    static constexpr int kRowBytes = FA2_DECODE_ROW_BYTES(kHeadDim);
    static constexpr int kLoadChunks = kHeadDim / 8;
    static constexpr int kPagedRows = kKeys < 32 ? kKeys : 32;  // rows of a paged part
    static constexpr int kPagedParts = kKeys / kPagedRows;
    static constexpr int kNTiles = kKeys / 8;
    static constexpr int kDTiles = kHeadDim / 8;
    static constexpr int kQBytes = kRows * kRowBytes;
    static constexpr int kTileBytes = kKeys * kRowBytes;         // one K or V tile
    static constexpr int kWarpBytes = kStages * 2 * kTileBytes;  // a warp's buffers
    static constexpr int kSmemBytes = FA2_DECODE_SMEM_BYTES(kHeadDim, kStages);
    // After the loop the warps' O (fp32) and row statistics reuse the K/V buffers.
    static constexpr int kMergeBytes = kWarps * kRows * (kHeadDim + 2) * 4;
    static_assert(kSmemBytes == kQBytes + kWarps * kWarpBytes, "the planner's size");
    static_assert(kMergeBytes <= kWarps * kWarpBytes, "the merge fits the K/V space");
    static_assert(kRows == 16, "one mma row tile");
    static_assert(kStages >= 2, "a tile in flight while one is computed");
    static_assert(kKeys % 16 == 0 && kHeadDim % 16 == 0, "k16 steps");
};

// Row r of the block's M rows: query token r / group of query head kv_head * group +
// r % group.
struct DecodeRow {
    int token, head;
};

__device__ __forceinline__ DecodeRow decode_row(int r, int group, int kv_head)
{
    return {r / group, kv_head * group + r % group};
}

// Row of the splits' accumulators for token `token` of sequence `s`.
__device__ __forceinline__ int64_t accum_row(const fa2_params_t &p, const Sequence &s,
                                             int token)
{
    return p.cu_seqlens_q ? static_cast<int64_t>(s.q_start) + token
                          : static_cast<int64_t>(s.batch) * p.seqlen_q + token;
}

// kScored: softcap or ALiBi (include/fa2.h) on; the scores are then natural-unit
// logits and the softmax's scale is log2(e).
template <typename Tr, int kMode, bool kScored>
__global__ void __launch_bounds__(Tr::kThreads, 1) decode_kernel(const fa2_params_t p)
{
    using Elem = typename Tr::Elem;
    extern __shared__ __align__(128) uint8_t smem[];
    allow_dependent_launch();  // the combine kernel's blocks may wait on the free SMs
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int splits = p.splits;
    const int split = static_cast<int>(blockIdx.x % splits);
    const int kv_head = static_cast<int>(blockIdx.x / splits % p.heads_kv);
    const int batch = static_cast<int>(blockIdx.x / splits / p.heads_kv);
    const int group = p.heads_q / p.heads_kv;
    const Sequence seq = sequence<kMode>(p, batch);
    const int m_real = group * seq.seqlen_q;  // <= kRows (the planner's condition)

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
        const DecodeRow row = decode_row(r, group, kv_head);
        const bool valid = r < m_real && chunk * 8 < p.head_dim;
        const Elem *src = valid ? q_row<Elem>(p, seq, row.head, row.token) + chunk * 8
                                : static_cast<const Elem *>(p.q);
        cp_async_16(q_smem + swizzled<Tr::kRowBytes>(r, chunk), src, valid);
    }
    cp_async_commit();

    // A paged tile goes in parts of kPagedRows keys (paged_tile.cuh: at most one row per
    // lane of a warp), each with its own page lookups.
    using PagedShape = PagedTileShape<Tr::kPagedRows, Tr::kLoadChunks, 32>;
    struct TilePages {
        int id[Tr::kPagedParts];  // this lane's page id of each part
    };
    // A warp's tile `t` (keys lo + t * kKeys ..) into stage `stage`.
    auto load_tile_kv = [&](int t, int stage, const TilePages &pages) {
        const int key_first = lo + t * Tr::kKeys;
        if constexpr (kMode == kPagedSeq) {
#pragma unroll
            for (int part = 0; part < Tr::kPagedParts; ++part) {
                const int row0 = part * Tr::kPagedRows;
                const auto swz = [row0](int row, int chunk) {
                    return swizzled<Tr::kRowBytes>(row0 + row, chunk);
                };
                load_paged_tile<PagedShape>(k_buf(stage), paged_rows<Elem, false>(p, seq, kv_head),
                                            pages.id[part], key_first + row0, p.head_dim, lane,
                                            swz);
                load_paged_tile<PagedShape>(v_buf(stage), paged_rows<Elem, true>(p, seq, kv_head),
                                            pages.id[part], key_first + row0, p.head_dim, lane,
                                            swz);
            }
        } else {
            load_tile<Elem, Tr::kKeys, Tr::kLoadChunks, Tr::kRowBytes, 32>(
                k_buf(stage), k_row<Elem>(p, seq, kv_head, key_first), p.k_seq_stride,
                hi - key_first, p.head_dim, lane);
            load_tile<Elem, Tr::kKeys, Tr::kLoadChunks, Tr::kRowBytes, 32>(
                v_buf(stage), v_row<Elem>(p, seq, kv_head, key_first), p.v_seq_stride,
                hi - key_first, p.head_dim, lane);
        }
    };
    auto fetch_pages = [&](int t) {
        TilePages pages;
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
    };

    // Prologue: the warp's first kStages - 1 tiles in flight (one commit group each,
    // empty past t_end, so that the waits below count groups alike).
    int t = t_first + warp;
    TilePages pages{};
    if constexpr (kMode == kPagedSeq)
        if (t < t_end) pages = fetch_pages(t);
#pragma unroll
    for (int i = 0; i < Tr::kStages - 1; ++i) {
        const int tile = t + i * Tr::kWarps;
        if (tile < t_end) load_tile_kv(tile, i, pages);
        cp_async_commit();
        if constexpr (kMode == kPagedSeq)
            if (tile + Tr::kWarps < t_end) pages = fetch_pages(tile + Tr::kWarps);
    }

    // A packed batch's checks (varlen_check.cuh): a failed sequence writes nothing.
    if constexpr (kMode != kDenseSeq) {
        const int check = varlen_verdict<kMode, Tr::kThreads>(p, seq, kv_head == 0 && split == 0,
                                                              tid);
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
    const float score_log2 = kScored ? score_units_log2(p) : p.scale_log2;
    // This thread's two rows (lane / 4 and + 8): ALiBi's slope in score units and the
    // row's key position (common/score_variants.cuh).
    [[maybe_unused]] float row_alibi[1][2] = {{0.f, 0.f}}, row_position[2];
    [[maybe_unused]] const float tanh_scale = p.softcap > 0.f ? p.softmax_scale / p.softcap : 0.f;
    if constexpr (kScored) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const DecodeRow row = decode_row((lane >> 2) + 8 * h, group, kv_head);
            row_position[h] = static_cast<float>(row.token + seq.seqlen_k - seq.seqlen_q);
            if (p.alibi_slopes)
                row_alibi[0][h] =
                    alibi_in_score_units(p, alibi_slope(p, seq.batch, row.head));
        }
    }
    for (int stage = 0; t < t_end; t += Tr::kWarps) {
        // The tile kStages - 1 rounds ahead, into the stage computed last round.
        const int ahead = t + (Tr::kStages - 1) * Tr::kWarps;
        const int last = stage == 0 ? Tr::kStages - 1 : stage - 1;
        if (ahead < t_end) load_tile_kv(ahead, last, pages);
        cp_async_commit();
        if constexpr (kMode == kPagedSeq)
            if (ahead + Tr::kWarps < t_end) pages = fetch_pages(ahead + Tr::kWarps);
        cp_async_wait<Tr::kStages - 1>();  // tile t's K and V
        __syncwarp();

        float s[1][Tr::kNTiles][4];
        zero(s);
        gemm_abt<Elem, Tr::kRowBytes, 1, Tr::kNTiles, Tr::kHeadDim / 16>(s, q_smem, k_buf(stage),
                                                                       lane);
        const int key_first = lo + t * Tr::kKeys;
        if constexpr (kScored) {
            if (tanh_scale != 0.f) apply_softcap(s, tanh_scale);
            if (p.alibi_slopes) {
                const float key = static_cast<float>(key_first + 2 * (lane & 3));
                const float dist0[1][2] = {{row_position[0] - key, row_position[1] - key}};
                apply_alibi(s, row_alibi, dist0);
            }
        }
        // Keys past the range, and a mask or window edge inside the tile (rows padded
        // past m_real compute harmless values that are never written).
        if (key_first + Tr::kKeys > hi ||
            win.block_needs_mask(0, seq.seqlen_q - 1, key_first, key_first + Tr::kKeys - 1)) {
#pragma unroll
            for (int nt = 0; nt < Tr::kNTiles; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int r = (lane >> 2) + 8 * (e >> 1);
                    const int key = key_first + nt * 8 + 2 * (lane & 3) + (e & 1);
                    const int token = min(r, max(m_real - 1, 0)) / group;
                    if (key >= hi || !win.visible(token, key)) s[0][nt][e] = -INFINITY;
                }
        }
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

    // Merge the warps: each writes its O (unnormalized) and its rows' (scaled max, sum).
    __syncthreads();  // every warp is done with the K/V buffers
    float *merge_o = reinterpret_cast<float *>(smem + Tr::kQBytes);
    float *merge_stat = merge_o + Tr::kWarps * Tr::kRows * Tr::kHeadDim;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int r = (lane >> 2) + 8 * h;
        const float sum = quad_sum(softmax.row_sum[0][h]);
        const float mx = softmax.row_max[0][h];
        if ((lane & 3) == 0) {
            merge_stat[(warp * Tr::kRows + r) * 2] =
                mx == -INFINITY ? -INFINITY : __fmul_rn(mx, score_log2);
            merge_stat[(warp * Tr::kRows + r) * 2 + 1] = sum;
        }
#pragma unroll
        for (int dt = 0; dt < Tr::kDTiles; ++dt) {
            const int col = dt * 8 + 2 * (lane & 3);
            float *dst = merge_o + (warp * Tr::kRows + r) * Tr::kHeadDim + col;
            dst[0] = o[0][dt][2 * h];
            dst[1] = o[0][dt][2 * h + 1];
        }
    }
    __syncthreads();

    // Each thread: 8 columns of one row at a time.
    for (int u = tid; u < Tr::kRows * Tr::kDTiles; u += Tr::kThreads) {
        const int r = u / Tr::kDTiles, col = (u % Tr::kDTiles) * 8;
        if (r >= m_real || col >= p.head_dim) continue;
        float top = -INFINITY;
#pragma unroll
        for (int w = 0; w < Tr::kWarps; ++w)
            top = fmaxf(top, merge_stat[(w * Tr::kRows + r) * 2]);
        float out[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f}, total = 0.f;
        if (top != -INFINITY) {
#pragma unroll
            for (int w = 0; w < Tr::kWarps; ++w) {
                const float m = merge_stat[(w * Tr::kRows + r) * 2];
                if (m == -INFINITY) continue;
                const float f = exp2_approx(m - top);
                total += f * merge_stat[(w * Tr::kRows + r) * 2 + 1];
                const float *src = merge_o + (w * Tr::kRows + r) * Tr::kHeadDim + col;
#pragma unroll
                for (int e = 0; e < 8; ++e) out[e] += f * src[e];
            }
        }
        // The sink joins the row's denominator once: here without splits, else in the
        // combine.
        if (p.sinks && splits == 1) {
            const float sink = __ldg(p.sinks + decode_row(r, group, kv_head).head) * kLog2e;
            if (sink != -INFINITY) {
                const float new_top = fmaxf(top, sink);
                const float f = top == -INFINITY ? 0.f : exp2_approx(top - new_top);
#pragma unroll
                for (int e = 0; e < 8; ++e) out[e] *= f;
                total = total * f + exp2_approx(sink - new_top);
                top = new_top;
            }
        }
        const bool empty = top == -INFINITY || total == 0.f;
        const float inv = empty ? 0.f : 1.f / total;
        const float lse = empty ? -INFINITY : (top + log2f(total)) * 0.6931471805599453f;
#pragma unroll
        for (int e = 0; e < 8; ++e) out[e] *= inv;
        const DecodeRow row = decode_row(r, group, kv_head);
        if (splits == 1) {
            Elem *dst = o_row<Elem>(p, seq, row.head, row.token) + col;
#pragma unroll
            for (int e = 0; e < 8; e += 2)
                *reinterpret_cast<uint32_t *>(dst + e) = pack2<Elem>(out[e], out[e + 1]);
            if (p.lse && col == 0) p.lse[stats_row(p, seq, row.head) + row.token] = lse;
        } else {
            const int64_t arow = accum_row(p, seq, row.token);
            float *dst = p.o_accum +
                         ((static_cast<int64_t>(split) * p.accum_rows + arow) * p.heads_q +
                          row.head) * p.head_dim + col;
#pragma unroll
            for (int e = 0; e < 8; ++e) dst[e] = out[e];
            if (col == 0)
                p.lse_accum[(static_cast<int64_t>(split) * p.heads_q + row.head) * p.accum_rows +
                            arow] = lse;
        }
    }
}

}  // namespace fa2
