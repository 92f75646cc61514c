/* FlashAttention-2's forward algorithm on the CPU, in fp32 like the GPU kernel: the
 * algorithm itself, checked against the double oracle on every CI run. Host C only.
 *
 * For each (batch, head) and each block of Br query rows: stream the K/V blocks of Bc
 * rows that the mask leaves reachable, keep per row the running max m and running sum
 * l of exp(s - m), accumulate O unscaled (rescaled by exp(m_old - m_new) when the max
 * moves), divide by l once at the end, LSE = m + log(l). Inputs and outputs as in
 * oracle.h (float inputs with the problem's strides; contiguous O [batch, seqlen_q,
 * heads_q, head_dim] and LSE [batch, heads_q, seqlen_q], here float). */
#ifndef FA2_TESTS_TILED_CPU_H
#define FA2_TESTS_TILED_CPU_H

#include <stdint.h>

#include "fa2.h"

/* Computes O and LSE (`lse` may be NULL) with query blocks of `block_m` rows and key
 * blocks of `block_n` rows (e.g. a fa2_plan_t's block_m/block_n). Rows with no allowed
 * key give O = 0 and LSE = -INFINITY. Returns 0, or -1 when a block size is < 1 or
 * memory runs out. */
int tiled_cpu_forward(const fa2_problem_t *p, int64_t block_m, int64_t block_n,
                      const float *q, const float *k, const float *v, float *o,
                      float *lse);

#endif
