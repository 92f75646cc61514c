// The one C boundary between src/ and the kernels: picks the compiled forward
// kernel for the plan's head-dim bucket, dtype and kernel family.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "fwd_run.h"
#include "sm90/fwd_sm90_tiles.h"
#include "sm80/fwd_tiles.h"

extern "C" int fa2_fwd_launch(const fa2_params_t *p, void *stream)
{
    cudaStream_t s = static_cast<cudaStream_t>(stream);
#if defined(FA2_WITH_SM90A)
    if (p->kernel_family == 90) {
        switch (p->head_dim_bucket) {
#define FA2_FWD_SM90_CASE(d, wg, n)                                          \
    case d:                                                                  \
        return p->dtype == FA2_DTYPE_BF16 ? fa2::fwd_sm90_run<__nv_bfloat16, d>(*p, s)      \
                          : fa2::fwd_sm90_run<__half, d>(*p, s);
            FA2_FWD_SM90_TILES(FA2_FWD_SM90_CASE)
#undef FA2_FWD_SM90_CASE
        default:
            break;
        }
    }
#endif
    switch (p->head_dim_bucket) {
#define FA2_FWD_CASE(d, m, n, w)                                             \
    case d:                                                                  \
        return p->dtype == FA2_DTYPE_BF16 ? fa2::fwd_run<__nv_bfloat16, d>(*p, s)           \
                          : fa2::fwd_run<__half, d>(*p, s);
        FA2_FWD_TILES(FA2_FWD_CASE)
#undef FA2_FWD_CASE
    default:
        return cudaErrorInvalidValue;
    }
}
