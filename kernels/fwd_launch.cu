// The one C boundary between src/ and the kernels: launches the forward kernel the plan
// named (p->fwd_kernel) for its head-dim bucket and dtype.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common/elem_dispatch.h"
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
        return fa2::with_elem(p->dtype, [&](auto e) {                                    \
            return fa2::decode_run<FA2_ELEM(e), d, kStages>(*p, s);                       \
        });
        FA2_DECODE_HEAD_DIMS(FA2_DECODE_CASE)
#undef FA2_DECODE_CASE
    default:
        return cudaErrorInvalidValue;
    }
}

// The mma.sync kernel of the bucket's main (kCompact 0) or compact tile.
template <int kCompact>
static cudaError_t mma_launch(const fa2_params_t *p, cudaStream_t s)
{
    (void)s;  // a build without the compact tiles' buckets has no row
#define FA2_FWD_CASE(d)                                                                  \
    if (p->head_dim_bucket == d)                                                         \
        return fa2::with_elem(p->dtype, [&](auto e) {                                   \
            return fa2::fwd_run<FA2_ELEM(e), d, kCompact>(*p, s);                        \
        });
#define FA2_FWD_ROW(d, m, n, w) FA2_FWD_CASE(d)
    if constexpr (kCompact) {
        FA2_FWD_COMPACT_TILES(FA2_FWD_ROW)
    } else {
        FA2_FWD_TILES(FA2_FWD_ROW)
    }
#undef FA2_FWD_ROW
#undef FA2_FWD_CASE
    return cudaErrorInvalidValue;
}

extern "C" int fa2_fwd_launch(const fa2_params_t *p, void *stream)
{
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    switch (p->fwd_kernel) {
    case FA2_FWD_KERNEL_DECODE:
#define FA2_DECODE_DEPTH_CASE(n) \
    if (p->decode_stages == n) return decode_launch<n>(p, s);
        FA2_DECODE_STAGE_COUNTS(FA2_DECODE_DEPTH_CASE)
#undef FA2_DECODE_DEPTH_CASE
        return cudaErrorInvalidValue;
    case FA2_FWD_KERNEL_MMA:
        return mma_launch<0>(p, s);
    case FA2_FWD_KERNEL_MMA_COMPACT:
        return mma_launch<1>(p, s);
#if defined(FA2_WITH_SM90A)
    case FA2_FWD_KERNEL_WGMMA:
    case FA2_FWD_KERNEL_WGMMA_PAGED_TMA:
    case FA2_FWD_KERNEL_WGMMA_PAGED_COPY:
    case FA2_FWD_KERNEL_WGMMA_PRODUCER:
        switch (p->head_dim_bucket) {
#define FA2_FWD_SM90_CASE(d, wg, n)                                                     \
    case d:                                                                             \
        return fa2::with_elem(p->dtype, [&](auto e) {                                  \
            return fa2::fwd_sm90_run<FA2_ELEM(e), d>(*p, s);                            \
        });
            FA2_FWD_SM90_TILES(FA2_FWD_SM90_CASE)
#undef FA2_FWD_SM90_CASE
        default:
            return cudaErrorInvalidValue;
        }
#endif
    default:
        return cudaErrorInvalidValue;
    }
}
