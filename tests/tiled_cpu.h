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
#include "oracle_score.h"

/* Computes O and LSE (`lse` may be NULL) with query blocks of `block_m` rows and key
 * blocks of `block_n` rows (e.g. a fa2_plan_t's block_m/block_n). Rows with no allowed
 * key give O = 0 and LSE = -INFINITY. Returns 0, or -1 when a block size is < 1 or
 * memory runs out. */
int tiled_cpu_forward(const fa2_problem_t *p, int64_t block_m, int64_t block_n,
                      const float *q, const float *k, const float *v, float *o,
                      float *lse);

/* The same with the score variants `mod` (oracle_score.h; NULL: plain) and each query
 * block's keys cut into `splits` contiguous ranges of key blocks computed separately
 * and merged (a split decode's partials and combine). Softcap and ALiBi apply to each
 * score as it is made; the sink joins each row's denominator once, in the merge (with
 * splits = 1 too), not in the tile loop. A softcap of at most FA2_MAX_BOUNDED_SOFTCAP
 * (kernels/common/params.h) without ALiBi offsets each row by a fixed offset
 * (fa2_bounded_softcap_offset times the cap), not its running max, as the Hopper
 * forward does. */
int tiled_cpu_forward_scored(const fa2_problem_t *p, const oracle_score_t *mod,
                             int64_t block_m, int64_t block_n, int64_t splits, const float *q,
                             const float *k, const float *v, float *o, float *lse);

/* 1: model the Hopper forward's lazy rescale (FA2_LAZY_RESCALE_LOG2, common/params.h):
 * a row keeps its offset while its maximum grows by at most that many log2 units, so
 * that its exponentials reach up to 2^8 and nothing is rescaled. Default 0. */
extern int tiled_cpu_lazy_rescale;

#endif
