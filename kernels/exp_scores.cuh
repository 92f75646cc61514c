// The backward kernels' recomputed probabilities: acc = exp2(scale_log2 · acc + c) with
// c = −LSE·log2(e) of the element's query row, zero where the key is not visible. The
// per-element mask runs only in blocks that need one, and that test stays outside the
// element loop: written inside it, the compiler branched at every element and the
// exponentials no longer overlapped (docs/performance.md, "Hopper backward, fourth pass").
#pragma once

#include "ptx.cuh"

namespace fa2 {

// neg_lse_log2(n, e): c of element (n, e); visible(n, e): whether its key is visible.
template <int kN, typename NegLseLog2, typename Visible>
__device__ __forceinline__ void exp_scores(float (&acc)[kN][4], float scale_log2, bool masked,
                                           NegLseLog2 neg_lse_log2, Visible visible)
{
    if (masked) {
#pragma unroll
        for (int n = 0; n < kN; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const float x = exp2_approx(fmaf(acc[n][e], scale_log2, neg_lse_log2(n, e)));
                acc[n][e] = visible(n, e) ? x : 0.f;
            }
    } else {
#pragma unroll
        for (int n = 0; n < kN; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                acc[n][e] = exp2_approx(fmaf(acc[n][e], scale_log2, neg_lse_log2(n, e)));
    }
}

}  // namespace fa2
