/* The planner of a build that compiles some head-dim buckets only (CMake's FA2_HEAD_DIMS)
 * and one element type (FA2_DTYPES): this test is the host code of libfa2 compiled with a
 * generated fa2_built_buckets.h that keeps buckets 64 and 128 and bf16
 * (tests/CMakeLists.txt), no kernels. A head dim runs in the
 * bucket the full build gives it, so the kernels such a build runs are the full build's
 * (which its GPU tests cover); one whose bucket is not compiled is refused, naming it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "fa2.h"

static fa2_device_info_t device(int major, int64_t smem)
{
    fa2_device_info_t d;
    memset(&d, 0, sizeof d);
    d.struct_size = sizeof d;
    d.cc_major = major;
    d.cc_minor = 0;
    d.sm_count = 132;
    d.smem_per_block_optin = smem;
    d.smem_per_sm = smem + 1024;
    return d;
}

static fa2_status_t plan_head_dim(int64_t head_dim, int64_t seqlen_q, const fa2_device_info_t *d,
                                  fa2_plan_t *plan)
{
    fa2_problem_t p;
    fa2_problem_init(&p, FA2_DTYPE_BF16, 2, seqlen_q, 1024, 8, 2, head_dim);
    return fa2_plan(&p, d, plan);
}

static void head_dims_run_in_compiled_buckets(void **state)
{
    (void)state;
    const fa2_device_info_t devices[] = {device(9, 232448), device(8, 166912)};
    const int64_t head_dims[] = {40, 64, 104, 128};
    const int32_t buckets[] = {64, 64, 128, 128};
    for (size_t i = 0; i < sizeof devices / sizeof devices[0]; ++i) {
        for (size_t j = 0; j < sizeof head_dims / sizeof head_dims[0]; ++j) {
            for (int64_t seqlen_q = 1; seqlen_q <= 1024; seqlen_q *= 1024) { /* decode, prefill */
                fa2_plan_t plan;
                assert_int_equal(plan_head_dim(head_dims[j], seqlen_q, &devices[i], &plan),
                                 FA2_SUCCESS);
                assert_int_equal(plan.head_dim_bucket, buckets[j]);
            }
        }
    }
}

static void head_dims_of_other_buckets_are_refused(void **state)
{
    (void)state;
    const fa2_device_info_t h100 = device(9, 232448);
    const int64_t refused[] = {8, 32, 72, 96, 136, 192, 256};
    const char *bucket[] = {"head_dim=32 kernels", "head_dim=32 kernels", "head_dim=96 kernels",
                            "head_dim=96 kernels", "head_dim=192 kernels",
                            "head_dim=192 kernels", "head_dim=256 kernels"};
    for (size_t j = 0; j < sizeof refused / sizeof refused[0]; ++j) {
        fa2_plan_t plan;
        memset(&plan, 0x5a, sizeof plan);
        assert_int_equal(plan_head_dim(refused[j], 1024, &h100, &plan),
                         FA2_ERROR_UNSUPPORTED_HEAD_DIM);
        assert_non_null(strstr(fa2_last_error(), bucket[j]));
        assert_non_null(strstr(fa2_last_error(), "does not compile"));
        for (size_t i = 0; i < sizeof plan; ++i) /* untouched */
            assert_int_equal(((const unsigned char *)&plan)[i], 0x5a);
    }
}

/* The build compiles bf16 only (CMake's FA2_DTYPES=bf16): fp16 is refused by name, for
 * every head dim and device, the plan untouched. */
static void element_types_left_out_are_refused(void **state)
{
    (void)state;
    const fa2_device_info_t devices[] = {device(9, 232448), device(8, 166912)};
    for (size_t i = 0; i < sizeof devices / sizeof devices[0]; ++i)
        for (int64_t d = 64; d <= 128; d += 64) {
            fa2_problem_t p;
            fa2_problem_init(&p, FA2_DTYPE_FP16, 2, 1024, 1024, 8, 2, d);
            fa2_plan_t plan;
            memset(&plan, 0x5a, sizeof plan);
            assert_int_equal(fa2_plan(&p, &devices[i], &plan), FA2_ERROR_UNSUPPORTED_DTYPE);
            assert_non_null(strstr(fa2_last_error(), "dtype=fp16"));
            assert_non_null(strstr(fa2_last_error(), "FA2_DTYPES"));
            for (size_t b = 0; b < sizeof plan; ++b)
                assert_int_equal(((const unsigned char *)&plan)[b], 0x5a);
        }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(head_dims_run_in_compiled_buckets),
        cmocka_unit_test(head_dims_of_other_buckets_are_refused),
        cmocka_unit_test(element_types_left_out_are_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
