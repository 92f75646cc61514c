// C boundary for the backward: picks the compiled kernels for the plan's head-dim
// bucket, dtype and kernel family.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "bwd_run.h"
#include "common/bwd_dsink.cuh"
#include "common/launch.cuh"
#include "sm90/bwd_sm90_tiles.h"
#include "sm80/bwd_tiles.h"

static cudaError_t dispatch(const fa2_params_t *p, cudaStream_t s, bool &queued)
{
#if defined(FA2_WITH_SM90A)
    // The plan picks sm90 for the Hopper rows in both modes; without an accumulator
    // (deterministic mode, split rows) bwd_sm90_run takes the dQ-kernel route.
    if (p->kernel_family == 90) {
        switch (p->head_dim_bucket) {
#define FA2_BWD_SM90_CASE(d, wg, bm, sp)                                           \
    case d:                                                                        \
        return p->dtype == FA2_DTYPE_BF16 ? fa2::bwd_sm90_run<__nv_bfloat16, d>(*p, s, queued) \
                              : fa2::bwd_sm90_run<__half, d>(*p, s, queued);
            FA2_BWD_SM90_TILES(FA2_BWD_SM90_CASE)
#undef FA2_BWD_SM90_CASE
        default:
            break;
        }
    }
#endif
    // The mma.sync kernels: the table row whose tiles are the plan's.
#define FA2_BWD_CASE(compact, d, bn, bm)                                                       \
    if (p->head_dim_bucket == d && p->block_n == bn && p->block_m == bm)                       \
        return p->dtype == FA2_DTYPE_BF16 ? fa2::bwd_run<__nv_bfloat16, d, compact>(*p, s, queued) \
                                          : fa2::bwd_run<__half, d, compact>(*p, s, queued);
#define FA2_BWD_MAIN_CASE(d, bn, bm, w, sl, qbm, qbn, qw) FA2_BWD_CASE(0, d, bn, bm)
#define FA2_BWD_COMPACT_CASE(d, bn, bm, w, sl, qbm, qbn, qw) FA2_BWD_CASE(1, d, bn, bm)
    FA2_BWD_TILES(FA2_BWD_MAIN_CASE)
    FA2_BWD_COMPACT_TILES(FA2_BWD_COMPACT_CASE)
#undef FA2_BWD_COMPACT_CASE
#undef FA2_BWD_MAIN_CASE
#undef FA2_BWD_CASE
    return cudaErrorInvalidValue;
}

extern "C" int fa2_bwd_launch(const fa2_params_t *p, void *stream, int *outputs_queued)
{
    bool queued = false;
    const cudaStream_t s = static_cast<cudaStream_t>(stream);
    cudaError_t err = dispatch(p, s, queued);
    if (err == cudaSuccess && p->dsinks)  // after the D pre-pass, in stream order
        err = fa2::launch(fa2::dsink_kernel, p->heads_q, fa2::kDsinkThreads, 0, s, *p);
    *outputs_queued = queued;
    return err;
}
