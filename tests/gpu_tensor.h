/* Scaffolding shared by test_forward_gpu and test_backward_gpu (gpu_tensor.c): the
 * stride layouts a case can ask for, strided host tensors poisoned with NaN outside
 * the tensor (with an optional device copy), the per-case RNG, the common part of a
 * case's line, CUDA_CHECK and main()'s device/seed set-up. Host C, CUDA runtime API;
 * tensor_new checks its allocations with cmocka's assert_true. */
#ifndef FA2_TESTS_GPU_TENSOR_H
#define FA2_TESTS_GPU_TENSOR_H

#include <stdint.h>
#include <stdio.h>

#include <cuda_runtime_api.h>

#include "fa2.h"
#include "oracle.h"

#define GPU_TENSOR_GUARD 64 /* poisoned elements after each tensor */

/* ---- layouts ------------------------------------------------------------------------ */

typedef enum layout_t {
    BSHD,   /* [b, s, h, d] contiguous (fa2_problem_init's strides) */
    BHSD,   /* [b, h, s, d] contiguous */
    PADDED  /* BSHD with 8 spare elements after each head row, seq row and batch */
} layout_t;

extern const char *const layout_names[]; /* "bshd", "bhsd", "padded" */

/* Batch, sequence and head strides of a [batch, seq, heads, d] tensor in `layout`. */
void layout_strides(layout_t layout, int64_t seq, int64_t heads, int64_t d, int64_t *bs,
                    int64_t *ss, int64_t *hs);

/* Sets the Q, K, V and O strides of p for `layout`. */
void apply_layout(fa2_problem_t *p, layout_t layout);

/* ---- host tensors ------------------------------------------------------------------- */

/* A strided tensor as the test sees it: host bits (what the GPU gets or gave back),
 * the same values as float (what the oracle gets), the device copy (NULL until
 * tensor_upload). */
typedef struct tensor_t {
    int64_t batch, seq, heads, d, bs, ss, hs;
    int64_t alloc; /* span + GPU_TENSOR_GUARD elements */
    uint16_t *bits;
    float *vals;
    void *dev;
} tensor_t;

/* All alloc elements poisoned: bits 0xFFFF (NaN in fp16 and bf16), vals NaN. */
tensor_t tensor_new(int64_t batch, int64_t seq, int64_t heads, int64_t d, int64_t bs,
                    int64_t ss, int64_t hs);

/* Frees host and device memory (cudaFree(NULL) when never uploaded). */
void tensor_free(tensor_t *t);

/* Element offset of (b, s, h, 0). */
int64_t tensor_offset(const tensor_t *t, int64_t b, int64_t s, int64_t h);

/* Every element of the tensor (not the holes) uniform in [-amp, amp], rounded to the
 * dtype, in (b, s, h, x) order; nonzero: drawn again while it rounds to +-0. */
void tensor_fill(tensor_t *t, oracle_rng_t *rng, fa2_dtype_t dtype, float amp, int nonzero);

/* cudaMalloc of t->dev and a copy of all alloc elements of t->bits to it. */
cudaError_t tensor_upload(tensor_t *t);

/* All alloc elements of t->dev back into t->bits. */
cudaError_t tensor_download(tensor_t *t);

/* Where the mask leaves no path to the loss, for contiguous BSHD gradients of p: zq (one
 * byte per dQ element) is 1 on the rows that see no key, zkv (per dK/dV element) on the
 * keys no query row sees. 0, or -1 when out of memory. */
int structural_zeros(const fa2_problem_t *p, char *zq, char *zkv);

/* ---- flat device buffers -------------------------------------------------------------- */

/* cudaMalloc of `bytes` (at least 1): a copy of `host`, or, host NULL, poisoned with
 * 0xFF bytes (NaN in fp16, bf16 and fp32); success asserted with cmocka. */
void *device_buffer(const void *host, size_t bytes);

/* n values uniform in [-1, 1] rounded to dt: as floats (vals, for the oracle) and as
 * dt's bits (bits, for the GPU). */
void fill_rounded(float *vals, uint16_t *bits, int64_t n, oracle_rng_t *rng, fa2_dtype_t dt);

/* ---- cases -------------------------------------------------------------------------- */

/* The inputs' RNG of case `index` under run seed `seed`. */
oracle_rng_t case_rng(uint64_t seed, long index);

/* Prints, without a newline, "case N: dtype b= q= k= hq= hkv= d= mask= scale= layout"
 * for problem p (its strides set with `layout`). */
void describe_problem(long index, const fa2_problem_t *p, layout_t layout);

/* On a CUDA error: prints where and goes to the caller's `cleanup` label. */
#define CUDA_CHECK(call)                                                                \
    do {                                                                                \
        const cudaError_t e_ = (call);                                                  \
        if (e_ != cudaSuccess) {                                                        \
            printf("\n  CUDA error at %s:%d: %s -> %s\n", __FILE__, __LINE__, #call,    \
                   cudaGetErrorString(e_));                                             \
            goto cleanup;                                                               \
        }                                                                               \
    } while (0)

/* main()'s set-up: without a CUDA device prints "SKIP: no CUDA device (...): GPU
 * <what> tests not run" and returns 77; returns 1 when device 0 cannot be queried or
 * selected. Otherwise fills *info, *seed (FA2_TEST_SEED, else the time) and *only
 * (FA2_TEST_CASE, else left as it is), prints the device and seed lines and returns 0. */
int gpu_test_setup(const char *what, fa2_device_info_t *info, uint64_t *seed, long *only);

/* A device with 99 KiB of shared memory per block (sm_89, 101376 bytes opt-in, as on
 * RTX 30xx/40xx/50xx) and `real`'s SM count: plans made for it choose the compact
 * mma.sync tiles where the main ones do not fit, and run on any sm_80+ GPU with at
 * least that much shared memory (the H200 here). */
fa2_device_info_t consumer_device_info(const fa2_device_info_t *real);

/* The head dims the 99 KiB tests sweep: every bucket and the dims between the three
 * largest (160, 224), so every compact tile runs. */
#define CONSUMER_DIMS {32, 64, 96, 128, 160, 192, 224, 256}

#endif
