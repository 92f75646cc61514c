/* The backward kernels' compiled tiles, one row per head-dim bucket; read by the
 * planner (C) and the kernels. Why: docs/planning.md.
 *   dK/dV kernel: block_n keys per thread block, block_m queries per inner step,
 *                 warps, slices (dK/dV columns split over `slices` blocks so the two
 *                 accumulators fit in registers; each slice a multiple of 64 wide)
 *   dQ kernel:    dq_block_m queries per thread block, dq_block_n keys per step,
 *                 dq_warps */
#ifndef FA2_BWD_TILES_H
#define FA2_BWD_TILES_H

#include <stdint.h>

#include "common/built_buckets.h"

/* (d, block_n, block_m, warps, slices, dq_block_m, dq_block_n, dq_warps) */
#define FA2_BWD_TILE_D32 (32, 64, 64, 4, 1, 64, 64, 4)
#define FA2_BWD_TILE_D64 (64, 128, 64, 8, 1, 64, 64, 4)
#define FA2_BWD_TILE_D96 (96, 64, 32, 4, 1, 64, 32, 4)
#define FA2_BWD_TILE_D128 (128, 128, 32, 8, 1, 64, 32, 4)
#define FA2_BWD_TILE_D192 (192, 64, 32, 4, 3, 64, 32, 4)
#define FA2_BWD_TILE_D256 (256, 64, 16, 4, 2, 64, 16, 4)

#define FA2_APPLY_BWD_TILE(X, tile) X tile
/* X(d, block_n, block_m, warps, slices, dq_block_m, dq_block_n, dq_warps) */
#define FA2_BWD_TILES(X)                          \
    FA2_BUILT_D32(FA2_APPLY_BWD_TILE(X, FA2_BWD_TILE_D32))                    \
    FA2_BUILT_D64(FA2_APPLY_BWD_TILE(X, FA2_BWD_TILE_D64))                    \
    FA2_BUILT_D96(FA2_APPLY_BWD_TILE(X, FA2_BWD_TILE_D96))                    \
    FA2_BUILT_D128(FA2_APPLY_BWD_TILE(X, FA2_BWD_TILE_D128))                  \
    FA2_BUILT_D192(FA2_APPLY_BWD_TILE(X, FA2_BWD_TILE_D192))                  \
    FA2_BUILT_D256(FA2_APPLY_BWD_TILE(X, FA2_BWD_TILE_D256))

/* Compact tiles for 99 KiB devices (see fwd_tiles.h), for the buckets whose main tiles
 * need more in default (atomic-dQ) mode. Same columns as above. */
#define FA2_BWD_TILE_COMPACT_D128 (128, 64, 32, 4, 1, 64, 32, 4)
#define FA2_BWD_TILE_COMPACT_D192 (192, 64, 16, 4, 3, 64, 32, 4)

#define FA2_BWD_COMPACT_TILES(X)                          \
    FA2_BUILT_D128(FA2_APPLY_BWD_TILE(X, FA2_BWD_TILE_COMPACT_D128))          \
    FA2_BUILT_D192(FA2_APPLY_BWD_TILE(X, FA2_BWD_TILE_COMPACT_D192))

/* Shared memory of the dK/dV kernel: K and V (block_n rows), Q and dO double
 * buffered (block_m rows), LSE and D double buffered (block_m floats). */
static inline int64_t fa2_bwd_dkdv_smem_bytes(int64_t smem_cols, int64_t block_n,
                                              int64_t block_m)
{
    return (2 * block_n + 4 * block_m) * smem_cols * 2 + 4 * block_m * 4;
}

/* Extra shared memory of the dK/dV kernel when it also accumulates dQ (atomic
 * mode): dS of one step, block_m rows of block_n keys (rows at least 128 bytes). */
static inline int64_t fa2_bwd_ds_smem_bytes(int64_t block_n, int64_t block_m)
{
    return block_m * (block_n * 2 > 128 ? block_n * 2 : 128);
}

/* Shared memory of the dQ kernel: Q and dO (dq_block_m rows), K and V double
 * buffered (dq_block_n rows). */
static inline int64_t fa2_bwd_dq_smem_bytes(int64_t smem_cols, int64_t dq_block_m,
                                            int64_t dq_block_n)
{
    return (2 * dq_block_m + 4 * dq_block_n) * smem_cols * 2;
}

#endif
