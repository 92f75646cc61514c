/* The Hopper (sm_90a, wgmma) dK/dV kernel's compiled tiles, one row per head-dim
 * bucket it serves; read by the planner (C) and the kernels. It runs on sm_90 devices
 * in both modes (dQ by atomics, or by the Hopper dQ kernel: deterministic mode and
 * split rows); other buckets and devices run the mma.sync kernels
 * (kernels/sm80/bwd_tiles.h). Why: docs/planning.md. */
#ifndef FA2_BWD_SM90_TILES_H
#define FA2_BWD_SM90_TILES_H

#include <stdint.h>

#include "common/built_buckets.h"

#include "common/params.h" /* FA2_WGMMA_CONSTEXPR */

/* (head_dim_bucket, warpgroups, block_m (queries per step), split).
 *   split 0: block_n = 64 keys per warpgroup; block_m = 64, or 64 per warpgroup.
 *   split 1: block_n = 64 keys shared by two warpgroups that split each step's work and
 *            the d columns (kernels/sm90/bwd_sm90_split_kernel.cuh), block_m = 64: for head
 *            dims whose dK and dV (64 × d each) do not fit one warpgroup's registers. */
#define FA2_WGMMA_BWD_TILE_D64 (64, 2, 128, 0)
#define FA2_WGMMA_BWD_TILE_D128 (128, 2, 64, 0)
#define FA2_WGMMA_BWD_TILE_D256 (256, 2, 64, 1)

#define FA2_APPLY_SM90_BWD_TILE(X, tile) X tile
/* X(head_dim_bucket, warpgroups, block_m, split) */
#define FA2_BWD_SM90_TILES(X)                          \
    FA2_BUILT_D64(FA2_APPLY_SM90_BWD_TILE(X, FA2_WGMMA_BWD_TILE_D64))          \
    FA2_BUILT_D128(FA2_APPLY_SM90_BWD_TILE(X, FA2_WGMMA_BWD_TILE_D128))        \
    FA2_BUILT_D256(FA2_APPLY_SM90_BWD_TILE(X, FA2_WGMMA_BWD_TILE_D256))

/* 1 when the bucket's row is split (0 when it has none). Split rows compute dQ in the
 * Hopper dQ kernel, without atomics, in both modes. */
static inline int fa2_bwd_sm90_split(int64_t head_dim_bucket)
{
    (void)head_dim_bucket; /* a build without the Hopper buckets has no row */
#define FA2_BWD_SM90_SPLIT_OF(d, wg, bm, split) \
    if (head_dim_bucket == d) return split;
    FA2_BWD_SM90_TILES(FA2_BWD_SM90_SPLIT_OF)
#undef FA2_BWD_SM90_SPLIT_OF
    return 0;
}

/* The Hopper dQ kernel (kernels/sm90/bwd_sm90_dq_kernel.cuh; deterministic mode, and split
 * rows): 128 query rows per thread block (a warpgroup per 64), 64 keys per step.
 * Shared memory: Q and dO (128 rows), K double buffered and V (64 rows), 1 KiB for
 * 1024-byte alignment. */
#define FA2_BWD_SM90_DQ_BLOCK_M 128
#define FA2_BWD_SM90_DQ_BLOCK_N 64
static inline FA2_WGMMA_CONSTEXPR int64_t fa2_bwd_sm90_dq_smem_bytes(int64_t head_dim_bucket)
{
    return (2 * FA2_BWD_SM90_DQ_BLOCK_M + 3 * FA2_BWD_SM90_DQ_BLOCK_N) * head_dim_bucket * 2 + 1024;
}

/* Keys per thread block. */
static inline FA2_WGMMA_CONSTEXPR int64_t fa2_bwd_sm90_block_n(int64_t warpgroups, int64_t split)
{
    return split ? 64 : 64 * warpgroups;
}

/* Shared memory: K and V (block_n rows), Q and dO double buffered (block_m rows), dSᵀ
 * (block_n × block_m; split: also Pᵀ, and P in fp32), LSE and D double buffered; not
 * split: a step's dQ staged in fp32 for the dQ writer warpgroup (block_m rows of d
 * floats + 16 bytes) and its two mbarriers; 1 KiB for 1024-byte alignment. */
static inline FA2_WGMMA_CONSTEXPR int64_t fa2_bwd_sm90_smem_bytes(int64_t head_dim_bucket,
                                                                 int64_t block_n, int64_t block_m,
                                                                 int64_t split)
{
    return (2 * block_n + 4 * block_m) * head_dim_bucket * 2 +
           block_n * block_m * (split ? 8 : 2) + 4 * block_m * 4 +
           (split ? 0 : block_m * (head_dim_bucket * 4 + 16) + 16) + 1024;
}

#endif
