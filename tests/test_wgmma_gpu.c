/* The Hopper wgmma building blocks (kernels/sm90/wgmma.cuh) in isolation: descriptors for
 * K-major and MN-major panel tiles, A from shared memory and from registers; and the
 * TMA's tiles (sm90/tma.cuh, tensor_map.h) byte for byte against cp.async's. Skips
 * (77) without an sm_90 device; registered only in builds with sm_90a code. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cmocka.h>
#include <cuda_runtime_api.h>

#include "tma_probe.h"
#include "wgmma_probe.h"

static void check_mode(int mode, const char *what)
{
    double err = -1;
    assert_int_equal(fa2_wgmma_probe(mode, &err), 0);
    printf("wgmma %-40s rel L2 error %.3g\n", what, err);
    if (err > 1e-5 && (mode & 1)) {  /* diagnosis: would the other LBO/SBO order work? */
        double swapped = -1;
        fa2_wgmma_probe(mode | 4, &swapped);
        printf("  (LBO/SBO swapped: %.3g)\n", swapped);
    }
    assert_true(err >= 0 && err < 1e-5); /* fp32 accumulation of exact bf16 products */
}

static void test_ss_k_major(void **state)
{
    (void)state;
    check_mode(0, "A smem, B K-major (S = Q K^T)");
}

static void test_ss_mn_major(void **state)
{
    (void)state;
    check_mode(1, "A smem, B MN-major");
}

static void test_rs_k_major(void **state)
{
    (void)state;
    check_mode(2, "A registers, B K-major");
}

static void test_rs_mn_major(void **state)
{
    (void)state;
    check_mode(3, "A registers, B MN-major (O += P V)");
}

static void check_tma(int paged, const char *what)
{
    long diff = -1;
    assert_int_equal(fa2_tma_probe(paged, &diff), 0);
    printf("TMA %-38s %ld bytes differ from cp.async's\n", what, diff);
    assert_int_equal(diff, 0);
}

static void test_tma_dense_tile(void **state)
{
    (void)state;
    check_tma(0, "(tile past the tensor's rows)");
}

static void test_tma_paged_tile(void **state)
{
    (void)state;
    check_tma(1, "(eight 16-row pages)");
}

int main(void)
{
    int n = 0, major = 0, minor = 0;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ss_k_major),
        cmocka_unit_test(test_ss_mn_major),
        cmocka_unit_test(test_rs_k_major),
        cmocka_unit_test(test_rs_mn_major),
        cmocka_unit_test(test_tma_dense_tile),
        cmocka_unit_test(test_tma_paged_tile),
    };
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        printf("SKIP: no CUDA device\n");
        return 77;
    }
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0);
    if (major != 9 || minor != 0) {
        printf("SKIP: device is sm_%d%d, wgmma needs sm_90\n", major, minor);
        return 77;
    }
    return cmocka_run_group_tests(tests, NULL, NULL);
}
