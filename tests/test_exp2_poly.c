/* bench/lab/exp2_poly.h, the FMA-pipe 2^x (a lab experiment's): its relative error against exp2 in double over
 * every float of [-1/2, -1/4] and [1/4, 1/2] (the ends of the cubic's interval, where
 * x rounds either way), 2^16 evenly spaced points and both ends of every unit interval
 * of [-125, 127], the bounded softcap's extremes, and what masked scores bring (-inf and
 * anything below -125 give exactly 0; NaN stays NaN). CPU only: the kernels run the same
 * C expression. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "exp2_poly.h"
#include "common/params.h"

/* The cubic's 7.6e-5 and a few roundings of its evaluation. */
#define MAX_REL_ERR 7.7e-5

static double g_worst;
static float g_worst_x;

static long check(float x)
{
    const double want = exp2((double)x);
    const double got = (double)fa2_exp2_poly(x);
    const double e = fabs(got - want) / want;
    if (!(e <= g_worst)) /* NaN sticks */
        g_worst = e, g_worst_x = x;
    return !(e <= MAX_REL_ERR);
}

static float from_bits(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

static void test_every_float_near_the_halves(void **state)
{
    (void)state;
    long bad = 0;
    g_worst = 0.0;
    const uint32_t quarter = 0x3e800000u, half = 0x3f000000u; /* 0.25, 0.5 */
    for (uint32_t u = quarter; u <= half; ++u) {
        bad += check(from_bits(u));
        bad += check(-from_bits(u));
    }
    printf("[1/4, 1/2], both signs: worst %.3e at %.9g, %ld past %.1e\n", g_worst,
           (double)g_worst_x, bad, MAX_REL_ERR);
    assert_int_equal(bad, 0);
}

static void test_every_unit_interval(void **state)
{
    (void)state;
    long bad = 0;
    g_worst = 0.0;
    for (int j = -125; j < 127; ++j) {
        for (int i = 0; i < 65536; ++i)
            bad += check((float)j + (float)i / 65536.0f);
        bad += check(nextafterf((float)j + 0.5f, -INFINITY));
        bad += check((float)j + 0.5f);
        bad += check(nextafterf((float)j + 0.5f, INFINITY));
    }
    bad += check(127.0f);
    printf("[-125, 127]: worst %.3e at %.9g, %ld past %.1e\n", g_worst, (double)g_worst_x, bad,
           MAX_REL_ERR);
    assert_int_equal(bad, 0);
}

/* The bounded softcap's exponents (y - offset) cap log2(e) for y in [-1, 1]: 2^0 at the
 * top up to a cap of 33, 2^49 down to 2^-95.25 at the largest bounded cap, all normal,
 * none flushed. */
static void test_bounded_softcap_extremes(void **state)
{
    (void)state;
    assert_true(fabs(fa2_exp2_poly(0.0f) - 1.0) <= MAX_REL_ERR); /* the top up to a cap of 33 */
    const float cap_log2 = FA2_MAX_BOUNDED_SOFTCAP * 1.44269504f;
    const float highest = (1.0f - fa2_bounded_softcap_offset(FA2_MAX_BOUNDED_SOFTCAP)) * cap_log2;
    const float top = fa2_exp2_poly(highest);
    printf("2^%.6g = %.6g (exp2: %.6g)\n", (double)highest, (double)top, exp2((double)highest));
    assert_true(fabs(top - exp2((double)highest)) <= MAX_REL_ERR * exp2((double)highest));
    const float lowest = (-1.0f - fa2_bounded_softcap_offset(FA2_MAX_BOUNDED_SOFTCAP)) * cap_log2;
    const float y = fa2_exp2_poly(lowest);
    printf("2^%.6g = %.6g (exp2: %.6g)\n", (double)lowest, (double)y, exp2((double)lowest));
    assert_true(y > 0.0f && fabs(y - exp2((double)lowest)) <= MAX_REL_ERR * exp2((double)lowest));
    assert_true(fa2_exp2_poly(-125.0f) >= 1.17549435e-38f); /* normal */
}

/* A masked score is -inf: its exponential must be exactly 0, as exp2's is, and so must
 * any exponent below the normal range (from -126 on the exponent field would wrap). */
static void test_masked_and_below_range(void **state)
{
    (void)state;
    const float below[] = {-INFINITY, -3.0e38f, -1.0e30f, -12582912.0f, -1000.0f, -126.0f,
                           nextafterf(-125.0f, -INFINITY)};
    for (size_t i = 0; i < sizeof below / sizeof below[0]; ++i) {
        const float y = fa2_exp2_poly(below[i]);
        printf("2^%.9g -> %.9g\n", (double)below[i], (double)y);
        assert_true(y == 0.0f && !signbit(y));
    }
    assert_true(fa2_exp2_poly(-125.0f) > 0.0f);
    assert_true(isnan(fa2_exp2_poly(NAN)));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_float_near_the_halves),
        cmocka_unit_test(test_every_unit_interval),
        cmocka_unit_test(test_bounded_softcap_extremes),
        cmocka_unit_test(test_masked_and_below_range),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
