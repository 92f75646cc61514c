/* The Hopper (sm_90a, wgmma) forward kernel's compiled tiles, one row per head-dim
 * bucket it serves; read by the planner (C) and the kernels. Buckets without a row run
 * the mma.sync kernel (kernels/sm80/fwd_tiles.h) on every device. Why: docs/planning.md. */
#ifndef FA2_FWD_SM90_TILES_H
#define FA2_FWD_SM90_TILES_H

#include <stdint.h>

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
    FA2_APPLY_SM90_TILE(X, FA2_SM90_TILE_D64)      \
    FA2_APPLY_SM90_TILE(X, FA2_SM90_TILE_D128)     \
    FA2_APPLY_SM90_TILE(X, FA2_SM90_TILE_D256)

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

/* The bounded softcap's exponentials: every FA2_SM90_BOUNDED_POLY_PERIOD-th n8 tile's
 * on the FMA pipe (kernels/common/exp2_poly.h) instead of MUFU, which tanh takes as well
 * (0: none). On the H200 1 in 4 ran 1 % faster and 1 in 2 slower (the issue slots it
 * adds cost what MUFU saves; docs/history/performance-log.md, "Pingpong, the dense producer, lazy
 * rescale and the FMA-pipe exp2, measured"), so it stays 0. */
#ifndef FA2_SM90_BOUNDED_POLY_PERIOD
#define FA2_SM90_BOUNDED_POLY_PERIOD 0
#endif

/* The paged forward's producer layout (kernels/sm90/fwd_sm90_producer.cuh): at a bucket
 * whose tile has one warpgroup at d = 128, a paged cache runs blocks of one producer
 * warpgroup and FA2_SM90_PRODUCER_WARPGROUPS math warpgroups (64 query rows each, one
 * block per SM), Bc as the tile's, in the overlapped loop's cases: softcap off, or on
 * and bounding the scores. */
#define FA2_SM90_PRODUCER_WARPGROUPS 2
#define FA2_SM90_HAS_PRODUCER(head_dim_bucket, warpgroups) \
    ((head_dim_bucket) == 128 && (warpgroups) == 1)

/* Switches of the producer layout, both on since the H200 measured them together (dense
 * d = 128 forward 1.05-1.10x faster; docs/history/performance-log.md, "Pingpong, the dense producer,
 * lazy rescale and the FMA-pipe exp2, measured"): FA2_SM90_DENSE_PRODUCER 1 runs dense
 * batches in it too, the producer issuing the copy engine's boxes; FA2_SM90_PINGPONG 1
 * has its two math warpgroups take turns at issuing their products, so that one's
 * softmax runs while the other's products do. 0 restores the one-warpgroup dense tile
 * and math warpgroups that issue whenever they are ready. */
/* K buffers of the producer layout (1 or 2; V has 2). With one, the next K tile's copy
 * waits until both math warpgroups' S of this tile read K, so its latency falls between
 * the tensor cores' products; with two it is issued a tile ahead, at 32 KiB more shared
 * memory (d = 128). On the H200 two ran dense d = 128 forwards without a causal mask
 * 1.03-1.12x faster, causal ones within noise (docs/history/performance-log.md, "Two K buffers,
 * measured"). */
#ifndef FA2_SM90_PRODUCER_K_STAGES
#define FA2_SM90_PRODUCER_K_STAGES 2
#endif

/* The producer layout's shared memory: Q (block_m rows), its K buffers and two V buffers
 * (block_n rows each), plus the 1 KiB alignment pad. */
static inline FA2_SM90_CONSTEXPR int64_t fa2_fwd_sm90_producer_smem_bytes(
    int64_t head_dim_bucket, int64_t block_m, int64_t block_n)
{
    return (block_m + (FA2_SM90_PRODUCER_K_STAGES + 2) * block_n) * head_dim_bucket * 2 + 1024;
}

#ifndef FA2_SM90_DENSE_PRODUCER
#define FA2_SM90_DENSE_PRODUCER 1
#endif
#ifndef FA2_SM90_PINGPONG
#define FA2_SM90_PINGPONG 1
#endif

/* Pingpong in the bounded softcap instance: a math warpgroup passes the turn to the
 * other once its tanh is applied (1) instead of once its two products are issued (0), so
 * that the two warpgroups' softmax phases, which share the special-function unit, overlap
 * less. On the H200 (d = 128 bf16, 8k causal) softcap 30 ran 2-3 % faster with it; the
 * same late turn in the plain and general instances gained nothing (ALiBi lost 2 %), so
 * they keep the early one (docs/history/performance-log.md, "Where a warpgroup passes the turn"). */
#ifndef FA2_SM90_BOUNDED_LATE_TURN
#define FA2_SM90_BOUNDED_LATE_TURN 1
#endif

/* The overlapped loop's lazy rescale (common/softmax.cuh: update_deferred_biased_lazy):
 * a row keeps its exponent's offset while its maximum grows by at most
 * FA2_LAZY_RESCALE_LOG2, and a warp whose rows all keep theirs skips O's rescale. 1: in
 * the instances with score variants (ALiBi at d = 128: 2-3 % faster on the H200); 2: in
 * the plain ones too (there the readings disagreed, -3 % to +11 %: not a measured gain);
 * 0: nowhere (docs/history/performance-log.md, the section named above). */
#ifndef FA2_SM90_LAZY_RESCALE
#define FA2_SM90_LAZY_RESCALE 1
#endif

/* paged: a paged cache; dense_rows: a dense batch's seqlen_q (0: not dense, a packed
 * batch when not paged either). A dense batch takes the layout when its rows reach the
 * last math warpgroup's: at 64 rows or fewer the one-warpgroup tile runs two blocks per
 * SM where the producer layout would leave a math warpgroup without rows. */
static inline int fa2_fwd_sm90_takes_producer(int64_t head_dim_bucket, int64_t warpgroups,
                                              int paged, int64_t dense_rows, int32_t dtype,
                                              float softcap, int alibi)
{
    const int dense = dense_rows > 64 * (FA2_SM90_PRODUCER_WARPGROUPS - 1);
    return (paged || (FA2_SM90_DENSE_PRODUCER && dense)) &&
           FA2_SM90_HAS_PRODUCER(head_dim_bucket, warpgroups) &&
           (softcap == 0.0f || fa2_sm90_softcap_bounds_scores(dtype, softcap, alibi));
}

#endif
