/* Division by a divisor fixed for a whole launch (a paged cache's page size): the host
 * computes a magic multiplier once, the kernels divide with one wide multiply and a
 * shift instead of the ~20 instructions of an integer division. Round-up method:
 * shift = 31 + ceil(log2 d), magic = ceil(2^shift / d) (< 2^32); exact for every
 * numerator n < 2^31 and divisor 1 <= d < 2^31 (tests/test_fast_div.c checks it).
 * Plain C, shared by src/ (host) and kernels/. */
#ifndef FA2_FAST_DIV_H
#define FA2_FAST_DIV_H

#include <stdint.h>

/* A function of both the host and the kernels, always inlined in the kernels (the
 * inliner's choice otherwise depends on how many kernels of the unit call it). */
#ifdef __CUDACC__
#define FA2_HOST_DEVICE_FN static __host__ __device__ __forceinline__
#else
#define FA2_HOST_DEVICE_FN static inline
#endif

/* ceil(log2 d) for 1 <= d < 2^31: the bits of d - 1 */
FA2_HOST_DEVICE_FN int fa2_fast_div_log2(uint32_t d)
{
#ifdef __CUDA_ARCH__
    return 32 - __clz((int)(d - 1)); /* __clz(0) = 32 */
#else
    return d > 1 ? 32 - __builtin_clz(d - 1) : 0;
#endif
}

/* The shift that goes with fa2_fast_div_magic(d). */
FA2_HOST_DEVICE_FN int fa2_fast_div_shift(uint32_t d)
{
    return 31 + fa2_fast_div_log2(d);
}

static inline uint32_t fa2_fast_div_magic(uint32_t d)
{
    const int shift = fa2_fast_div_shift(d);
    return (uint32_t)(((1ull << shift) + d - 1) / d);
}

/* n / d for n < 2^31, given d's magic and shift */
FA2_HOST_DEVICE_FN uint32_t fa2_fast_div(uint32_t n, uint32_t magic, int shift)
{
    return (uint32_t)(((uint64_t)n * magic) >> shift);
}

#endif
