/* The decode kernel's compiled shape (kernels/decode/decode_kernel.cuh), read by the
 * planner (C) and the kernel: which head-dim buckets have it, how many rows (query
 * heads per kv head times query tokens) a block holds and how many tokens it takes,
 * keys per warp tile, shared memory. */
#ifndef FA2_DECODE_TILES_H
#define FA2_DECODE_TILES_H

#include "common/built_buckets.h"

/* X(head_dim_bucket) */
#define FA2_DECODE_HEAD_DIMS(X) FA2_BUILT_D64(X(64)) FA2_BUILT_D128(X(128)) FA2_BUILT_D256(X(256))

#define FA2_DECODE_ROWS 16  /* one mma row tile: a block's rows */
/* The most query tokens a sequence may have: a kv head's group x tokens rows are then
 * at most `group` row tiles, each reading the keys once, where the prefill kernels read
 * them once per query head. */
#define FA2_DECODE_MAX_TOKENS 16
/* A kv head's row tiles (blocks) for `rows` = query heads per kv head x seqlen_q */
#define FA2_DECODE_ROW_TILES(rows) (((rows) + FA2_DECODE_ROWS - 1) / FA2_DECODE_ROWS)
#define FA2_DECODE_WARPS 4
/* X(stages): the compiled pipeline depths (per warp, K and V tiles each), deepest
 * first; the planner takes the deepest whose shared memory fits the device (3: 196 KiB
 * and more, e.g. H100/H200; 2: 132 KiB, e.g. A100) */
#define FA2_DECODE_STAGE_COUNTS(X) X(3) X(2)
/* keys per warp tile: 16 KiB of K and V at every head dim */
#define FA2_DECODE_KEYS(d) ((d) >= 256 ? 16 : (d) >= 128 ? 32 : 64)
#define FA2_DECODE_ROW_BYTES(d) (((d) + 63) / 64 * 64 * 2)
/* Q, then each warp's stages of K and V tiles */
#define FA2_DECODE_SMEM_BYTES(d, stages)                                               \
    (FA2_DECODE_ROWS * FA2_DECODE_ROW_BYTES(d) +                                      \
     FA2_DECODE_WARPS * (stages) * 2 * FA2_DECODE_KEYS(d) * FA2_DECODE_ROW_BYTES(d))

#endif
