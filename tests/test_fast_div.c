/* common/fast_div.h, the page-size division the paged kernels use: against the C
 * division for every divisor 1..4096 and numerators around each of its multiples, and
 * for powers of two, primes and random divisors up to 2^31 - 1 with numerators up to
 * 2^31 - 1 (the largest key index). CPU only: the device runs the same C expression. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cmocka.h>

#include "common/fast_div.h"

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;

static uint32_t next31(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 33);
}

/* Wrong quotients for divisor d over the numerators n (< 2^31) given. */
static long check(uint32_t d, const uint32_t *n, int count)
{
    const uint32_t magic = fa2_fast_div_magic(d);
    const int shift = fa2_fast_div_shift(d);
    long wrong = 0;
    for (int i = 0; i < count; ++i)
        if (n[i] < (1u << 31) && fa2_fast_div(n[i], magic, shift) != n[i] / d) {
            if (wrong++ < 5)
                printf("d=%u n=%u: %u, want %u\n", d, n[i], fa2_fast_div(n[i], magic, shift),
                       n[i] / d);
        }
    return wrong;
}

/* Numerators: 0..2d+1, the multiples of d near 2^31 and their neighbours, 2^31 - 1, and
 * random ones with their neighbours. */
static long check_divisor(uint32_t d)
{
    uint32_t n[64];
    int c = 0;
    const uint32_t top = (uint32_t)((((1ull << 31) - 1) / d) * d);
    const uint32_t fixed[] = {0, 1, d - 1, d, d + 1, 2 * d - 1, 2 * d, top - 1, top, top - d,
                              top - d + 1, top - d - 1, (1u << 31) - 1, (1u << 31) - 2};
    for (int i = 0; i < (int)(sizeof fixed / sizeof *fixed); ++i)
        n[c++] = fixed[i];
    while (c < 62) {
        const uint32_t r = next31(), m = r - r % d;
        n[c++] = r;
        n[c++] = m ? m - 1 : m;
    }
    return check(d, n, c);
}

static void test_small_divisors(void **state)
{
    (void)state;
    long wrong = 0;
    for (uint32_t d = 1; d <= 4096; ++d)
        wrong += check_divisor(d);
    assert_int_equal(wrong, 0);
}

static void test_large_divisors(void **state)
{
    (void)state;
    long wrong = 0;
    for (int l = 0; l <= 30; ++l)
        wrong += check_divisor(1u << l) + check_divisor((1u << l) + 1) +
                 check_divisor((2u << l) - 1);
    const uint32_t primes[] = {65521, 1000003, 16777213, 2147483647};
    for (int i = 0; i < 4; ++i)
        wrong += check_divisor(primes[i]);
    for (int i = 0; i < 20000; ++i)
        wrong += check_divisor(next31() | 1u);
    assert_int_equal(wrong, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_small_divisors),
        cmocka_unit_test(test_large_divisors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
