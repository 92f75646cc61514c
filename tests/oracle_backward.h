/* The reference side of the backward tests: the naive attention backward in double
 * (the oracle, checked against finite differences of oracle_forward) and its
 * same-precision twin (what a framework's fp16/bf16 "math" attention backward makes).
 * Host C only: no CUDA header. Conventions as in oracle.h.
 *
 * Inputs are float arrays laid out as the fa2_problem_t says: Q with the q_* strides,
 * K and V with the k_* and v_* strides, dO with the o_* strides (dO is laid out like
 * O). Outputs are contiguous doubles: dQ [batch, seqlen_q, heads_q, head_dim], dK and
 * dV [batch, seqlen_k, heads_kv, head_dim].
 *
 * The math, for one (batch, query head h, kv head h / (heads_q / heads_kv)):
 *     S = scale Q Kᵀ (masked entries excluded), P = softmax(S) by rows (rows that see
 *     no key: P = 0), O = P V, D_i = Σ_c dO_ic O_ic (= Σ_j P_ij dP_ij),
 *     dV = Pᵀ dO, dP = dO Vᵀ, dS = P ∘ (dP − D), dQ = scale dS K, dK = scale dSᵀ Q;
 * with GQA/MQA, dK and dV are summed over the query heads that share a kv head. */
#ifndef FA2_TESTS_ORACLE_BACKWARD_H
#define FA2_TESTS_ORACLE_BACKWARD_H

#include "fa2.h"
#include "oracle_score.h"

/* dQ, dK, dV of the loss whose gradient with respect to O is dO, in double.
 * Returns 0, or -1 when out of memory (a few rows of scratch are allocated). */
int oracle_backward(const fa2_problem_t *p, const float *q, const float *k, const float *v,
                    const float *d_o, double *dq, double *dk, double *dv);

/* oracle_backward with the score variants of oracle_score.h (`mod` NULL: plain):
 * dS_ij = P_ij (dP_ij − D_i) ds/dx_ij (softcap's derivative), and, with sinks, each
 * query head's sink gradient dL/dσ_h = −Σ_i P_sink,i D_i (P_sink,i = exp(σ_h − LSE_i)),
 * summed over the batch, into dsinks [heads_q] (may be NULL). */
int oracle_backward_scored(const fa2_problem_t *p, const oracle_score_t *mod, const float *q,
                           const float *k, const float *v, const float *d_o, double *dq,
                           double *dk, double *dv, double *dsinks);

/* The same gradients computed the way a framework's autograd does it in p->dtype
 * from inputs already rounded to the dtype: the forward's S and P rounded, then
 * dP = dO Vᵀ rounded, D = Σ_j P_ij dP_ij, dS = P ∘ (dP − D) rounded, and dQ, dK, dV
 * rounded (with GQA, each query head's dK/dV rounded, then their sum rounded, as the
 * gradient of an expanded K/V is). Every product accumulates in double; only the
 * stored intermediates are rounded. Its error against oracle_backward is the yardstick
 * for the GPU kernels ("no worse than 2x a same-precision naive backward").
 * Returns 0, or -1 when out of memory. */
int oracle_backward_rounded(const fa2_problem_t *p, const float *q, const float *k,
                            const float *v, const float *d_o, double *dq, double *dk,
                            double *dv);

/* oracle_backward_rounded with the score variants (and the sinks' gradient, from the
 * rounded intermediates): their yardstick. */
int oracle_backward_scored_rounded(const fa2_problem_t *p, const oracle_score_t *mod,
                                   const float *q, const float *k, const float *v,
                                   const float *d_o, double *dq, double *dk, double *dv,
                                   double *dsinks);

/* What rounding one stored row of O (head_dim values in `dtype`, as bits) can move
 * that row's term P_sink D_i of dsinks by: p_sink Σ_c |dO_c| (u |O_c| + t / 2), u the
 * dtype's relative rounding (2^-8 bf16, 2^-11 fp16), t its smallest subnormal (an O
 * that underflows is stored as 0). Summed over a head's rows: the bound of the GPU's
 * dsinks against oracle_backward_scored's, since D cancels and only O's rounding
 * separates them. */
double oracle_dsink_row_rounding(fa2_dtype_t dtype, int64_t head_dim, const float *d_o,
                                 const uint16_t *o_bits, double p_sink);

#endif
