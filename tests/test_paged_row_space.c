/* common/paged_row_space.h, when a paged cache's kernels take 32-bit row indices: the
 * usual layouts qualify; a page stride that is no whole number of rows, K and V with
 * different rows per page, a row stride past 32-bit bytes or a largest row index past
 * int32 do not. The index bound is checked at its edge, from both sides. CPU only. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "common/paged_row_space.h"

static void test_usual_layouts(void **state)
{
    (void)state;
    /* [num_pages, page_size, heads, d]: page_size rows per page */
    assert_int_equal(fa2_paged_rows_per_page(16, 1000, 16 * 8 * 128, 8 * 128, 16 * 8 * 128,
                                             8 * 128, 2),
                     16);
    /* K and V interleaved per page ([num_pages, 2, page_size, heads, d]) */
    assert_int_equal(fa2_paged_rows_per_page(64, 10, 2 * 64 * 128, 128, 2 * 64 * 128, 128, 2),
                     128);
    /* one page of one key */
    assert_int_equal(fa2_paged_rows_per_page(1, 1, 64, 64, 64, 64, 2), 1);
}

static void test_other_layouts(void **state)
{
    (void)state;
    /* padded pages: the page stride is no whole number of rows */
    assert_int_equal(fa2_paged_rows_per_page(16, 10, 16 * 128 + 8, 128, 16 * 128 + 8, 128, 2),
                     0);
    /* K and V with different rows per page */
    assert_int_equal(fa2_paged_rows_per_page(16, 10, 16 * 128, 128, 32 * 128, 128, 2), 0);
    /* zero strides */
    assert_int_equal(fa2_paged_rows_per_page(16, 10, 0, 128, 16 * 128, 128, 2), 0);
    assert_int_equal(fa2_paged_rows_per_page(16, 10, 16 * 128, 0, 16 * 128, 128, 2), 0);
    /* a row stride of 2^31 elements is 2^32 bytes */
    const int64_t big = INT64_C(1) << 31;
    assert_int_equal(fa2_paged_rows_per_page(1, 1, big, big, big, big, 2), 0);
    assert_int_equal(fa2_paged_rows_per_page(1, 1, big - 1, big - 1, big - 1, big - 1, 2), 1);
}

/* The largest row index, (num_pages - 1) * rows + page_size - 1, against INT32_MAX. */
static void test_index_bound(void **state)
{
    (void)state;
    const int64_t rows = 16, page = 16, row = 128;
    const int64_t most_pages = (INT32_MAX - page + 1) / rows + 1; /* last index <= INT32_MAX */
    assert_true((most_pages - 1) * rows + page - 1 <= INT32_MAX);
    assert_true(most_pages * rows + page - 1 > INT32_MAX);
    assert_int_equal(
        fa2_paged_rows_per_page(page, most_pages, rows * row, row, rows * row, row, 2), 16);
    assert_int_equal(
        fa2_paged_rows_per_page(page, most_pages + 1, rows * row, row, rows * row, row, 2), 0);
    /* rows per page past int32 */
    const int64_t huge = (INT64_C(1) << 31) * row;
    assert_int_equal(fa2_paged_rows_per_page(page, 1, huge, row, huge, row, 2), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_usual_layouts),
        cmocka_unit_test(test_other_layouts),
        cmocka_unit_test(test_index_bound),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
