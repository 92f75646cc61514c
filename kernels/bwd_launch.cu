// C boundary for the backward: picks the compiled kernels for the plan's head-dim
// bucket and dtype.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "bwd_run.h"
#include "bwd_tiles.h"

extern "C" int fa2_bwd_launch(const fa2_bwd_params_t *p, void *stream)
{
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    switch (p->fwd.head_dim_bucket) {
#define FA2_BWD_CASE(d, bn, bm, w, sl, qbm, qbn, qw)                         \
    case d:                                                                  \
        return p->fwd.is_bf16 ? fa2::bwd_run<__nv_bfloat16, d>(*p, s)       \
                              : fa2::bwd_run<__half, d>(*p, s);
        FA2_BWD_TILES(FA2_BWD_CASE)
#undef FA2_BWD_CASE
    default:
        return cudaErrorInvalidValue;
    }
}
