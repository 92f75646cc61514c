/* The Hopper (sm_90a, wgmma) forward kernel's compiled tiles, one row per head-dim
 * bucket it serves; read by the planner (C) and the kernels. Buckets without a row run
 * the mma.sync kernel (kernels/sm80/fwd_tiles.h) on every device. Why: docs/planning.md. */
#ifndef FA2_FWD_SM90_TILES_H
#define FA2_FWD_SM90_TILES_H

#include <stdint.h>

#include "common/built_buckets.h"
#include "common/params.h"

/* (head_dim_bucket, warpgroups (Br = 64 per warpgroup), block_n (Bc)). One warpgroup per
 * block at d = 64 and 128 lets two or three blocks share a multiprocessor, so one
 * block's softmax overlaps another's wgmma: +10-40% over two warpgroups on the H200
 * (docs/history/performance-log.md). At d = 256 shared memory allows one block per SM. */
#define FA2_WGMMA_TILE_D64 (64, 1, 128)
#define FA2_WGMMA_TILE_D128 (128, 1, 128)
#define FA2_WGMMA_TILE_D256 (256, 2, 64)

#define FA2_APPLY_SM90_TILE(X, tile) X tile
/* X(head_dim_bucket, warpgroups, block_n) */
#define FA2_FWD_SM90_TILES(X)                      \
    FA2_BUILT_D64(FA2_APPLY_SM90_TILE(X, FA2_WGMMA_TILE_D64))                  \
    FA2_BUILT_D128(FA2_APPLY_SM90_TILE(X, FA2_WGMMA_TILE_D128))                \
    FA2_BUILT_D256(FA2_APPLY_SM90_TILE(X, FA2_WGMMA_TILE_D256))

/* Shared memory: Q (Br rows), two K buffers and one V buffer (Bc rows each), plus
 * 1 KiB to align the tiles to wgmma's 1024-byte swizzle atoms. */
static inline int64_t fa2_fwd_sm90_smem_bytes(int64_t head_dim_bucket, int64_t block_m,
                                              int64_t block_n)
{
    return (block_m + 3 * block_n) * head_dim_bucket * 2 + 1024;
}

/* The producer layout (kernels/sm90/fwd_sm90_producer.cuh): at a bucket whose tile has
 * one warpgroup at d = 128, blocks of one producer warpgroup and
 * FA2_WGMMA_PRODUCER_WARPGROUPS math warpgroups (64 query rows each, one block per SM), Bc
 * as the tile's; which problems take it: src/plan_forward.c. */
#define FA2_WGMMA_PRODUCER_WARPGROUPS 2
#define FA2_WGMMA_HAS_PRODUCER(head_dim_bucket, warpgroups) \
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
#define FA2_WGMMA_PRODUCER_K_STAGES 2

/* The producer layout's shared memory: Q (block_m rows), its K buffers and two V buffers
 * (block_n rows each), plus the 1 KiB alignment pad. */
static inline FA2_WGMMA_CONSTEXPR int64_t fa2_fwd_sm90_producer_smem_bytes(
    int64_t head_dim_bucket, int64_t block_m, int64_t block_n)
{
    return (block_m + (FA2_WGMMA_PRODUCER_K_STAGES + 2) * block_n) * head_dim_bucket * 2 + 1024;
}


#endif
