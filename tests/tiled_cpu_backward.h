/* FlashAttention-2's backward algorithm (Algorithm 2) on the CPU, in fp32 like the GPU
 * kernels: the algorithm itself, checked against the double oracle_backward on every
 * CI run. Host C only.
 *
 * D_i = rowsum(dO_i ∘ O_i) first. Then for each (batch, kv head) and each block of
 * block_n keys: dK_j = dV_j = 0; for each query head of the GQA group and each block
 * of block_m query rows that can see a key of the block: recompute S = Q_i K_jᵀ and
 * P = exp(scale S − LSE_i) (0 where masked), dV_j += Pᵀ dO_i, dP = dO_i V_jᵀ,
 * dS = P ∘ (dP − D_i), dQ_i += scale dS K_j (an fp32 accumulator in memory, as the
 * paper writes dQ back to HBM), dK_j += dSᵀ Q_i; finally dK_j *= scale.
 *
 * Inputs as in oracle_backward.h (float, the problem's strides; O and dO with the o_*
 * strides), plus the forward's LSE (float [batch, heads_q, seqlen_q], natural log,
 * -INFINITY on rows that see no key). Outputs contiguous float: dQ [batch, seqlen_q,
 * heads_q, head_dim], dK and dV [batch, seqlen_k, heads_kv, head_dim]. */
#ifndef FA2_TESTS_TILED_CPU_BACKWARD_H
#define FA2_TESTS_TILED_CPU_BACKWARD_H

#include <stdint.h>

#include "fa2.h"

/* Computes dQ, dK, dV with key blocks of `block_n` rows and query blocks of `block_m`
 * rows (e.g. a fa2_plan_t's bwd_block_n / bwd_block_m). Returns 0, or -1 when a block
 * size is < 1 or memory runs out. */
int tiled_cpu_backward(const fa2_problem_t *p, int64_t block_n, int64_t block_m,
                       const float *q, const float *k, const float *v, const float *o,
                       const float *d_o, const float *lse, float *dq, float *dk, float *dv);

#endif
