/* The score variants of today's models for the oracles (issue 18): logit softcap,
 * ALiBi and attention sinks, with the semantics libfa2 is to implement. NULL options
 * (or all off) give plain attention. For query row i, key j, query head h:
 *     x = scale · q_i·k_j                                   (the scaled score)
 *     s = cap · tanh(x / cap)                               (softcap > 0; else s = x)
 *     s −= slope_h · |i + seqlen_k − seqlen_q − j|          (ALiBi, bottom-right aligned)
 *     LSE_i = log(exp(σ_h) + Σ_j exp(s_ij)),  P_ij = exp(s_ij − LSE_i),  O_i = Σ_j P_ij v_j
 * over the row's visible keys, where σ_h is head h's sink logit (a softmax term with no
 * value; −inf without sinks). The LSE includes the sink. A row that sees no key has
 * O = 0 and LSE = σ_h. Host C only. */
#ifndef FA2_TESTS_ORACLE_SCORE_H
#define FA2_TESTS_ORACLE_SCORE_H

#include <stdint.h>

#include "fa2.h"

typedef struct oracle_score_t {
    double softcap;            /* 0: off */
    const float *alibi_slopes; /* [heads_q] or NULL */
    const float *sinks;        /* [heads_q] sink logits (natural units) or NULL */
} oracle_score_t;

/* s from x for (head h, row i, key j); `m` may be NULL. */
double oracle_score(const fa2_problem_t *p, const oracle_score_t *m, int64_t h, int64_t i,
                    int64_t j, double x);
/* ds/dx at x (softcap's 1 − tanh²; ALiBi adds a constant). */
double oracle_score_slope(const oracle_score_t *m, double x);
/* Head h's sink logit σ_h, −inf without sinks. */
double oracle_sink(const oracle_score_t *m, int64_t h);

#endif
