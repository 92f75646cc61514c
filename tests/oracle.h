/* The reference side of the tests: naive attention with double accumulation (the
 * oracle), a same-precision naive attention (what a framework's fp16/bf16 "math"
 * attention makes), fp16/bf16 bit conversions, a seeded RNG and error metrics.
 * Host C only: no CUDA header.
 *
 * Inputs are float arrays laid out as a fa2_problem_t says (batch/seq/head strides in
 * elements, head_dim stride 1); a test converts its fp16/bf16 data to float first.
 * Outputs are contiguous: O [batch, seqlen_q, heads_q, head_dim] (the problem's o_*
 * strides are ignored) and LSE [batch, heads_q, seqlen_q], natural log. */
#ifndef FA2_TESTS_ORACLE_H
#define FA2_TESTS_ORACLE_H

#include <stddef.h>
#include <stdint.h>

#include "fa2.h"
#include "oracle_score.h"

/* ---- masking: the rule of include/fa2.h, in one place ---------------------------- */

/* The softmax scale the problem means: softmax_scale, or 1/sqrt(head_dim) when 0. */
double oracle_softmax_scale(const fa2_problem_t *p);

/* The keys query row i may attend to are exactly *lo..*hi (inclusive), clipped to
 * [0, seqlen_k). Returns 0 (and *lo > *hi) when the row attends to nothing. Causal
 * counts as window_right = 0; windows are bottom-right aligned. */
int oracle_key_range(const fa2_problem_t *p, int64_t i, int64_t *lo, int64_t *hi);

/* ---- attention ------------------------------------------------------------------- */

/* O = softmax(scale * Q K^T + mask) V and LSE = log(sum_j exp(scale * q.k_j)), in
 * double. Query head h reads kv head h / (heads_q / heads_kv). Rows with no allowed
 * key give O = 0 and LSE = -INFINITY. `lse` may be NULL. Returns 0, or -1 when out
 * of memory (one row of scores is allocated). */
int oracle_forward(const fa2_problem_t *p, const float *q, const float *k,
                    const float *v, double *o, double *lse);

/* oracle_forward with the score variants of oracle_score.h (softcap, ALiBi, sinks);
 * `mod` NULL: oracle_forward. */
int oracle_forward_scored(const fa2_problem_t *p, const oracle_score_t *mod, const float *q,
                          const float *k, const float *v, double *o, double *lse);

/* The same attention computed the way a framework does it in p->dtype: scores
 * S = scale * Q K^T rounded to the dtype, P = softmax(S) (in double) rounded to the
 * dtype, O = P V rounded to the dtype. Its error against oracle_forward is the
 * yardstick for the GPU kernel ("no worse than 2x a same-precision naive attention").
 * Masked rows give O = 0. Returns 0, or -1 when out of memory. */
int oracle_forward_rounded(const fa2_problem_t *p, const float *q, const float *k,
                           const float *v, double *o);

/* oracle_forward_rounded with the score variants (applied to the rounded score in
 * double): the yardstick for them. Where O leaves the dtype's range (fp16 rows that a
 * large sink dominates) its error shows what the dtype can hold. */
int oracle_forward_scored_rounded(const fa2_problem_t *p, const oracle_score_t *mod,
                                  const float *q, const float *k, const float *v, double *o);

/* Elements a strided [batch, seq, heads, head_dim] tensor spans: the largest offset
 * plus one (0 when any extent is 0). Allocate this many to hold it. */
int64_t oracle_span(int64_t batch, int64_t seq, int64_t heads, int64_t head_dim,
                    int64_t batch_stride, int64_t seq_stride, int64_t head_stride);

/* ---- fp16 / bf16 (round to nearest even; NaN stays NaN, overflow gives inf) ------ */

uint16_t oracle_fp16_from_float(float x);
float oracle_float_from_fp16(uint16_t h);
uint16_t oracle_bf16_from_float(float x);
float oracle_float_from_bf16(uint16_t h);
/* The same for a fa2_dtype_t chosen at run time. */
uint16_t oracle_bits_from_float(float x, fa2_dtype_t dtype);
float oracle_float_from_bits(uint16_t h, fa2_dtype_t dtype);
/* x rounded to the dtype and back. */
float oracle_round(float x, fa2_dtype_t dtype);

/* ---- seeded random numbers (splitmix64) ------------------------------------------- */

typedef struct oracle_rng_t {
    uint64_t state;
} oracle_rng_t;

oracle_rng_t oracle_rng(uint64_t seed);
uint64_t oracle_rng_next(oracle_rng_t *rng);
/* Uniform in [lo, hi), 24 random bits. */
float oracle_rng_uniform(oracle_rng_t *rng, float lo, float hi);
/* Standard normal (Box-Muller). */
float oracle_rng_normal(oracle_rng_t *rng);

/* ---- error metrics ---------------------------------------------------------------- */

/* ||out - ref||_2 / ||ref||_2. When ||ref|| is 0 it returns ||out - ref||_2 (0 when
 * both are zero). Any NaN gives NaN; an inf in out gives inf (or NaN). */
double oracle_rel_l2(const double *out, const double *ref, size_t n);
/* max_i |out_i - ref_i|; NaN if any difference is NaN. */
double oracle_max_abs_err(const double *out, const double *ref, size_t n);

#endif
