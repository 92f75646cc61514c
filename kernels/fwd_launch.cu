// The one C boundary between src/ and the kernels: picks the compiled forward
// kernel for the plan's head-dim bucket, dtype and kernel family.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "decode/decode_tiles.h"
#include "fwd_run.h"
#include "sm90/fwd_sm90_tiles.h"
#include "sm80/fwd_tiles.h"

// The decode kernel of pipeline depth kStages for the plan's bucket and dtype.
template <int kStages>
static cudaError_t decode_launch(const fa2_params_t *p, cudaStream_t s)
{
    switch (p->head_dim_bucket) {
#define FA2_DECODE_CASE(d)                                                                \
    case d:                                                                               \
        return p->dtype == FA2_DTYPE_BF16 ? fa2::decode_run<__nv_bfloat16, d, kStages>(*p, s) \
                                          : fa2::decode_run<__half, d, kStages>(*p, s);
        FA2_DECODE_HEAD_DIMS(FA2_DECODE_CASE)
#undef FA2_DECODE_CASE
    default:
        return cudaErrorInvalidValue;
    }
}

extern "C" int fa2_fwd_launch(const fa2_params_t *p, void *stream)
{
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    if (p->decode_splits > 0) {  // the plan chose the decode kernel and its depth
#define FA2_DECODE_DEPTH_CASE(n) \
    if (p->decode_stages == n) return decode_launch<n>(p, s);
        FA2_DECODE_STAGE_COUNTS(FA2_DECODE_DEPTH_CASE)
#undef FA2_DECODE_DEPTH_CASE
        return cudaErrorInvalidValue;
    }
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
    // The mma.sync kernels: the table row whose tile is the plan's.
#define FA2_FWD_CASE(compact, d, m, n)                                                   \
    if (p->head_dim_bucket == d && p->block_m == m && p->block_n == n)                   \
        return p->dtype == FA2_DTYPE_BF16 ? fa2::fwd_run<__nv_bfloat16, d, compact>(*p, s) \
                                          : fa2::fwd_run<__half, d, compact>(*p, s);
#define FA2_FWD_MAIN_CASE(d, m, n, w) FA2_FWD_CASE(0, d, m, n)
#define FA2_FWD_COMPACT_CASE(d, m, n, w) FA2_FWD_CASE(1, d, m, n)
    FA2_FWD_TILES(FA2_FWD_MAIN_CASE)
    FA2_FWD_COMPACT_TILES(FA2_FWD_COMPACT_CASE)
#undef FA2_FWD_COMPACT_CASE
#undef FA2_FWD_MAIN_CASE
#undef FA2_FWD_CASE
    return cudaErrorInvalidValue;
}
