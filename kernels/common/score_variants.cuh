// The score variants of include/fa2.h for the prefill kernels (one query head per
// block): on an m16n8 accumulator tile of raw q.k products (the layout apply_mask
// reads), x = scale * s, then softcap, then ALiBi; the results are natural-unit logits,
// so the softmax then scales by log2(e). The sink joins each row once, at the end
// (OnlineSoftmax::finish_with_sink).
#pragma once

#include <math.h>

#include "common/params.h"
#include "common/ptx.cuh"

namespace fa2 {

struct ScoreVariants {
    float scale;    // softmax_scale
    float softcap;  // 0 = off
    float slope;    // this head's ALiBi slope, 0 = off
    int offset;     // seqlen_k - seqlen_q: ALiBi's distance is |row + offset - key|

    __device__ __forceinline__ float operator()(float s, int row, int key) const
    {
        float x = s * scale;
        if (softcap > 0.f) x = softcap * tanhf(x / softcap);
        const int dist = row + offset - key;
        return x - slope * static_cast<float>(dist < 0 ? -dist : dist);
    }
};

// Query head `head`'s variants for a sequence of seqlen_q rows over seqlen_k keys.
__device__ __forceinline__ ScoreVariants score_variants(const fa2_params_t &p, int head,
                                                        int seqlen_q, int seqlen_k)
{
    return {p.softmax_scale, p.softcap, p.alibi_slopes ? __ldg(p.alibi_slopes + head) : 0.f,
            seqlen_k - seqlen_q};
}

// Head `head`'s sink in log2 units, -inf without sinks.
__device__ __forceinline__ float sink_log2(const fa2_params_t &p, int head)
{
    return p.sinks ? __ldg(p.sinks + head) * kLog2e : -INFINITY;
}

// The variants on Tr's tile: rows row0 + (mt, lane, e), keys key0 + (nt, lane, e).
template <typename Tr>
__device__ __forceinline__ void apply_score_variants(float (&s)[Tr::kMTiles][Tr::kNTiles][4],
                                                     const ScoreVariants &v, int row0, int key0,
                                                     int lane)
{
#pragma unroll
    for (int mt = 0; mt < Tr::kMTiles; ++mt)
#pragma unroll
        for (int nt = 0; nt < Tr::kNTiles; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int row = row0 + mt * 16 + (lane >> 2) + 8 * (e >> 1);
                const int key = key0 + nt * 8 + 2 * (lane & 3) + (e & 1);
                s[mt][nt][e] = v(s[mt][nt][e], row, key);
            }
}

}  // namespace fa2
