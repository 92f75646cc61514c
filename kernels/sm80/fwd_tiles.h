/* The forward kernel's compiled tile shapes, one row per head-dim bucket. Read by the
 * planner (src/plan.c, C) and by the kernels (template arguments), so the two cannot
 * disagree. Why each shape: see docs/planning.md. */
#ifndef FA2_FWD_TILES_H
#define FA2_FWD_TILES_H

#include <stdint.h>

#include "common/built_buckets.h"

/* (head_dim_bucket, block_m (Br), block_n (Bc), warps); planner and kernels read the
 * same rows (a sweep over other rows: bench/lab/tune_tiles.sh). */
#define FA2_TILE_D32 (32, 128, 64, 4)
#define FA2_TILE_D64 (64, 128, 64, 4)
#define FA2_TILE_D96 (96, 128, 32, 4)
#define FA2_TILE_D128 (128, 128, 32, 4)
#define FA2_TILE_D192 (192, 128, 32, 8)
#define FA2_TILE_D256 (256, 128, 32, 8)

#define FA2_APPLY_TILE(X, tile) X tile
/* X(head_dim_bucket, block_m, block_n, warps) for every compiled bucket. */
#define FA2_FWD_TILES(X)                 \
    FA2_BUILT_D32(FA2_APPLY_TILE(X, FA2_TILE_D32))                            \
    FA2_BUILT_D64(FA2_APPLY_TILE(X, FA2_TILE_D64))                            \
    FA2_BUILT_D96(FA2_APPLY_TILE(X, FA2_TILE_D96))                            \
    FA2_BUILT_D128(FA2_APPLY_TILE(X, FA2_TILE_D128))                          \
    FA2_BUILT_D192(FA2_APPLY_TILE(X, FA2_TILE_D192))                          \
    FA2_BUILT_D256(FA2_APPLY_TILE(X, FA2_TILE_D256))

/* Compact tiles: a second, smaller tile for the buckets whose main tile needs more than
 * 99 KiB of shared memory per block (RTX 30xx/40xx/50xx and other consumer GPUs allow
 * 101376 bytes). The planner runs the main tile where it fits and the compact one
 * where only that fits; the kernel is the same template. Same columns as above. */
#define FA2_TILE_COMPACT_D256 (256, 64, 32, 4)

/* X(head_dim_bucket, block_m, block_n, warps) for every compact tile. */
#define FA2_FWD_COMPACT_TILES(X) FA2_BUILT_D256(FA2_APPLY_TILE(X, FA2_TILE_COMPACT_D256))

/* Shared-memory row length in elements: the head dim rounded up to 64 (128-byte
 * rows), so that one XOR swizzle makes every ldmatrix conflict-free. */
static inline int64_t fa2_fwd_smem_cols(int64_t head_dim_bucket)
{
    return (head_dim_bucket + 63) / 64 * 64;
}

/* Shared memory of one block: Q tile (Br rows), two K buffers and one V buffer
 * (Bc rows each), 2-byte elements. */
static inline int64_t fa2_fwd_smem_bytes(int64_t head_dim_bucket, int64_t block_m,
                                         int64_t block_n)
{
    return (block_m + 3 * block_n) * fa2_fwd_smem_cols(head_dim_bucket) * 2;
}

#endif
