// The decode kernel's end: the block's warps each streamed their own key tiles, so
// each holds an unnormalized O and its rows' (max, sum). They are merged through
// shared memory (the K/V buffers, free by then); each row's result goes to O and the
// LSE, or, with splits, to the split's slot of the fp32 workspace for the combine.
#pragma once

#include <stdint.h>

#include "common/params.h"
#include "common/ptx.cuh"
#include "common/seqinfo.cuh"
#include "common/softmax.cuh"
#include "decode/decode_traits.cuh"

namespace fa2 {

template <typename Tr>
struct DecodeEpilogue {
    using Elem = typename Tr::Elem;
    float *merge_o;     // [warp][row][head_dim]
    float *merge_stat;  // [warp][row][2]: scaled max, sum

    __device__ __forceinline__ explicit DecodeEpilogue(uint8_t *smem)
        : merge_o(reinterpret_cast<float *>(smem + Tr::kQBytes)),
          merge_stat(merge_o + Tr::kWarps * Tr::kRows * Tr::kHeadDim)
    {
    }

    // The warp's O and row statistics to shared memory (after every warp left the K/V
    // buffers: the caller's __syncthreads).
    __device__ __forceinline__ void stash(const float (&o)[1][Tr::kDTiles][4],
                                          const OnlineSoftmax<1> &softmax, float score_log2,
                                          int warp, int lane) const
    {
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
    }

    // Row r's 8 columns from col, merged over the warps: out (normalized), top (log2
    // units) and total (the denominator); a sink joins here when there are no splits.
    __device__ __forceinline__ void merge_row(int r, int col, float (&out)[8], float &top,
                                              float &total) const
    {
        top = -INFINITY;
        total = 0.f;
#pragma unroll
        for (int w = 0; w < Tr::kWarps; ++w)
            top = fmaxf(top, merge_stat[(w * Tr::kRows + r) * 2]);
#pragma unroll
        for (int e = 0; e < 8; ++e) out[e] = 0.f;
        if (top == -INFINITY) return;
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

    // Every real row's result (rows row0.. of the kv head), each thread 8 columns of
    // one row at a time (after the stash: the caller's __syncthreads).
    __device__ __forceinline__ void store(const fa2_params_t &p, const Sequence &seq,
                                          int row0, int m_real, int group, int kv_head,
                                          int split, int tid) const
    {
        const int splits = p.splits;
        for (int u = tid; u < Tr::kRows * Tr::kDTiles; u += Tr::kThreads) {
            const int r = u / Tr::kDTiles, col = (u % Tr::kDTiles) * 8;
            if (r >= m_real || col >= p.head_dim) continue;
            float out[8], top, total;
            merge_row(r, col, out, top, total);
            // The sink joins the row's denominator once: here without splits, else in
            // the combine.
            if (p.sinks && splits == 1) {
                const float sink =
                    __ldg(p.sinks + decode_row(row0 + r, group, kv_head).head) * kLog2e;
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
            const DecodeRow row = decode_row(row0 + r, group, kv_head);
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
                    p.lse_accum[(static_cast<int64_t>(split) * p.heads_q + row.head) *
                                    p.accum_rows + arow] = lse;
            }
        }
    }
};

}  // namespace fa2
