/* Which head-dim buckets this build compiled. Every row of the tile tables (and of the
 * decode kernel's list) is wrapped in FA2_BUILT_D<bucket>(...), which keeps the row in a
 * build that compiles the bucket and drops it otherwise, so the planner and the
 * launchers see the same rows. A head dim runs in the bucket the full build gives it
 * (the smallest of FA2_ALL_HEAD_DIM_BUCKETS that holds it) or is refused: a build of
 * some buckets runs exactly the kernels the full build runs, for the head dims it
 * accepts. The default build compiles every bucket and both element types; CMake's
 * FA2_HEAD_DIMS and FA2_DTYPES options (docs/building.md) generate fa2_built_buckets.h
 * with the subset. C and CUDA alike. */
#ifndef FA2_BUILT_BUCKETS_H
#define FA2_BUILT_BUCKETS_H

/* X(bucket): every head-dim bucket of the full build, ascending (the tile tables' rows;
 * CMake checks the two agree). */
#define FA2_ALL_HEAD_DIM_BUCKETS(X) X(32) X(64) X(96) X(128) X(192) X(256)

#if defined(FA2_BUILT_BUCKETS)
#include "fa2_built_buckets.h"
#else
#define FA2_BUILT_D32(...) __VA_ARGS__
#define FA2_BUILT_D64(...) __VA_ARGS__
#define FA2_BUILT_D96(...) __VA_ARGS__
#define FA2_BUILT_D128(...) __VA_ARGS__
#define FA2_BUILT_D192(...) __VA_ARGS__
#define FA2_BUILT_D256(...) __VA_ARGS__
#define FA2_BUILT_FP16 1 /* the element types (CMake's FA2_DTYPES): 1 compiled, 0 not */
#define FA2_BUILT_BF16 1
#endif

#endif
