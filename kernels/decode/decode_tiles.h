/* The decode kernel's compiled shape (kernels/decode/decode_kernel.cuh), read by the
 * planner (C) and the kernel: which head-dim buckets have it, how many tokens it
 * takes, how a kv head's rows (query heads per kv head times query tokens) go to warps
 * and blocks, keys per tile, shared memory. */
#ifndef FA2_DECODE_TILES_H
#define FA2_DECODE_TILES_H

#include "common/built_buckets.h"

/* X(head_dim_bucket) */
#define FA2_DECODE_HEAD_DIMS(X) FA2_BUILT_D64(X(64)) FA2_BUILT_D128(X(128)) FA2_BUILT_D256(X(256))

#define FA2_DECODE_ROWS 16  /* one mma row tile: a warp's rows */
/* The most query tokens a sequence may have. */
#define FA2_DECODE_MAX_TOKENS 16
/* A block's row warps for `rows` = query heads per kv head x seqlen_q: 1, 2 or 4 row
 * tiles of 16 rows, each a warp, that compute every key tile the block loads once.
 * The other warps of the block's four stream other key tiles (4 / row warps streams),
 * merged at the end. */
#define FA2_DECODE_ROW_WARPS(rows) \
    ((rows) <= FA2_DECODE_ROWS ? 1 : (rows) <= 2 * FA2_DECODE_ROWS ? 2 : 4)
#define FA2_DECODE_BLOCK_ROWS(rows) (FA2_DECODE_ROWS * FA2_DECODE_ROW_WARPS(rows))
/* A kv head's blocks: more than 64 rows take several, neighbours in the grid */
#define FA2_DECODE_ROW_BLOCKS(rows) \
    (((rows) + FA2_DECODE_BLOCK_ROWS(rows) - 1) / FA2_DECODE_BLOCK_ROWS(rows))
#define FA2_DECODE_WARPS 4
/* Stages: K/V slots per warp (the pipeline's depth), chosen at run time: the deepest
 * whose shared memory fits the device (3 on H100/H200: 193 to 225 KiB by head dim and
 * row warps; 2 on A100: 131 to 161 KiB; 1 on 99 KiB devices: 68 to 97 KiB). */
#define FA2_DECODE_MAX_STAGES 4
/* keys per tile: 16 KiB of K and V at every head dim */
#define FA2_DECODE_KEYS(d) ((d) >= 256 ? 16 : (d) >= 128 ? 32 : 64)
#define FA2_DECODE_ROW_BYTES(d) (((d) + 63) / 64 * 64 * 2)
/* Q's rows, the K/V slots (stages per warp, K and V tiles each), then a full and an
 * empty mbarrier per slot and Q's */
#define FA2_DECODE_SLOTS(stages) (FA2_DECODE_WARPS * (stages))
#define FA2_DECODE_SLOT_BYTES(d) (2 * FA2_DECODE_KEYS(d) * FA2_DECODE_ROW_BYTES(d))
#define FA2_DECODE_SMEM_BYTES(d, stages, row_warps)                                    \
    ((row_warps) * FA2_DECODE_ROWS * FA2_DECODE_ROW_BYTES(d) +                        \
     FA2_DECODE_SLOTS(stages) * (FA2_DECODE_SLOT_BYTES(d) + 16) + 8)

#endif
