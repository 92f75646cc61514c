/* The backward's row kernels (D pre-pass, dQ conversion), shared by both kernel
 * families: their launch geometry, read by the planner (C) and the launchers. */
#ifndef FA2_BWD_ROWS_H
#define FA2_BWD_ROWS_H

#include <stdint.h>

/* The row kernels (D pre-pass, dQ conversion): FA2_BWD_ROW_WARPS warps per block, and
 * each query row gets the fewest lanes that cover it in 8-element chunks (a power of
 * two), so a warp handles 32 / lanes rows. */
#define FA2_BWD_ROW_WARPS 8
#define FA2_BWD_ROW_LANES(head_dim)                                                   \
    ((head_dim) > 128 ? 32 : (head_dim) > 64 ? 16 : (head_dim) > 32 ? 8                \
                                              : (head_dim) > 16 ? 4 : (head_dim) > 8 ? 2 : 1)

/* Thread blocks of a row kernel over `rows` query rows. */
static inline int64_t fa2_bwd_row_kernel_blocks(int64_t rows, int64_t head_dim)
{
    const int64_t per_block = FA2_BWD_ROW_WARPS * (32 / FA2_BWD_ROW_LANES(head_dim));
    return (rows + per_block - 1) / per_block;
}

#endif
