/* The backward kernels' parameters: the forward's plus the gradients. Plain C,
 * shared by src/ and kernels/. Internal, not installed. */
#ifndef FA2_BWD_PARAMS_H
#define FA2_BWD_PARAMS_H

#include "common/fwd_params.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fa2_bwd_params_t {
    fa2_fwd_params_t fwd; /* q, k, v, o, lse (required), sizes, strides, mask, scale */
    const void *d_o;      /* dLoss/dO, strides as o */
    void *dq;             /* strides as q */
    void *dk;             /* strides as k */
    void *dv;             /* strides as v */
    float *d_sum;         /* workspace: rowsum(dO * O), contiguous [batch, heads_q, seqlen_q] */
    float *dq_accum;      /* workspace: fp32 dQ / scale, [batch, heads_q, seqlen_q, head_dim];
                             NULL in deterministic mode (dQ from its own kernel, no atomics) */
    int32_t use_sm90;     /* 1: the plan chose the Hopper (wgmma) dK/dV kernel */
} fa2_bwd_params_t;

/* Launches the backward kernels on `stream`. Returns a cudaError_t value; every
 * fallible set-up comes before the first launch. *outputs_queued is set to 1 once a
 * kernel that writes dQ, dK or dV is queued (a failure after it may leave them
 * partly written), else 0. */
int fa2_bwd_launch(const fa2_bwd_params_t *p, void *stream, int *outputs_queued);

#ifdef __cplusplus
}
#endif

#endif
