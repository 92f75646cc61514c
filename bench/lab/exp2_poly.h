/* 2^x on the FMA pipe, for exponentials taken off the MUFU unit (which softcap's tanh
 * shares with exp2). x = j + f with j = round(x) and f in [-1/2, 1/2]: 2^f by a cubic
 * (minimax in relative error, 7.6e-5 at most), 2^j added to its exponent field. Valid
 * for x in [-125, 127] (a normal result); below -125 it is 0, so that masked scores
 * (-inf) give 0 as exp2 does; NaN stays NaN. The bounded softcap's unmasked exponents lie
 * in [-95.3, 49] (common/score_variants.cuh). Measured in the bounded softcap's forward
 * (docs/history/performance-log.md, "Pingpong, the dense producer, lazy rescale and the
 * FMA-pipe exp2, measured": no gain), so it lives here, used by pingpong_skeleton.cu;
 * plain C, checked on the host by tests/test_exp2_poly.c. */
#ifndef FA2_EXP2_POLY_H
#define FA2_EXP2_POLY_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "common/fast_div.h" /* FA2_HOST_DEVICE_FN */

/* 1.5 * 2^23: added to |x| < 2^22, the sum's low mantissa bits hold round(x) */
#define FA2_EXP2_POLY_ROUND 12582912.0f
#define FA2_EXP2_POLY_C0 0.99992752f
#define FA2_EXP2_POLY_C1 0.69326186f
#define FA2_EXP2_POLY_C2 0.24262036f
#define FA2_EXP2_POLY_C3 0.055170372f

FA2_HOST_DEVICE_FN uint32_t fa2_float_bits(float x)
{
#ifdef __CUDA_ARCH__
    return __float_as_uint(x);
#else
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
#endif
}

FA2_HOST_DEVICE_FN float fa2_bits_float(uint32_t u)
{
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
#endif
}

/* Rounded sums, never contracted or reassociated: the rounding to an integer relies on
 * them (three FADDs, three FFMAs, one shift-add and a select on the GPU). */
FA2_HOST_DEVICE_FN float fa2_add_rn(float a, float b)
{
#ifdef __CUDA_ARCH__
    return __fadd_rn(a, b);
#else
    volatile float s = a + b;
    return s;
#endif
}

FA2_HOST_DEVICE_FN float fa2_exp2_poly(float x)
{
    const float t = fa2_add_rn(x, FA2_EXP2_POLY_ROUND);
    const float j = fa2_add_rn(t, -FA2_EXP2_POLY_ROUND);
    const float f = fa2_add_rn(x, -j); /* exact */
    float p = fmaf(FA2_EXP2_POLY_C3, f, FA2_EXP2_POLY_C2);
    p = fmaf(p, f, FA2_EXP2_POLY_C1);
    p = fmaf(p, f, FA2_EXP2_POLY_C0);
    /* t's low bits are j + 2^22: shifted by 23, only j << 23 is left (mod 2^32) */
    const float r = fa2_bits_float(fa2_float_bits(p) + (fa2_float_bits(t) << 23));
    return x < -125.0f ? 0.0f : r; /* -inf would give NaN, below -126 a wrapped exponent */
}

#endif
