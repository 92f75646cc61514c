// The decode kernel's scores of one warp tile: the score variants (softcap, ALiBi:
// include/fa2.h), then the mask of keys past the range and of the causal or local
// window. A thread holds rows lane / 4 and lane / 4 + 8 of the block's 16 (the kv
// head's rows from row0). Whether the variants are on is a block-uniform branch, not an
// instance: the kernel streams K and V at the memory's rate either way.
#pragma once

#include "common/mask.cuh"
#include "common/params.h"
#include "common/score_variants.cuh"
#include "common/seqinfo.cuh"
#include "decode/decode_traits.cuh"

namespace fa2 {

template <typename Tr>
struct DecodeScores {
    // The thread's two rows: ALiBi's slope in score units and the row's key position
    // (common/score_variants.cuh)
    float row_alibi[1][2] = {{0.f, 0.f}}, row_position[2] = {0.f, 0.f};
    float tanh_scale = 0.f;
    bool scored, alibi = false;
    // The softmax's scale: scored, the scores are natural-unit logits (log2(e))
    float score_log2;

    __device__ __forceinline__ DecodeScores(const fa2_params_t &p, const Sequence &seq,
                                            int group, int kv_head, int row0, int lane)
        : scored(p.scores != FA2_SCORES_PLAIN),
          score_log2(scored ? score_units_log2(p) : p.scale_log2)
    {
        if (scored) {
            tanh_scale = p.softcap > 0.f ? p.softmax_scale / p.softcap : 0.f;
            alibi = p.alibi_slopes != nullptr;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const DecodeRow row = decode_row(row0 + (lane >> 2) + 8 * h, group, kv_head);
                row_position[h] = static_cast<float>(row.token + seq.seqlen_k - seq.seqlen_q);
                if (alibi)
                    row_alibi[0][h] = alibi_in_score_units(p, alibi_slope(p, seq.batch, row.head));
            }
        }
    }

    // Scores s of keys key_first.. (< hi visible) for rows of tokens < seqlen_q; rows
    // padded past m_real compute harmless values that are never written.
    __device__ __forceinline__ void apply(float (&s)[1][Tr::kNTiles][4], int key_first,
                                          int hi, const KeyWindow &win, int seqlen_q,
                                          int row0, int m_real, int group, int lane) const
    {
        if (scored) {
            if (tanh_scale != 0.f) apply_softcap(s, tanh_scale);
            if (alibi) {
                const float key = static_cast<float>(key_first + 2 * (lane & 3));
                const float dist0[1][2] = {{row_position[0] - key, row_position[1] - key}};
                apply_alibi(s, row_alibi, dist0);
            }
        }
        if (key_first + Tr::kKeys > hi ||
            win.block_needs_mask(0, seqlen_q - 1, key_first, key_first + Tr::kKeys - 1)) {
#pragma unroll
            for (int nt = 0; nt < Tr::kNTiles; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int r = (lane >> 2) + 8 * (e >> 1);
                    const int key = key_first + nt * 8 + 2 * (lane & 3) + (e & 1);
                    const int token = (row0 + min(r, max(m_real - 1, 0))) / group;
                    if (key >= hi || !win.visible(token, key)) s[0][nt][e] = -INFINITY;
                }
        }
    }
};

}  // namespace fa2
