// C boundary for the backward: launches the kernels the plan named (p->bwd_kernel) for
// its head-dim bucket and dtype.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "bwd_run.h"
#include "common/bwd_dsink.cuh"
#include "common/elem_dispatch.h"
#include "common/launch.cuh"
#include "sm90/bwd_sm90_tiles.h"
#include "sm80/bwd_tiles.h"

// The mma.sync kernels of the bucket's main (kCompact 0) or compact tiles.
template <int kCompact>
static cudaError_t mma_dispatch(const fa2_params_t *p, cudaStream_t s, bool &queued)
{
    (void)s, (void)queued;  // a build without the compact tiles' buckets has no row
#define FA2_BWD_CASE(d)                                                                 \
    if (p->head_dim_bucket == d)                                                        \
        return fa2::with_elem(p->dtype, [&](auto e) {                                   \
            return fa2::bwd_run<FA2_ELEM(e), d, kCompact>(*p, s, queued);                \
        });
#define FA2_BWD_ROW(d, bn, bm, w, sl, qbm, qbn, qw) FA2_BWD_CASE(d)
    if constexpr (kCompact) {
        FA2_BWD_COMPACT_TILES(FA2_BWD_ROW)
    } else {
        FA2_BWD_TILES(FA2_BWD_ROW)
    }
#undef FA2_BWD_ROW
#undef FA2_BWD_CASE
    return cudaErrorInvalidValue;
}

static cudaError_t dispatch(const fa2_params_t *p, cudaStream_t s, bool &queued)
{
    switch (p->bwd_kernel) {
    case FA2_BWD_KERNEL_MMA:
        return mma_dispatch<0>(p, s, queued);
    case FA2_BWD_KERNEL_MMA_COMPACT:
        return mma_dispatch<1>(p, s, queued);
#if defined(FA2_WITH_SM90A)
    case FA2_BWD_KERNEL_WGMMA:
        // Without an accumulator (deterministic mode, split rows) bwd_sm90_run takes the
        // dQ-kernel route.
        switch (p->head_dim_bucket) {
#define FA2_BWD_SM90_CASE(d, wg, bm, sp)                                                \
    case d:                                                                             \
        return fa2::with_elem(p->dtype, [&](auto e) {                                   \
            return fa2::bwd_sm90_run<FA2_ELEM(e), d>(*p, s, queued);                     \
        });
            FA2_BWD_SM90_TILES(FA2_BWD_SM90_CASE)
#undef FA2_BWD_SM90_CASE
        default:
            return cudaErrorInvalidValue;
        }
#endif
    default:
        return cudaErrorInvalidValue;
    }
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
