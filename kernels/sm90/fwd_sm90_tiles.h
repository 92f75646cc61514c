/* The Hopper (sm_90a, wgmma) forward kernel's compiled tiles, one row per head-dim
 * bucket it serves; read by the planner (C) and the kernels. Buckets without a row run
 * the mma.sync kernel (kernels/sm80/fwd_tiles.h) on every device. Why: docs/planning.md. */
#ifndef FA2_FWD_SM90_TILES_H
#define FA2_FWD_SM90_TILES_H

#include <stdint.h>

#include "common/built_buckets.h"
#include "common/params.h"

/* (head_dim_bucket, warpgroups (Br = 64 per warpgroup), block_n (Bc)); each can be
 * overridden for tuning (CMake -DFA2_SM90_TILE_D128="128,2,128"). One warpgroup per
 * block at d = 64 and 128 lets two or three blocks share a multiprocessor, so one
 * block's softmax overlaps another's wgmma: +10-40% over two warpgroups on the H200
 * (docs/history/performance-log.md). At d = 256 shared memory allows one block per SM. */
#if defined(FA2_TILE_OVERRIDES) && !defined(FA2_TILE_OVERRIDES_INCLUDED)
#define FA2_TILE_OVERRIDES_INCLUDED
#include "fa2_tile_overrides.h"
#endif
#ifndef FA2_SM90_TILE_D64
#define FA2_SM90_TILE_D64 (64, 1, 128)
#endif
#ifndef FA2_SM90_TILE_D128
#define FA2_SM90_TILE_D128 (128, 1, 128)
#endif
#ifndef FA2_SM90_TILE_D256
#define FA2_SM90_TILE_D256 (256, 2, 64)
#endif

#define FA2_APPLY_SM90_TILE(X, tile) X tile
/* X(head_dim_bucket, warpgroups, block_n) */
#define FA2_FWD_SM90_TILES(X)                      \
    FA2_BUILT_D64(FA2_APPLY_SM90_TILE(X, FA2_SM90_TILE_D64))                  \
    FA2_BUILT_D128(FA2_APPLY_SM90_TILE(X, FA2_SM90_TILE_D128))                \
    FA2_BUILT_D256(FA2_APPLY_SM90_TILE(X, FA2_SM90_TILE_D256))

/* Shared memory: Q (Br rows), two K buffers and one V buffer (Bc rows each), plus
 * 1 KiB to align the tiles to wgmma's 1024-byte swizzle atoms. */
static inline int64_t fa2_fwd_sm90_smem_bytes(int64_t head_dim_bucket, int64_t block_m,
                                              int64_t block_n)
{
    return (block_m + 3 * block_n) * head_dim_bucket * 2 + 1024;
}

/* Whether the Hopper forward offsets softcapped scores by a fixed offset (their bound 1
 * in score units, lower above a cap of 33: fa2_bounded_softcap_offset, common/params.h)
 * instead of a running maximum: softcap on and at most FA2_MAX_BOUNDED_SOFTCAP, no ALiBi
 * (its distances have no lower bound), bf16 (whose P has fp32's exponent; fp16's 5 bits
 * would lose every row whose largest score lies 24 log2 units under the offset). */
static inline int fa2_sm90_softcap_bounds_scores(int32_t dtype, float softcap, int alibi)
{
    return dtype == FA2_DTYPE_BF16 && softcap > 0.0f && softcap <= FA2_MAX_BOUNDED_SOFTCAP &&
           !alibi;
}

/* The paged forward's producer layout (kernels/sm90/fwd_sm90_producer.cuh): at a bucket
 * whose tile has one warpgroup at d = 128, a paged cache runs blocks of one producer
 * warpgroup and FA2_SM90_PRODUCER_WARPGROUPS math warpgroups (64 query rows each, one
 * block per SM), Bc as the tile's, in the overlapped loop's cases: softcap off, or on
 * and bounding the scores. */
#define FA2_SM90_PRODUCER_WARPGROUPS 2
#define FA2_SM90_HAS_PRODUCER(head_dim_bucket, warpgroups) \
    ((head_dim_bucket) == 128 && (warpgroups) == 1)

/* Dense batches run in the producer layout too (the producer issuing TMA's
 * boxes), and its two math warpgroups take turns at issuing their products, so that
 * one's softmax runs while the other's products do (dense d = 128 forward 1.05-1.10x
 * faster on the H200; docs/history/performance-log.md, "Pingpong, the dense producer,
 * lazy rescale and the FMA-pipe exp2, measured"). */
/* K buffers of the producer layout (V has 2): the next K tile's copy is issued a tile
 * ahead, at 32 KiB more shared memory than one buffer (d = 128); dense d = 128 forwards
 * without a causal mask ran 1.03-1.12x faster with two on the H200
 * (docs/history/performance-log.md, "Two K buffers, measured"). */
#define FA2_SM90_PRODUCER_K_STAGES 2

/* The producer layout's shared memory: Q (block_m rows), its K buffers and two V buffers
 * (block_n rows each), plus the 1 KiB alignment pad. */
static inline FA2_SM90_CONSTEXPR int64_t fa2_fwd_sm90_producer_smem_bytes(
    int64_t head_dim_bucket, int64_t block_m, int64_t block_n)
{
    return (block_m + (FA2_SM90_PRODUCER_K_STAGES + 2) * block_n) * head_dim_bucket * 2 + 1024;
}

/* Pages of fewer rows go by cp.async: on the H200 the paged forward by TMA (overlapped
 * loop) ran 0.93-0.95x cp.async's speed with 16-row boxes, 1.06x with 32. */
#define FA2_SM90_MIN_PAGED_BOX_ROWS 32

/* A paged cache's rows per TMA box for a tile of block_n keys, or 0 for cp.async: pages
 * and tiles nest (one's rows divide the other's), a box is whole 128-byte swizzle atoms
 * (8 rows) and at least FA2_SM90_MIN_PAGED_BOX_ROWS, and the cache's strides suit tensor
 * maps. */
static inline int32_t fa2_fwd_sm90_page_box_rows(const fa2_problem_t *p, int64_t block_n)
{
    const int nest = p->page_size >= block_n ? p->page_size % block_n == 0
                                             : block_n % p->page_size == 0;
    const int64_t rows = p->page_size < block_n ? p->page_size : block_n;
    if (!nest || rows % 8 != 0 || rows < FA2_SM90_MIN_PAGED_BOX_ROWS)
        return 0;
    return fa2_tma_kv_strides(p->num_pages, p->page_size, p->heads_kv, p->k_batch_stride,
                              p->k_seq_stride, p->k_head_stride, p->v_batch_stride,
                              p->v_seq_stride, p->v_head_stride)
               ? (int32_t)rows
               : 0;
}

/* paged: a paged cache; dense_rows: a dense batch's seqlen_q (0: not dense, a packed
 * batch when not paged either). A dense batch takes the layout when its rows reach the
 * last math warpgroup's: at 64 rows or fewer the one-warpgroup tile runs two blocks per
 * SM where the producer layout would leave a math warpgroup without rows. */
static inline int fa2_fwd_sm90_takes_producer(int64_t head_dim_bucket, int64_t warpgroups,
                                              int paged, int64_t dense_rows, int32_t dtype,
                                              float softcap, int alibi)
{
    const int dense = dense_rows > 64 * (FA2_SM90_PRODUCER_WARPGROUPS - 1);
    return (paged || dense) &&
           FA2_SM90_HAS_PRODUCER(head_dim_bucket, warpgroups) &&
           (softcap == 0.0f || fa2_sm90_softcap_bounds_scores(dtype, softcap, alibi));
}

#endif
