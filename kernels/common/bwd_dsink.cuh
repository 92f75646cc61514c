// The sinks' gradient (include/fa2.h): one small kernel after the backward's others,
// which reads the forward's LSE and the D = rowsum(dO * O) the D pre-pass left in the
// workspace. The dQ, dK and dV kernels need nothing for sinks: the LSE they subtract
// includes the sink, and D sums over the keys only, as the sink has no value.
#pragma once

#include <math.h>
#include <stdint.h>

#include "common/params.h"

namespace fa2 {

constexpr int kDsinkThreads = 256;

// dsinks[h] = -sum over head h's query rows of exp(sink_h - LSE_i) * D_i, after
// dot_do_o_kernel (D in p.d_sum): the sink's share of each row's softmax times D is
// the gradient of its logit. One block per query head; each thread sums a fixed
// stride of rows, then a fixed tree: the same bits every run, no atomics. A sink of
// -inf has no share (0, also for rows whose LSE is -inf).
__global__ void __launch_bounds__(kDsinkThreads) dsink_kernel(const fa2_params_t p)
{
    __shared__ float part[kDsinkThreads];
    const int head = blockIdx.x, tid = threadIdx.x;
    const float sink = p.sinks[head];
    // Head `head`'s rows: a packed batch's [cu_seqlens_q[0], cu_seqlens_q[batch]) of
    // its stats row (kept inside the planned total_q whatever the offsets say), or
    // seqlen_q rows per sequence.
    const int64_t seqs = p.cu_seqlens_q ? 1 : p.batch;
    int64_t first = 0, rows = p.seqlen_q;
    if (p.cu_seqlens_q) {
        const int64_t total = p.total_q, lo = p.cu_seqlens_q[0], hi = p.cu_seqlens_q[p.batch];
        first = lo < 0 ? 0 : lo > total ? total : lo;
        rows = (hi < first ? first : hi > total ? total : hi) - first;
    }
    float sum = 0.f;
    if (sink != -INFINITY) {
        for (int64_t b = 0; b < seqs; ++b) {
            const int64_t base = b * p.stats_batch_stride + head * p.stats_head_stride + first;
            for (int64_t i = tid; i < rows; i += kDsinkThreads)
                sum = fmaf(-expf(sink - p.lse[base + i]), p.d_sum[base + i], sum);
        }
    }
    part[tid] = sum;
    __syncthreads();
#pragma unroll
    for (int half = kDsinkThreads / 2; half >= 1; half /= 2) {
        if (tid < half) part[tid] += part[tid + half];
        __syncthreads();
    }
    if (tid == 0) p.dsinks[head] = part[0];
}

}  // namespace fa2
