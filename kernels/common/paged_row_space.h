/* A paged cache's rows as one row space: when a page stride is a whole number R of row
 * strides, the row at (page, r) is row page * R + r of the cache, and the kernels pass a
 * 32-bit row index per row instead of a 64-bit element offset (common/paged_tile.cuh:
 * half the shuffles and a third of the address arithmetic per copy). R is shared by K
 * and V (one row index serves both), every row index fits int32 and every row stride in
 * bytes fits uint32 (a row's address is one 32 x 32 -> 64-bit multiply-add); otherwise 0,
 * and the kernels take the 64-bit path. Plain C, shared by src/ (host) and the tests. */
#ifndef FA2_PAGED_ROW_SPACE_H
#define FA2_PAGED_ROW_SPACE_H

#include <stdint.h>

/* Strides in elements of `elem_bytes` bytes; page_size >= 1, num_pages >= 1, strides >= 0. */
static inline int32_t fa2_paged_rows_per_page(int64_t page_size, int64_t num_pages,
                                              int64_t k_page_stride, int64_t k_row_stride,
                                              int64_t v_page_stride, int64_t v_row_stride,
                                              int64_t elem_bytes)
{
    if (k_row_stride <= 0 || v_row_stride <= 0 || k_page_stride <= 0 || v_page_stride <= 0)
        return 0;
    if (k_page_stride % k_row_stride || v_page_stride % v_row_stride)
        return 0;
    const int64_t rows = k_page_stride / k_row_stride;
    if (v_page_stride / v_row_stride != rows)
        return 0;
    if (k_row_stride > (int64_t)UINT32_MAX / elem_bytes ||
        v_row_stride > (int64_t)UINT32_MAX / elem_bytes)
        return 0;
    /* the largest row index: row page_size - 1 of page num_pages - 1 */
    if (rows > INT32_MAX || (num_pages - 1) > (INT32_MAX - page_size + 1) / rows)
        return 0;
    return (int32_t)rows;
}

#endif
