/* Planning the forward kernel: which compiled kernel a problem runs on a device, its
 * tile and loader, and its score code (the policy; the tiles' shapes are the tables'). */
#include "common/params.h"
#include "sm80/fwd_tiles.h"
#include "sm90/fwd_sm90_tiles.h"
#include "internal.h"

/* Whether the Hopper forward offsets softcapped scores by a fixed offset (their bound 1
 * in score units, lower above a cap of 33: fa2_bounded_softcap_offset, common/params.h)
 * instead of a running maximum: softcap on and at most FA2_MAX_BOUNDED_SOFTCAP, no ALiBi
 * (its distances have no lower bound), bf16 (whose P has fp32's exponent; fp16's 5 bits
 * would lose every row whose largest score lies 24 log2 units under the offset). */
static int softcap_bounds_scores(int32_t dtype, float softcap, int alibi)
{
    return dtype == FA2_DTYPE_BF16 && softcap > 0.0f && softcap <= FA2_MAX_BOUNDED_SOFTCAP &&
           !alibi;
}

#if defined(FA2_WITH_SM90A)
/* Pages of fewer rows go by cp.async: on the H200 the paged forward by TMA (overlapped
 * loop) ran 0.93-0.95x cp.async's speed with 16-row boxes, 1.06x with 32. */
#define MIN_PAGED_BOX_ROWS 32

/* A paged cache's rows per TMA box for a tile of block_n keys, or 0 for cp.async: pages
 * and tiles nest (one's rows divide the other's), a box is whole 128-byte swizzle atoms
 * (8 rows) and at least MIN_PAGED_BOX_ROWS, and the cache's strides suit tensor maps. */
static int32_t page_box_rows(const fa2_problem_t *p, int64_t block_n)
{
    const int nest = p->page_size >= block_n ? p->page_size % block_n == 0
                                             : block_n % p->page_size == 0;
    const int64_t rows = p->page_size < block_n ? p->page_size : block_n;
    if (!nest || rows % 8 != 0 || rows < MIN_PAGED_BOX_ROWS)
        return 0;
    return fa2_tma_kv_strides(p->num_pages, p->page_size, p->heads_kv, p->k_batch_stride,
                              p->k_seq_stride, p->k_head_stride, p->v_batch_stride,
                              p->v_seq_stride, p->v_head_stride)
               ? (int32_t)rows
               : 0;
}

/* Whether the producer layout (FA2_WGMMA_HAS_PRODUCER) runs, in the overlapped loop's
 * cases (softcap off, or on and bounding the scores): paged, a paged cache; dense_rows: a
 * dense batch's seqlen_q (0: not dense). A dense batch takes the layout when its rows
 * reach the last math warpgroup's: at 64 rows or fewer the one-warpgroup tile runs two
 * blocks per SM where the producer layout would leave a math warpgroup without rows. */
static int takes_producer(int64_t head_dim_bucket, int64_t warpgroups, int paged,
                          int64_t dense_rows, int32_t dtype, float softcap, int alibi)
{
    const int dense = dense_rows > 64 * (FA2_WGMMA_PRODUCER_WARPGROUPS - 1);
    return (paged || dense) &&
           FA2_WGMMA_HAS_PRODUCER(head_dim_bucket, warpgroups) &&
           (softcap == 0.0f || softcap_bounds_scores(dtype, softcap, alibi));
}
#endif

int fa2_fwd_tile_for_device(int64_t bucket, const fa2_problem_t *problem,
                            const fa2_device_info_t *device, fa2_fwd_tile_t *tile)
{
    int32_t why = FA2_FWD_WHY_NOT_SM90A; /* why the mma.sync kernel, if it runs */
#if defined(FA2_WITH_SM90A)
    if (fa2_cc_runs_sm90a(device->cc_major, device->cc_minor)) {
        int hopper_tile = 0;
#define FA2_X(b, wg, bn) hopper_tile |= bucket == (b);
        FA2_FWD_SM90_TILES(FA2_X)
#undef FA2_X
        why = !hopper_tile                  ? FA2_FWD_WHY_NO_HOPPER_TILE
              : !fa2_kv_tma_ready(problem) ? FA2_FWD_WHY_KV_NOT_TMA
                                            : FA2_FWD_WHY_HOPPER;
    }
    if (why == FA2_FWD_WHY_HOPPER) {
/* A paged cache or a dense batch of enough rows may take the producer layout (its math
 * warpgroups and one more); other paged caches go by TMA boxes where pages and tiles
 * suit them, else by cp.async. */
#define FA2_X(b, wg, bn)                                                                   \
        if (bucket == (b)) {                                                               \
            const int producer = takes_producer(                                           \
                (b), (wg), problem->page_size != 0,                                        \
                problem->total_q == 0 ? problem->seqlen_q : 0, problem->dtype,             \
                problem->softcap, problem->alibi);                                         \
            const int math_wg = producer ? FA2_WGMMA_PRODUCER_WARPGROUPS : (wg);            \
            tile->head_dim_bucket = (b);                                                   \
            tile->block_m = 64 * math_wg;                                                  \
            tile->block_n = (bn);                                                          \
            tile->warps = 4 * (math_wg + producer);                                        \
            tile->arch = 90;                                                               \
            tile->page_box_rows = producer || !problem->page_size                          \
                                      ? 0 : page_box_rows(problem, (bn));                  \
            tile->kernel = producer                ? FA2_FWD_KERNEL_WGMMA_PRODUCER         \
                           : !problem->page_size   ? FA2_FWD_KERNEL_WGMMA                  \
                           : tile->page_box_rows   ? FA2_FWD_KERNEL_WGMMA_PAGED_TMA        \
                                                   : FA2_FWD_KERNEL_WGMMA_PAGED_COPY;      \
            tile->smem_bytes =                                                             \
                producer ? fa2_fwd_sm90_producer_smem_bytes((b), 64 * math_wg, (bn))       \
                         : fa2_fwd_sm90_smem_bytes((b), 64 * math_wg, (bn));               \
            tile->why = why;                                                               \
            return 1;                                                                      \
        }
        FA2_FWD_SM90_TILES(FA2_X)
#undef FA2_X
    }
#else
    (void)problem;
#endif
    if (!fa2_fwd_tile(bucket, tile))
        return 0;
    if (tile->smem_bytes > device->smem_per_block_optin)
        fa2_fwd_compact_tile(bucket, tile); /* where the main tile does not fit */
    tile->why = why;
    return 1;
}

/* The score code of forward kernel `kernel` (fa2_fwd_kernel_t): a bounded softcap only
 * in the Hopper prefill kernels. */
int32_t fa2_fwd_scores(const fa2_problem_t *pr, int32_t kernel)
{
    if (pr->softcap == 0.0f && !pr->alibi)
        return FA2_SCORES_PLAIN;
    if (kernel >= FA2_FWD_KERNEL_WGMMA && kernel <= FA2_FWD_KERNEL_WGMMA_PRODUCER &&
        softcap_bounds_scores(pr->dtype, pr->softcap, pr->alibi))
        return FA2_SCORES_BOUNDED_SOFTCAP;
    return FA2_SCORES_GENERAL;
}
