/* The accepted limits of include/fa2.h, run on the GPU (FA2_MAX_SEQLEN = 2^22 below) (label gpu; exit 77 without a
 * device). One line per case: PASS/FAIL, the worst excess (|error| - tolerance:
 * negative means within tolerance) and the case's wall time. Each accepted extreme runs
 * once, forward and backward where the backward can take it:
 *   - plan_limits: each limit accepted, one step past it refused (host only);
 *     bwd_broadcast_refused: a broadcast Q or K/V has no backward (FA2_ERROR_OVERLAP,
 *     outputs untouched).
 *   - kmax_*: seqlen_k = 2^22 with K and V broadcast along the sequence (seq stride 0,
 *     one stored row per head). Every key is then the same, so the softmax over a row's
 *     visible keys is uniform: O = that head's V row and LSE = scale (q . k) + ln n,
 *     where n, the number of visible keys, follows from the mask rule in int64
 *     (oracle_key_range). LSE thus checks the mask arithmetic (to within ln(n+1)-ln(n)).
 *     Three of them stream all 2^22 keys per row (no window; causal with window_left =
 *     2^22 - 1; both windows at 2^31 - 1), where O carries the drift of 2^22 equal fp32
 *     addends (allowed for, see the tolerances; FA2_LIMITS_SKIP_SLOW=1 skips them).
 *     A broadcast runs the mma.sync kernels (the Hopper ones read K/V by the copy
 *     engine, which cannot step by 0), so kmax_hopper_* store every row, all equal.
 *   - qmax_*: seqlen_q = 2^22 with Q broadcast and O/LSE real, small random
 *     K/V; rows at the ends, at the mask's transitions and at random checked against a
 *     double reference for those rows. qkmax_*: both lengths 2^22 (Q and K/V broadcast)
 *     with a band mask.
 *   - windows at 2^31 - 1 and at seqlen - 1, seqlen, seqlen + 1 (the clamp to
 *     "unbounded" in kernels/common/params.h) on small random problems, forward and
 *     backward, against the oracle run with the equivalent unbounded window; causal +
 *     window_left = 2^31 - 1 backward at d 64, 128 (Hopper kernels) and 96 (mma.sync),
 *     both modes.
 *   - seqlen_k = 0: O = 0, LSE = -inf, dQ = 0 exactly; K/V/dK/dV are 16-byte dummies
 *     that must stay untouched.
 *   - softmax_scale = FA2_MAX_SOFTMAX_SCALE with integer Q and K, so that scores are
 *     exact and distinct ones differ by >= 65536 after scaling: the softmax is one-hot
 *     or an exact average over tied maxima. Forward with large logits (|Q.K| up to ~60);
 *     backward with the row maximum at 0 (Q in {1, 2}, K rows either 0 or <= 0 with a
 *     -1), and once with large logits (see tolerances).
 *   - bwd_kmax: seqlen_k = 2^22 with real K/V, causal with window_left 40; bwd_qmax:
 *     seqlen_q = 2^22 with real Q/O/dO/dQ, causal. Only the last few keys (rows) matter, so the
 *     oracle on the small problem of the same relative geometry is the reference; keys
 *     (rows) that nothing reaches must come back exactly 0. Skipped when memory is short.
 * Every output and workspace is poisoned (0xFF bytes: NaN) before each run, and the
 * 256 bytes after each output must stay poisoned.
 * Tolerances (as test_hostile_gpu): O within 4 ulp of the dtype times max(|O row|,
 * 0.25); dQ within 8 ulp times max(|dQ row|, 1e-3); dK/dV within 8 ulp times the head's
 * largest value (at least 1e-3 of the larger of dK and dV); LSE within
 * 1e-3 * max(1, |lse|), 1e-4 * max(1, |lse|) where every key is equal (the math is
 * exact), and 1e-3 + 3 fp32 ulp at the largest scale (|LSE| ~ 1e6). The backward
 * checks add, per element, the error its design carries: D = rowsum(dO * O) from O
 * rounded to the dtype (eps * scale * |dO|.|O| through dS), dS and P rounded to the
 * dtype before their products (eps / 2 of each term), and P recomputed from an fp32
 * LSE: exp2 of an exponent off by up to 1.5 fp32 ulp of |LSE| log2(e). The last term
 * is negligible except at the largest scale with large logits, where it allows tens
 * of percent (printed as "P allowance"; see scale_max_bwd_large_logits_bf16).
 * A row of n >= 2^16 equal addends (every key the same) also gets 1.5 n 2^-27 of its
 * largest |O|: the fp32 accumulators' measured drift (bench/lab/long_rows.c).
 * Rows that see no key: O = 0, LSE = -inf, dQ = 0 exactly; keys no row sees: dK = dV
 * = 0 exactly. FA2_TEST_CASE=<name> runs one case. */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "fa2.h"
#include "gpu_rows.h"
#include "oracle.h"
#include "oracle_backward.h"

#define MAXLEN ((int64_t)FA2_MAX_SEQLEN) /* the longest sequence */
#define WMAX INT64_C(2147483647)   /* FA2_MAX_WINDOW */
#define GUARD 256                  /* poisoned bytes after every output */
#define GIB (1024.0 * 1024.0 * 1024.0)
#define LOG2E 1.4426950408889634

static fa2_device_info_t g_info;
static float *g_lut[3]; /* bits -> float per dtype (index 1 fp16, 2 bf16) */

/* ---- cases ----------------------------------------------------------------------------- */

typedef enum runner_t {
    R_PLAN,      /* plan statuses at and past each limit (host) */
    R_REFUSED,   /* backward of a broadcast layout: refused, outputs untouched */
    R_SMALL,     /* small random problem, every element vs the oracle */
    R_ROWS,      /* forward with broadcast Q and/or K/V, chosen rows */
    R_BWD_KMAX,  /* backward with seqlen_k = 2^22, real K/V */
    R_BWD_QMAX   /* backward with seqlen_q = 2^22, real Q/O/dO/dQ */
} runner_t;

typedef enum gen_t {
    GEN_UNIFORM,     /* uniform in [-1, 1], never 0 */
    GEN_TIES_K,      /* Q ints in [-2, 2]; K rows from a pool of 37 int rows; V random */
    GEN_ZERO_MAX,    /* Q in {1, 2}; K rows 0 (every third key) or <= 0 with a -1: row
                        maximum 0; V random */
    GEN_ZERO_MAX_KV  /* as GEN_ZERO_MAX, V pooled with K: tied keys are identical */
} gen_t;

enum {
    F_BWD = 1,      /* run and check the backward */
    F_BCAST_Q = 2,  /* Q broadcast along the sequence (R_ROWS) */
    F_BCAST_KV = 4, /* K and V broadcast along the sequence (R_ROWS) */
    F_SLOW = 8,     /* streams 2^22 keys per row: seconds */
    F_REPEAT_KV = 16 /* K and V stored row by row, every row the same (R_ROWS): the layout
                        the Hopper kernels' TMA reads, which a broadcast is not */
};

typedef struct lcase_t {
    const char *name;
    runner_t runner;
    fa2_dtype_t dtype;
    int64_t batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim;
    int32_t causal;
    int64_t window_left, window_right;
    float scale;
    int32_t deterministic;
    int flags;
    gen_t gen;
} lcase_t;

#define BF FA2_DTYPE_BF16
#define FP FA2_DTYPE_FP16
#define SMAX FA2_MAX_SOFTMAX_SCALE
#define KV F_BCAST_KV
#define RKV F_REPEAT_KV
#define BQ F_BCAST_Q

/* name, runner, dtype, b, sq, sk, hq, hkv, d, causal, wl, wr, scale, det, flags, gen */
static const lcase_t cases[] = {
    {"plan_limits", R_PLAN, BF, 1, 128, 128, 1, 1, 64, 0, -1, -1, 0, 0, 0, GEN_UNIFORM},
    {"bwd_broadcast_refused", R_REFUSED, BF, 1, 64, 64, 2, 2, 64, 0, -1, -1, 0, 0, 0,
     GEN_UNIFORM},

    /* seqlen_k = 2^22, uniform keys; the three F_SLOW ones stream every key */
    {"kmax_nowindow", R_ROWS, BF, 1, 3, MAXLEN, 2, 1, 8, 0, -1, -1, 0, 0, KV | F_SLOW,
     GEN_UNIFORM},
    {"kmax_causal_wl_seqlen_minus1", R_ROWS, FP, 1, 4, MAXLEN, 1, 1, 64, 1, MAXLEN - 1, -1, 0, 0,
     KV | F_SLOW, GEN_UNIFORM},
    {"kmax_windows_max", R_ROWS, BF, 1, 5, MAXLEN, 2, 2, 64, 0, WMAX, WMAX, 0, 0, KV | F_SLOW,
     GEN_UNIFORM},
    {"kmax_wl40_wrmax", R_ROWS, BF, 1, 5, MAXLEN, 2, 2, 64, 0, 40, WMAX, 0, 0, KV, GEN_UNIFORM},
    {"kmax_wl40_wr_seqlen_minus2", R_ROWS, FP, 1, 300, MAXLEN, 1, 1, 64, 0, 40, 298, 0, 0, KV,
     GEN_UNIFORM},
    {"kmax_wl40_wr_seqlen_minus1", R_ROWS, BF, 1, 300, MAXLEN, 1, 1, 96, 0, 40, 299, 0, 0, KV,
     GEN_UNIFORM},
    {"kmax_wl40_wr_seqlen", R_ROWS, FP, 1, 300, MAXLEN, 1, 1, 64, 0, 40, 300, 0, 0, KV,
     GEN_UNIFORM},
    {"kmax_wl40_wr_seqlen_plus1", R_ROWS, BF, 1, 300, MAXLEN, 1, 1, 96, 0, 40, 301, 0, 0, KV,
     GEN_UNIFORM},
    {"kmax_causal_wl100_gqa", R_ROWS, BF, 1, 300, MAXLEN, 4, 2, 8, 1, 100, -1, 0, 0, KV,
     GEN_UNIFORM},
    {"kmax_wl3_wr5_d256", R_ROWS, FP, 1, 300, MAXLEN, 2, 1, 256, 0, 3, 5, 0, 0, KV, GEN_UNIFORM},
    /* the same on the Hopper kernels, which read a broadcast on the mma.sync ones: K/V
     * stored row by row (up to 4 GiB), all rows equal; d = 64 streams every key */
    {"kmax_hopper_d64_nowindow", R_ROWS, BF, 1, 5, MAXLEN, 2, 1, 64, 0, -1, -1, 0, 0,
     RKV | F_SLOW, GEN_UNIFORM},
    {"kmax_hopper_d128_causal_wl100", R_ROWS, FP, 1, 300, MAXLEN, 4, 2, 128, 1, 100, -1, 0, 0,
     RKV, GEN_UNIFORM},
    {"kmax_hopper_d256_wl3_wr5", R_ROWS, BF, 1, 300, MAXLEN, 2, 1, 256, 0, 3, 5, 0, 0, RKV,
     GEN_UNIFORM},

    /* seqlen_q = 2^22, Q broadcast, O and LSE real, K/V small and random */
    {"qmax_full", R_ROWS, BF, 1, MAXLEN, 100, 1, 1, 8, 0, -1, -1, 0, 0, BQ, GEN_UNIFORM},
    {"qmax_causal_wlmax", R_ROWS, FP, 1, MAXLEN, 100, 1, 1, 8, 1, WMAX, -1, 0, 0, BQ,
     GEN_UNIFORM},
    {"qmax_windows_max", R_ROWS, BF, 1, MAXLEN, 100, 1, 1, 8, 0, WMAX, WMAX, 0, 0, BQ,
     GEN_UNIFORM},
    {"qmax_wl10_wr_seqlen_minus50", R_ROWS, BF, 1, MAXLEN, 100, 1, 1, 8, 0, 10, MAXLEN - 50, 0, 0,
     BQ, GEN_UNIFORM},
    {"qmax_wl10_wr_seqlen_minus1", R_ROWS, FP, 1, MAXLEN, 100, 1, 1, 8, 0, 10, MAXLEN - 1, 0, 0, BQ,
     GEN_UNIFORM},
    {"qmax_wl10_wr_seqlen", R_ROWS, BF, 1, MAXLEN, 100, 1, 1, 8, 0, 10, MAXLEN, 0, 0, BQ,
     GEN_UNIFORM},
    {"qmax_wl10_wr_seqlen_plus1", R_ROWS, FP, 1, MAXLEN, 100, 1, 1, 8, 0, 10, MAXLEN + 1, 0, 0, BQ,
     GEN_UNIFORM},
    {"qmax_hopper_d64_causal", R_ROWS, BF, 1, MAXLEN, 300, 1, 1, 64, 1, -1, -1, 0, 0, BQ,
     GEN_UNIFORM},
    /* both 2^22: Q and K/V broadcast, band masks */
    {"qkmax_causal_wl100", R_ROWS, BF, 1, MAXLEN, MAXLEN, 1, 1, 8, 1, 100, -1, 0, 0, BQ | KV,
     GEN_UNIFORM},
    {"qkmax_wl3_wr5", R_ROWS, FP, 1, MAXLEN, MAXLEN, 1, 1, 8, 0, 3, 5, 0, 0, BQ | KV, GEN_UNIFORM},

    /* windows at the maximum on small problems, forward and backward */
    {"bwd_causal_wlmax_d64", R_SMALL, BF, 2, 300, 300, 4, 2, 64, 1, WMAX, -1, 0, 0, F_BWD,
     GEN_UNIFORM},
    {"bwd_causal_wlmax_d64_det", R_SMALL, BF, 2, 300, 300, 4, 2, 64, 1, WMAX, -1, 0, 1, F_BWD,
     GEN_UNIFORM},
    {"bwd_causal_wlmax_d128", R_SMALL, FP, 1, 200, 333, 2, 2, 128, 1, WMAX, -1, 0, 0, F_BWD,
     GEN_UNIFORM},
    {"bwd_causal_wlmax_d128_det", R_SMALL, FP, 1, 200, 333, 2, 2, 128, 1, WMAX, -1, 0, 1,
     F_BWD, GEN_UNIFORM},
    {"bwd_causal_wlmax_d96", R_SMALL, BF, 1, 333, 200, 4, 1, 96, 1, WMAX, -1, 0, 0, F_BWD,
     GEN_UNIFORM},
    {"bwd_causal_wlmax_d96_det", R_SMALL, BF, 1, 333, 200, 4, 1, 96, 1, WMAX, -1, 0, 1, F_BWD,
     GEN_UNIFORM},
    {"small_windows_max_q_lt_k", R_SMALL, BF, 1, 217, 300, 2, 2, 64, 0, WMAX, WMAX, 0, 0,
     F_BWD, GEN_UNIFORM},
    {"small_windows_max_q_gt_k_det", R_SMALL, FP, 1, 300, 217, 2, 1, 96, 0, WMAX, WMAX, 0, 1,
     F_BWD, GEN_UNIFORM},
    {"small_wlmax_wr3_q_gt_k", R_SMALL, FP, 1, 300, 217, 2, 2, 64, 0, WMAX, 3, 0, 0, F_BWD,
     GEN_UNIFORM},
    {"small_wl5_wrmax_q_lt_k_det", R_SMALL, BF, 1, 217, 300, 2, 2, 128, 0, 5, WMAX, 0, 1,
     F_BWD, GEN_UNIFORM},
    {"small_wl_seqlen_minus1", R_SMALL, BF, 1, 200, 300, 2, 2, 64, 0, 299, 10, 0, 0, F_BWD,
     GEN_UNIFORM},
    {"small_wl_seqlen", R_SMALL, BF, 1, 200, 300, 2, 2, 64, 0, 300, 10, 0, 0, F_BWD,
     GEN_UNIFORM},
    {"small_wl_seqlen_plus1", R_SMALL, BF, 1, 200, 300, 2, 2, 96, 0, 301, 10, 0, 0, F_BWD,
     GEN_UNIFORM},
    {"small_wr_seqlen_minus1", R_SMALL, FP, 1, 300, 200, 2, 2, 64, 0, 10, 299, 0, 1, F_BWD,
     GEN_UNIFORM},
    {"small_wr_seqlen", R_SMALL, FP, 1, 300, 200, 2, 2, 96, 0, 10, 300, 0, 1, F_BWD,
     GEN_UNIFORM},
    {"small_wr_seqlen_plus1", R_SMALL, FP, 1, 300, 200, 2, 2, 64, 0, 10, 301, 0, 1, F_BWD,
     GEN_UNIFORM},

    /* seqlen_k = 0 */
    {"kzero_d64", R_SMALL, BF, 2, 50, 0, 2, 1, 64, 0, -1, -1, 0, 0, F_BWD, GEN_UNIFORM},
    {"kzero_d96_causal_det", R_SMALL, FP, 1, 77, 0, 4, 4, 96, 1, -1, -1, 0, 1, F_BWD,
     GEN_UNIFORM},
    {"kzero_d256_window", R_SMALL, BF, 1, 33, 0, 2, 2, 256, 0, 5, 5, 0, 0, F_BWD, GEN_UNIFORM},

    /* softmax_scale = FA2_MAX_SOFTMAX_SCALE */
    {"scale_max_fwd_bf16_causal", R_SMALL, BF, 1, 200, 300, 2, 2, 64, 1, -1, -1, SMAX, 0, 0,
     GEN_TIES_K},
    {"scale_max_fwd_fp16", R_SMALL, FP, 1, 300, 200, 4, 2, 64, 0, -1, -1, SMAX, 0, 0,
     GEN_TIES_K},
    {"scale_max_fwd_fp16_d96_window", R_SMALL, FP, 1, 150, 150, 2, 1, 96, 0, 30, 30, SMAX, 0,
     0, GEN_TIES_K},
    {"scale_max_bwd_bf16", R_SMALL, BF, 1, 200, 300, 2, 2, 64, 1, -1, -1, SMAX, 0, F_BWD,
     GEN_ZERO_MAX},
    {"scale_max_bwd_bf16_d128_det", R_SMALL, BF, 1, 200, 300, 2, 1, 128, 1, -1, -1, SMAX, 1,
     F_BWD, GEN_ZERO_MAX},
    {"scale_max_bwd_fp16", R_SMALL, FP, 1, 300, 200, 2, 2, 64, 0, -1, -1, SMAX, 0, F_BWD,
     GEN_ZERO_MAX_KV},
    {"scale_max_bwd_fp16_d96_det", R_SMALL, FP, 1, 200, 300, 2, 2, 96, 1, -1, -1, SMAX, 1,
     F_BWD, GEN_ZERO_MAX_KV},
    {"scale_max_bwd_large_logits_bf16", R_SMALL, BF, 1, 200, 300, 2, 2, 64, 0, -1, -1, SMAX,
     0, F_BWD, GEN_TIES_K},

    /* backward at seqlen 2^22 (memory permitting) */
    {"bwd_kmax", R_BWD_KMAX, BF, 1, 64, MAXLEN, 1, 1, 8, 1, 40, -1, 0, 0, F_BWD, GEN_UNIFORM},
    {"bwd_kmax_hopper_d128", R_BWD_KMAX, BF, 1, 64, MAXLEN, 1, 1, 128, 1, 40, -1, 0, 0, F_BWD,
     GEN_UNIFORM},
    {"bwd_qmax", R_BWD_QMAX, FP, 1, MAXLEN, 100, 1, 1, 8, 1, -1, -1, 0, 1, F_BWD, GEN_UNIFORM},
};

/* ---- small helpers ---------------------------------------------------------------------- */


/* A fa2 call that must succeed; else the case fails. */
#define FA2_OK(call)                                                                    \
    do {                                                                                \
        const fa2_status_t s_ = (call);                                                 \
        if (s_ != FA2_SUCCESS) {                                                        \
            printf(" : %s: %s (%s) FAIL\n", #call, fa2_status_string(s_), fa2_last_error()); \
            goto cleanup;                                                               \
        }                                                                               \
    } while (0)

static double now_s(void)
{
    struct timespec ts;
    timespec_get(&ts, TIME_UTC);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The gap from |x| (as fp32) to the next fp32 value. */
static double ulp32(double x)
{
    const float f = (float)fabs(x);
    return (double)nextafterf(f, INFINITY) - (double)f;
}

static void to_float(const uint16_t *bits, float *out, int64_t n, fa2_dtype_t dt)
{
    const float *lut = g_lut[dt];
    for (int64_t t = 0; t < n; ++t)
        out[t] = lut[bits[t]];
}

static uint64_t name_seed(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; ++s)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* Host values of one tensor: dtype bits (what the GPU gets) and their float values. */
typedef struct host_t {
    uint16_t *bits;
    float *vals;
    int64_t n;
} host_t;

static int host_new(host_t *h, int64_t n)
{
    h->n = n;
    h->bits = malloc(sizeof(uint16_t) * (size_t)(n > 0 ? n : 1));
    h->vals = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    return h->bits && h->vals;
}

static void host_free(host_t *h)
{
    free(h->bits), free(h->vals);
    h->bits = NULL, h->vals = NULL;
}

static void host_set(host_t *h, int64_t at, float x, fa2_dtype_t dt)
{
    h->bits[at] = oracle_bits_from_float(x, dt);
    h->vals[at] = oracle_float_from_bits(h->bits[at], dt);
}

/* uniform in [-1, 1], drawn again while it rounds to +-0 */
static void fill_uniform(host_t *h, int64_t from, int64_t n, oracle_rng_t *rng, fa2_dtype_t dt)
{
    for (int64_t t = from; t < from + n; ++t)
        do
            host_set(h, t, oracle_rng_uniform(rng, -1.0f, 1.0f), dt);
        while (h->vals[t] == 0.0f);
}

/* A device buffer of `bytes` plus GUARD bytes, all poisoned with 0xFF (NaN). */
typedef struct buf_t {
    void *dev;
    size_t bytes;
} buf_t;

static cudaError_t buf_new(buf_t *b, size_t bytes)
{
    b->bytes = bytes;
    cudaError_t e = cudaMalloc(&b->dev, bytes + GUARD);
    if (e == cudaSuccess)
        e = cudaMemset(b->dev, 0xFF, bytes + GUARD);
    return e;
}

static void buf_free(buf_t *b)
{
    cudaFree(b->dev);
    b->dev = NULL;
}

/* 1 when the GUARD bytes after the buffer are still 0xFF, 0 when written, -1 on error. */
static int guard_ok(const buf_t *b)
{
    unsigned char h[GUARD];
    if (!b->dev || cudaMemcpy(h, (char *)b->dev + b->bytes, GUARD, cudaMemcpyDeviceToHost) !=
                       cudaSuccess)
        return -1;
    for (int t = 0; t < GUARD; ++t)
        if (h[t] != 0xFF)
            return 0;
    return 1;
}

/* Fills `rows` rows of row_elems elements at dev with the host row, by doubling copies
 * on the device (cheap for 2^22 rows). */
static cudaError_t fill_repeat(void *dev, const uint16_t *row, int64_t row_elems, int64_t rows)
{
    const size_t row_bytes = sizeof(uint16_t) * (size_t)row_elems;
    cudaError_t e = cudaMemcpy(dev, row, row_bytes, cudaMemcpyHostToDevice);
    for (int64_t have = 1; e == cudaSuccess && have < rows;) {
        const int64_t n = have < rows - have ? have : rows - have;
        e = cudaMemcpy((char *)dev + (size_t)have * row_bytes, dev, (size_t)n * row_bytes,
                       cudaMemcpyDeviceToDevice);
        have += n;
    }
    return e;
}

/* 0 (with a SKIP line) when the device has less than `need` bytes free (+1 GiB). */
static int memory_fits(size_t need)
{
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess)
        return 0;
    if ((double)free_b < (double)need + GIB) {
        printf(" : SKIP (needs %.1f GiB + 1 GiB margin, %.1f of %.1f GiB free)\n",
               (double)need / GIB, (double)free_b / GIB, (double)total_b / GIB);
        return 0;
    }
    return 1;
}

/* ---- checks ----------------------------------------------------------------------------- */

typedef enum lse_mode_t {
    LSE_LOOSE, /* 1e-3 * max(1, |lse|) */
    LSE_TIGHT, /* 1e-4 * max(1, |lse|): every key equal, the math is exact */
    LSE_ULP    /* 1e-3 + 3 fp32 ulp of |lse|: the largest scale, |lse| ~ 1e6 */
} lse_mode_t;

static double lse_tol(lse_mode_t mode, double ref)
{
    switch (mode) {
    case LSE_TIGHT:
        return 1e-4 * fmax(1.0, fabs(ref));
    case LSE_ULP:
        return 1e-3 + 3.0 * ulp32(ref);
    default:
        return 1e-3 * fmax(1.0, fabs(ref));
    }
}

typedef struct check_t {
    int64_t rows, keys, bad_o, bad_lse, bad_dq, bad_dk, bad_dv, bad_zero, bad_guard, shown;
    double ex_o, ex_lse, ex_dq, ex_dk, ex_dv; /* worst |error| - tolerance */
    double p_allow;                           /* largest P allowance (fp32 LSE) */
    double sum_terms;                         /* equal addends in the row being checked */
    int backward;
} check_t;

static void check_init(check_t *c, int backward)
{
    memset(c, 0, sizeof *c);
    c->ex_o = c->ex_lse = c->ex_dq = c->ex_dk = c->ex_dv = -INFINITY;
    c->backward = backward;
}

/* Prints a detail line (the first 6 of a case). */
static void note(check_t *c, const char *fmt, ...)
{
    if (c->shown++ >= 6)
        return;
    va_list ap;
    va_start(ap, fmt);
    printf("\n  ");
    vprintf(fmt, ap);
    va_end(ap);
}

/* |got - want| > tol (NaN counts); keeps the worst excess. */
static int exceeds(double got, double want, double tol, double *worst)
{
    const double e = fabs(got - want) - tol;
    if (!(e <= *worst))
        *worst = isnan(e) ? INFINITY : e;
    return !(e <= 0.0);
}

/* One query row of the forward (`i` is printed as is). */
static void check_o_row(check_t *c, fa2_dtype_t dt, lse_mode_t mode, int64_t b, int64_t i,
                        int64_t h, const float *got, int64_t d, float lse_got,
                        const double *want, double lse_want)
{
    c->rows++;
    if (isinf(lse_want)) { /* no visible key */
        int ok = isinf(lse_got) && lse_got < 0;
        for (int64_t x = 0; x < d; ++x)
            ok &= got[x] == 0.0f;
        if (!ok) {
            c->bad_zero++;
            note(c, "row b=%" PRId64 " i=%" PRId64 " h=%" PRId64 " sees no key: LSE %g, O[0] %g "
                 "(want -inf, 0)", b, i, h, (double)lse_got, (double)got[0]);
        }
        return;
    }
    /* A row that sums n equal terms (every key the same) carries the fp32 accumulators'
     * drift: measured (bench/lab/long_rows.c, H200) 7.8e-3 at n = 2^20, 3.9e-2 at 2^22,
     * about 1.25 * n * 2^-27 of the largest |O|; allowed 1.5x that from n = 2^16 on. */
    const double drift = c->sum_terms >= 65536 ? 1.5 * c->sum_terms * 0x1p-27 : 0.0;
    const double tol = (4 * gpu_rows_eps(dt) + drift) * gpu_rows_maxabs(want, d, 0.25);
    int64_t bad = 0, worst_x = 0;
    double worst = -INFINITY;
    for (int64_t x = 0; x < d; ++x) {
        const double before = worst;
        bad += exceeds(got[x], want[x], tol, &worst);
        if (worst != before)
            worst_x = x;
    }
    if (!(worst <= c->ex_o))
        c->ex_o = worst;
    c->bad_o += bad != 0;
    if (bad)
        note(c, "O row b=%" PRId64 " i=%" PRId64 " h=%" PRId64 ": %" PRId64 " bad, O[%" PRId64
             "] %g want %.6g (tol %.2e)", b, i, h, bad, worst_x, (double)got[worst_x],
             want[worst_x], tol);
    if (exceeds(lse_got, lse_want, lse_tol(mode, lse_want), &c->ex_lse)) {
        c->bad_lse++;
        note(c, "LSE b=%" PRId64 " i=%" PRId64 " h=%" PRId64 ": %.9g want %.9g (tol %.2e)", b, i,
             h, (double)lse_got, lse_want, lse_tol(mode, lse_want));
    }
}

/* One gradient row: within tol + extra[x], or exactly 0 when `zero`. */
static void check_grad_row(check_t *c, const char *what, int64_t *bad_count, double *ex,
                           int64_t b, int64_t s, int64_t h, const float *got, const double *want,
                           const double *extra, int64_t d, double tol, int zero)
{
    if (zero) {
        int ok = 1;
        for (int64_t x = 0; x < d; ++x)
            ok &= got[x] == 0.0f;
        if (!ok) {
            c->bad_zero++;
            note(c, "%s row b=%" PRId64 " s=%" PRId64 " h=%" PRId64 " has no path to the loss "
                 "but is not 0: [0] %g", what, b, s, h, (double)got[0]);
        }
        return;
    }
    int64_t bad = 0, worst_x = 0;
    double worst = -INFINITY;
    for (int64_t x = 0; x < d; ++x) {
        const double before = worst;
        bad += exceeds(got[x], want[x], tol + (extra ? extra[x] : 0.0), &worst);
        if (worst != before)
            worst_x = x;
    }
    if (!(worst <= *ex))
        *ex = worst;
    *bad_count += bad != 0;
    if (bad)
        note(c, "%s row b=%" PRId64 " s=%" PRId64 " h=%" PRId64 ": %" PRId64 " bad, [%" PRId64
             "] %g want %.6g (tol %.2e + %.2e)", what, b, s, h, bad, worst_x,
             (double)got[worst_x], want[worst_x], tol, extra ? extra[worst_x] : 0.0);
}

static void check_guard(check_t *c, const char *what, const buf_t *b)
{
    const int g = guard_ok(b);
    if (g != 1) {
        c->bad_guard++;
        note(c, "%s: %s", what, g < 0 ? "guard unreadable" : "written past its end");
    }
}

/* The case's verdict, on the rest of its line. */
static int finish(const check_t *c, double t0)
{
    const int pass = c->bad_o + c->bad_lse + c->bad_dq + c->bad_dk + c->bad_dv + c->bad_zero +
                         c->bad_guard == 0 && c->rows > 0;
    printf("%s : %" PRId64 " rows; excess O %.2e LSE %.2e", c->shown ? "\n " : "", c->rows,
           c->ex_o, c->ex_lse);
    if (c->backward)
        printf(" dQ %.2e dK %.2e dV %.2e (%" PRId64 " key rows)", c->ex_dq, c->ex_dk, c->ex_dv,
               c->keys);
    if (c->p_allow > 1e-3)
        printf("; P allowance %.2g", c->p_allow);
    printf("; bad O %" PRId64 " LSE %" PRId64, c->bad_o, c->bad_lse);
    if (c->backward)
        printf(" dQ %" PRId64 " dK %" PRId64 " dV %" PRId64, c->bad_dq, c->bad_dk, c->bad_dv);
    printf(" zeros %" PRId64 " guard %" PRId64 "; %.2f s %s\n", c->bad_zero, c->bad_guard,
           now_s() - t0, pass ? "PASS" : "FAIL");
    return pass;
}

/* ---- problems and references ------------------------------------------------------------ */

static fa2_problem_t case_problem(const lcase_t *c)
{
    fa2_problem_t p;
    fa2_problem_init(&p, c->dtype, c->batch, c->seqlen_q, c->seqlen_k, c->heads_q, c->heads_kv,
                     c->head_dim);
    p.causal = c->causal;
    p.window_left = c->window_left;
    p.window_right = c->window_right;
    p.softmax_scale = c->scale;
    p.deterministic = c->deterministic;
    return p;
}

/* The same mask with every window that reaches past all keys written as -1
 * (unbounded): window_left >= seqlen_k - 1, window_right >= seqlen_q - 1. */
static fa2_problem_t unbounded_equivalent(const fa2_problem_t *p)
{
    fa2_problem_t r = *p;
    if (r.window_left >= r.seqlen_k - 1)
        r.window_left = -1;
    if (r.window_right >= r.seqlen_q - 1)
        r.window_right = -1;
    return r;
}

/* 1 when every row sees the same keys under both problems (the test's own sanity). */
static int same_ranges(const fa2_problem_t *a, const fa2_problem_t *b, int64_t row_shift,
                       int64_t key_shift, int64_t rows)
{
    for (int64_t i = 0; i < rows; ++i) {
        int64_t lo_a, hi_a, lo_b, hi_b;
        const int any_a = oracle_key_range(a, i + row_shift, &lo_a, &hi_a);
        const int any_b = oracle_key_range(b, i, &lo_b, &hi_b);
        if (any_a != any_b || (any_a && (lo_a != lo_b + key_shift || hi_a != hi_b + key_shift)))
            return 0;
    }
    return 1;
}

static void describe(const lcase_t *c, const fa2_problem_t *p)
{
    printf("%-34s %s b=%" PRId64 " q=%" PRId64 " k=%" PRId64 " hq=%" PRId64 " hkv=%" PRId64
           " d=%" PRId64 "%s", c->name, p->dtype == BF ? "bf16" : "fp16", p->batch, p->seqlen_q,
           p->seqlen_k, p->heads_q, p->heads_kv, p->head_dim, p->causal ? " causal" : "");
    if (p->window_left >= 0)
        printf(" wl=%" PRId64, p->window_left);
    if (p->window_right >= 0)
        printf(" wr=%" PRId64, p->window_right);
    if (p->softmax_scale != 0.0f)
        printf(" scale=%g", (double)p->softmax_scale);
    if (c->flags & F_BWD)
        printf(" bwd%s", p->deterministic ? " det" : "");
    if (c->flags & (F_BCAST_Q | F_BCAST_KV))
        printf(" broadcast%s%s", c->flags & F_BCAST_Q ? " Q" : "", c->flags & F_BCAST_KV ? " KV" : "");
    if (c->flags & F_REPEAT_KV)
        printf(" repeated KV rows");
    fflush(stdout);
}

/* Error the backward's design carries, per element of dQ, dK, dV (contiguous, as
 * oracle_backward writes them), for problem p with float inputs laid out as p says:
 *   D from O rounded to the dtype: |D - D'| <= eps * T_i, T_i = sum_x |dO_ix O_ix|, which
 *     moves dS_ij by P_ij (D - D'): dQ by eps scale T_i |sum_j P_ij K_j|, dK_j by
 *     eps scale T_i P_ij |Q_i|;
 *   dS and P rounded to the dtype before their products: eps / 2 of each term;
 *   P recomputed as exp2(s scale log2e - LSE log2e) from an fp32 LSE: the exponent is
 *     off by up to 1.5 fp32 ulp of |LSE| log2e, a relative error a_i of every P_ij of
 *     the row (negligible unless |LSE| is large).
 * *p_allow gets the largest a_i. Returns 0, or -1 when out of memory. */
static int bwd_allowances(const fa2_problem_t *p, const float *q, const float *k, const float *v,
                          const float *d_o, double *aq, double *ak, double *av, double *p_allow)
{
    const int64_t d = p->head_dim, group = p->heads_q / p->heads_kv;
    const int64_t nq = p->batch * p->seqlen_q * p->heads_q * d;
    const int64_t nk = p->batch * p->seqlen_k * p->heads_kv * d;
    const double eps = gpu_rows_eps(p->dtype), scale = oracle_softmax_scale(p);
    const size_t ns = (size_t)(p->seqlen_k > 0 ? p->seqlen_k : 1);
    double *s = malloc(sizeof(double) * ns), *dp = malloc(sizeof(double) * ns);
    double *o = malloc(sizeof(double) * (size_t)d), *pk = malloc(sizeof(double) * (size_t)d);
    double *sk = malloc(sizeof(double) * (size_t)d);
    int rc = -1;
    if (!s || !dp || !o || !pk || !sk)
        goto done;
    memset(aq, 0, sizeof(double) * (size_t)(nq > 0 ? nq : 1));
    memset(ak, 0, sizeof(double) * (size_t)(nk > 0 ? nk : 1));
    memset(av, 0, sizeof(double) * (size_t)(nk > 0 ? nk : 1));
    *p_allow = 0.0;
#define AT(ptr, seq, heads, bb, ss, hh)                                                 \
    ((ptr) + ((bb) * (seq) * (heads) + (ss) * (heads) + (hh)) * d)
    for (int64_t b = 0; b < p->batch; ++b)
        for (int64_t h = 0; h < p->heads_q; ++h)
            for (int64_t i = 0; i < p->seqlen_q; ++i) {
                int64_t lo, hi;
                if (!oracle_key_range(p, i, &lo, &hi))
                    continue;
                const int64_t hk = h / group;
                const float *qi = q + b * p->q_batch_stride + i * p->q_seq_stride +
                                  h * p->q_head_stride;
                const float *doi = d_o + b * p->o_batch_stride + i * p->o_seq_stride +
                                   h * p->o_head_stride;
                double m = -INFINITY, sum = 0.0, dsum = 0.0, t_i = 0.0;
                for (int64_t j = lo; j <= hi; ++j) {
                    const float *kj = k + b * p->k_batch_stride + j * p->k_seq_stride +
                                      hk * p->k_head_stride;
                    double acc = 0.0;
                    for (int64_t x = 0; x < d; ++x)
                        acc += (double)qi[x] * (double)kj[x];
                    s[j] = scale * acc;
                    m = fmax(m, s[j]);
                }
                for (int64_t j = lo; j <= hi; ++j)
                    sum += exp(s[j] - m);
                const double lse = m + log(sum);
                const double a_i = exp2(1.5 * ulp32(fabs(lse) * LOG2E)) - 1.0;
                *p_allow = fmax(*p_allow, a_i);
                for (int64_t x = 0; x < d; ++x)
                    o[x] = 0.0, pk[x] = 0.0, sk[x] = 0.0;
                for (int64_t j = lo; j <= hi; ++j) {
                    const float *vj = v + b * p->v_batch_stride + j * p->v_seq_stride +
                                      hk * p->v_head_stride;
                    s[j] = exp(s[j] - lse); /* s now holds P */
                    double acc = 0.0;
                    for (int64_t x = 0; x < d; ++x) {
                        o[x] += s[j] * (double)vj[x];
                        acc += (double)doi[x] * (double)vj[x];
                    }
                    dp[j] = acc;
                }
                for (int64_t x = 0; x < d; ++x) {
                    t_i += fabs((double)doi[x] * o[x]);
                    dsum += (double)doi[x] * o[x];
                }
                double *aq_row = AT(aq, p->seqlen_q, p->heads_q, b, i, h);
                for (int64_t j = lo; j <= hi; ++j) {
                    const float *kj = k + b * p->k_batch_stride + j * p->k_seq_stride +
                                      hk * p->k_head_stride;
                    const double pj = s[j], ds = fabs(pj * (dp[j] - dsum));
                    double *ak_row = AT(ak, p->seqlen_k, p->heads_kv, b, j, hk);
                    double *av_row = AT(av, p->seqlen_k, p->heads_kv, b, j, hk);
                    for (int64_t x = 0; x < d; ++x) {
                        pk[x] += pj * (double)kj[x];
                        sk[x] += ds * fabs((double)kj[x]);
                        ak_row[x] += eps * (1.0 + a_i) * scale * t_i * pj * fabs((double)qi[x]) +
                                     (eps / 2 + a_i) * scale * ds * fabs((double)qi[x]);
                        av_row[x] += (eps / 2 + a_i) * pj * fabs((double)doi[x]);
                    }
                }
                for (int64_t x = 0; x < d; ++x)
                    aq_row[x] = eps * (1.0 + a_i) * scale * t_i * fabs(pk[x]) +
                                (eps / 2 + a_i) * scale * sk[x];
            }
#undef AT
    rc = 0;
done:
    free(s), free(dp), free(o), free(pk), free(sk);
    return rc;
}

/* Checks the forward of contiguous problem p (O/LSE downloaded as floats) against
 * want_o/want_lse (oracle_forward of p). Printed rows are i + row_shift. */
static void check_forward(check_t *c, const fa2_problem_t *p, lse_mode_t mode, const float *o,
                          const float *lse, const double *want_o, const double *want_lse,
                          int64_t row_shift)
{
    const int64_t d = p->head_dim;
    for (int64_t b = 0; b < p->batch; ++b)
        for (int64_t i = 0; i < p->seqlen_q; ++i)
            for (int64_t h = 0; h < p->heads_q; ++h) {
                const int64_t at = ((b * p->seqlen_q + i) * p->heads_q + h) * d;
                const int64_t l = (b * p->heads_q + h) * p->seqlen_q + i;
                check_o_row(c, p->dtype, mode, b, i + row_shift, h, o + at, d, lse[l],
                            want_o + at, want_lse[l]);
            }
}

/* Checks dQ (every row) and dK/dV (every key) of contiguous problem p against the
 * oracle's, with the allowances; structural zeros exactly 0. */
static void check_gradients(check_t *c, const fa2_problem_t *p, const float *dq, const float *dk,
                            const float *dv, const double *wq, const double *wk,
                            const double *wv, const double *aq, const double *ak,
                            const double *av, int64_t row_shift, int64_t key_shift)
{
    const int64_t d = p->head_dim, sq = p->seqlen_q, sk = p->seqlen_k;
    const int64_t hq = p->heads_q, hkv = p->heads_kv;
    const double eps = gpu_rows_eps(p->dtype);
    char *seen = calloc((size_t)(sk > 0 ? sk : 1), 1);
    if (!seen) {
        c->bad_zero++;
        note(c, "host out of memory");
        return;
    }
    for (int64_t i = 0; i < sq; ++i) {
        int64_t lo, hi;
        const int any = oracle_key_range(p, i, &lo, &hi);
        for (int64_t j = lo; any && j <= hi; ++j)
            seen[j] = 1;
        for (int64_t b = 0; b < p->batch; ++b)
            for (int64_t h = 0; h < hq; ++h) {
                const int64_t at = ((b * sq + i) * hq + h) * d;
                check_grad_row(c, "dQ", &c->bad_dq, &c->ex_dq, b, i + row_shift, h, dq + at,
                               wq + at, aq + at, d, 8 * eps * gpu_rows_maxabs(wq + at, d, 1e-3), !any);
            }
    }
    for (int64_t b = 0; b < p->batch; ++b)
        for (int64_t h = 0; h < hkv; ++h) {
            /* the head's scale: its largest dK (dV), at least 1e-3 of the larger of both */
            double mk = 0.0, mv = 0.0;
            for (int64_t j = 0; j < sk; ++j) {
                const int64_t at = ((b * sk + j) * hkv + h) * d;
                mk = gpu_rows_maxabs(wk + at, d, mk), mv = gpu_rows_maxabs(wv + at, d, mv);
            }
            const double floor = fmax(1e-3 * fmax(mk, mv), 1e-30);
            const double tol_k = 8 * eps * fmax(mk, floor), tol_v = 8 * eps * fmax(mv, floor);
            for (int64_t j = 0; j < sk; ++j) {
                const int64_t at = ((b * sk + j) * hkv + h) * d;
                c->keys++;
                check_grad_row(c, "dK", &c->bad_dk, &c->ex_dk, b, j + key_shift, h, dk + at,
                               wk + at, ak + at, d, tol_k, !seen[j]);
                check_grad_row(c, "dV", &c->bad_dv, &c->ex_dv, b, j + key_shift, h, dv + at,
                               wv + at, av + at, d, tol_v, !seen[j]);
            }
        }
    free(seen);
}

/* ---- R_PLAN ----------------------------------------------------------------------------- */

static int plan_expect(const char *what, const fa2_problem_t *p, fa2_status_t want,
                       int want_bwd, fa2_status_t want_bwd_status, int *bad)
{
    fa2_plan_t plan;
    const fa2_status_t s = fa2_plan(p, &g_info, &plan);
    int ok = s == want;
    if (ok && s == FA2_SUCCESS && want_bwd >= 0)
        ok = plan.bwd_supported == want_bwd && plan.bwd_status == (int32_t)want_bwd_status;
    if (!ok && (*bad)++ < 6)
        printf("\n  %s: %s (%s), bwd_supported %d bwd_status %d; want %s", what,
               fa2_status_string(s), fa2_last_error(), s == FA2_SUCCESS ? plan.bwd_supported : -1,
               s == FA2_SUCCESS ? plan.bwd_status : -1, fa2_status_string(want));
    return ok;
}

/* Each limit accepted, one step past it refused, with the status the header names. */
static int run_plan_limits(const lcase_t *c, double t0)
{
    fa2_problem_t base = case_problem(c), p;
    int bad = 0, n = 0;
    printf("%-34s fa2_plan at and past each limit", c->name);
#define EXPECT(what, field, value, want, wb, wbs) \
    (p = base, p.field = (value), ++n, plan_expect(what, &p, want, wb, wbs, &bad))
    EXPECT("seqlen_q = 2^22", seqlen_q, MAXLEN, FA2_SUCCESS, 1, FA2_SUCCESS);
    EXPECT("seqlen_q = 2^22 + 1", seqlen_q, MAXLEN + 1, FA2_ERROR_INVALID_SIZE, -1, 0);
    EXPECT("seqlen_k = 2^22", seqlen_k, MAXLEN, FA2_SUCCESS, 1, FA2_SUCCESS);
    EXPECT("seqlen_k = 2^22 + 1", seqlen_k, MAXLEN + 1, FA2_ERROR_INVALID_SIZE, -1, 0);
    EXPECT("seqlen_k = 0", seqlen_k, 0, FA2_SUCCESS, 1, FA2_SUCCESS);
    EXPECT("window_left = 2^31 - 1", window_left, WMAX, FA2_SUCCESS, 1, FA2_SUCCESS);
    EXPECT("window_left = 2^31", window_left, WMAX + 1, FA2_ERROR_BAD_WINDOW, -1, 0);
    EXPECT("window_right = 2^31 - 1", window_right, WMAX, FA2_SUCCESS, 1, FA2_SUCCESS);
    EXPECT("window_right = 2^31", window_right, WMAX + 1, FA2_ERROR_BAD_WINDOW, -1, 0);
    EXPECT("softmax_scale = 65536", softmax_scale, SMAX, FA2_SUCCESS, 1, FA2_SUCCESS);
    EXPECT("softmax_scale = 65536 + 1 ulp", softmax_scale, nextafterf(SMAX, INFINITY),
           FA2_ERROR_BAD_SCALE, -1, 0);
    EXPECT("k_seq_stride = 0 (broadcast K)", k_seq_stride, 0, FA2_SUCCESS, 0, FA2_ERROR_OVERLAP);
    EXPECT("q_seq_stride = 0 (broadcast Q)", q_seq_stride, 0, FA2_SUCCESS, 0, FA2_ERROR_OVERLAP);
    EXPECT("o_seq_stride = 0", o_seq_stride, 0, FA2_ERROR_OVERLAP, -1, 0);
#undef EXPECT
    /* combinations at the limit */
    p = base, p.causal = 1, p.window_left = WMAX, ++n;
    plan_expect("causal + window_left = 2^31 - 1", &p, FA2_SUCCESS, 1, FA2_SUCCESS, &bad);
    fa2_problem_init(&p, BF, 1, MAXLEN, MAXLEN, 1, 1, 8), p.deterministic = 1, ++n;
    plan_expect("seqlen_q = seqlen_k = 2^22, d 8, deterministic", &p, FA2_SUCCESS, 1,
                FA2_SUCCESS, &bad);
    p.deterministic = 0, ++n;
    plan_expect("seqlen_q = seqlen_k = 2^22, d 8", &p, FA2_SUCCESS, 1, FA2_SUCCESS, &bad);
    fa2_plan_t plan;
    p = base, p.softmax_scale = SMAX, ++n;
    if (fa2_plan(&p, &g_info, &plan) != FA2_SUCCESS || plan.problem.softmax_scale != SMAX) {
        if (bad++ < 6)
            printf("\n  softmax_scale = 65536 not kept in plan.problem");
    }
    printf("%s : %d checks, %d wrong; %.2f s %s\n", bad ? "\n " : "", n, bad, now_s() - t0,
           bad ? "FAIL" : "PASS");
    return bad == 0;
}

/* ---- R_REFUSED -------------------------------------------------------------------------- */

/* Broadcast K/V, then broadcast Q: the plan has no backward (FA2_ERROR_OVERLAP) and
 * fa2_backward returns that, leaving poisoned dQ, dK, dV and workspace untouched. */
static int run_refused(const lcase_t *c, double t0)
{
    int pass = 0, ok = 1;
    const fa2_problem_t base = case_problem(c);
    const int64_t d = base.head_dim, n = base.batch * base.seqlen_q * base.heads_q * d;
    const size_t bytes = sizeof(uint16_t) * (size_t)n, ws_bytes = (size_t)1 << 20;
    buf_t in = {0}, o = {0}, lse = {0}, g[4] = {{0}};
    unsigned char *back = malloc((bytes > ws_bytes ? bytes : ws_bytes) + GUARD);
    printf("%-34s fa2_backward with K/V, then Q, broadcast (seq stride 0)", c->name);
    fflush(stdout);
    if (!back) {
        printf(" : host out of memory FAIL\n");
        return 0;
    }
    CK(buf_new(&in, bytes));
    CK(cudaMemset(in.dev, 0, bytes)); /* zeros: finite inputs */
    CK(buf_new(&o, bytes));
    CK(buf_new(&lse, sizeof(float) * (size_t)(base.batch * base.heads_q * base.seqlen_q)));
    for (int t = 0; t < 3; ++t)
        CK(buf_new(&g[t], bytes));
    CK(buf_new(&g[3], ws_bytes)); /* workspace: more than either plan needs */
    for (int which = 0; which < 2; ++which) {
        fa2_problem_t p = base;
        fa2_plan_t plan;
        if (which == 0)
            p.k_seq_stride = p.v_seq_stride = 0;
        else
            p.q_seq_stride = 0;
        FA2_OK(fa2_plan(&p, &g_info, &plan));
        FA2_OK(fa2_forward(&plan, in.dev, in.dev, in.dev, o.dev, lse.dev, NULL, 0, NULL));
        CK(cudaDeviceSynchronize());
        const fa2_status_t s =
            fa2_backward(&plan, in.dev, in.dev, in.dev, o.dev, in.dev, lse.dev, g[0].dev,
                         g[1].dev, g[2].dev, g[3].dev, g[3].bytes, NULL);
        CK(cudaDeviceSynchronize());
        int untouched = 1;
        for (int t = 0; t < 4; ++t) {
            CK(cudaMemcpy(back, g[t].dev, g[t].bytes + GUARD, cudaMemcpyDeviceToHost));
            for (size_t x = 0; x < g[t].bytes + GUARD; ++x)
                untouched &= back[x] == 0xFF;
        }
        const int this_ok = !plan.bwd_supported && plan.bwd_status == FA2_ERROR_OVERLAP &&
                            s == FA2_ERROR_OVERLAP && untouched;
        if (!this_ok)
            printf("\n  %s broadcast: bwd_supported %d bwd_status %d, fa2_backward %s, "
                   "outputs %s", which ? "Q" : "K/V", plan.bwd_supported, plan.bwd_status,
                   fa2_status_string(s), untouched ? "untouched" : "WRITTEN");
        ok &= this_ok;
    }
    pass = ok;
    printf("%s : %.2f s %s\n", ok ? "" : "\n ", now_s() - t0, pass ? "PASS" : "FAIL");
cleanup:
    fflush(stdout);
    buf_free(&in), buf_free(&o), buf_free(&lse);
    for (int t = 0; t < 4; ++t)
        buf_free(&g[t]);
    free(back);
    return pass;
}

/* ---- R_SMALL ---------------------------------------------------------------------------- */

/* Inputs of a small contiguous problem, per the case's generator. */
static void gen_small(const lcase_t *c, const fa2_problem_t *p, host_t *q, host_t *k, host_t *v,
                      host_t *d_o, oracle_rng_t *rng)
{
    const fa2_dtype_t dt = p->dtype;
    const int64_t d = p->head_dim, rows_k = p->batch * p->seqlen_k * p->heads_kv;
    fill_uniform(d_o, 0, d_o->n, rng, dt);
    if (c->gen == GEN_UNIFORM) {
        fill_uniform(q, 0, q->n, rng, dt);
        fill_uniform(k, 0, k->n, rng, dt);
        fill_uniform(v, 0, v->n, rng, dt);
        return;
    }
    enum { POOL = 37 };
    static float kpool[POOL][256], vpool[POOL][256];
    const int zero_max = c->gen == GEN_ZERO_MAX || c->gen == GEN_ZERO_MAX_KV;
    for (int r = 0; r < POOL; ++r) {
        for (int64_t x = 0; x < d; ++x) {
            /* zero-max pool: row 0 all 0, the others in {-1, 0} with a -1 somewhere */
            const int u = (int)(oracle_rng_next(rng) % 5);
            kpool[r][x] = zero_max ? (r == 0 ? 0.0f : (u < 2 ? -1.0f : 0.0f)) : (float)(u - 2);
            vpool[r][x] = oracle_rng_uniform(rng, -1.0f, 1.0f);
        }
        if (zero_max && r > 0)
            kpool[r][oracle_rng_next(rng) % (uint64_t)d] = -1.0f;
    }
    for (int64_t t = 0; t < q->n; ++t)
        host_set(q, t,
                 zero_max ? (float)(1 + (int)(oracle_rng_next(rng) % 2))
                          : (float)((int)(oracle_rng_next(rng) % 5) - 2),
                 dt);
    for (int64_t row = 0; row < rows_k; ++row) {
        const int64_t j = row / p->heads_kv % p->seqlen_k;
        const int r = zero_max ? (j % 3 == 0 ? 0 : 1 + (int)(oracle_rng_next(rng) % (POOL - 1)))
                               : (int)(oracle_rng_next(rng) % POOL);
        for (int64_t x = 0; x < d; ++x) {
            host_set(k, row * d + x, kpool[r][x], dt);
            if (c->gen == GEN_ZERO_MAX_KV)
                host_set(v, row * d + x, vpool[r][x], dt);
        }
        if (c->gen != GEN_ZERO_MAX_KV)
            fill_uniform(v, row * d, d, rng, dt);
    }
}

static int run_small(const lcase_t *c, double t0)
{
    fa2_problem_t p = case_problem(c);
    const fa2_problem_t pref = unbounded_equivalent(&p);
    fa2_plan_t plan;
    check_t ck;
    const int bwd = (c->flags & F_BWD) != 0;
    check_init(&ck, bwd);
    describe(c, &p);
    if (pref.window_left != p.window_left || pref.window_right != p.window_right)
        printf(" (ref wl=%" PRId64 " wr=%" PRId64 ")", pref.window_left, pref.window_right);
    fflush(stdout);

    const int64_t d = p.head_dim, nq = p.batch * p.seqlen_q * p.heads_q * d;
    const int64_t nk = p.batch * p.seqlen_k * p.heads_kv * d, nl = p.batch * p.heads_q * p.seqlen_q;
    const size_t bq = sizeof(uint16_t) * (size_t)nq, bk = sizeof(uint16_t) * (size_t)nk;
    const lse_mode_t mode = c->scale > 1000.0f ? LSE_ULP : LSE_LOOSE;
    int pass = 0;
    host_t q = {0}, k = {0}, v = {0}, d_o = {0};
    buf_t gq = {0}, gk = {0}, gv = {0}, go = {0}, glse = {0}, gdo = {0}, gdq = {0}, gdk = {0},
          gdv = {0}, gws = {0};
    uint16_t *bits = NULL;
    float *got_o = NULL, *got_lse = NULL, *got_dq = NULL, *got_dk = NULL, *got_dv = NULL;
    double *want_o = NULL, *want_lse = NULL, *wq = NULL, *wk = NULL, *wv = NULL, *aq = NULL,
           *ak = NULL, *av = NULL;

    FA2_OK(fa2_plan(&p, &g_info, &plan));
    if (bwd && !plan.bwd_supported) {
        printf(" : plan has no backward: bwd_status %d FAIL\n", plan.bwd_status);
        goto cleanup;
    }
    if (!same_ranges(&p, &pref, 0, 0, p.seqlen_q)) {
        printf(" : test bug: the reference mask differs FAIL\n");
        goto cleanup;
    }
    const size_t nqa = (size_t)(nq > 0 ? nq : 1), nka = (size_t)(nk > 0 ? nk : 1);
    bits = malloc(sizeof(uint16_t) * (nqa > nka ? nqa : nka));
    got_o = malloc(sizeof(float) * nqa), got_dq = malloc(sizeof(float) * nqa);
    got_dk = malloc(sizeof(float) * nka), got_dv = malloc(sizeof(float) * nka);
    got_lse = malloc(sizeof(float) * (size_t)nl);
    want_o = malloc(sizeof(double) * nqa), want_lse = malloc(sizeof(double) * (size_t)nl);
    wq = malloc(sizeof(double) * nqa), aq = malloc(sizeof(double) * nqa);
    wk = malloc(sizeof(double) * nka), wv = malloc(sizeof(double) * nka);
    ak = malloc(sizeof(double) * nka), av = malloc(sizeof(double) * nka);
    if (!host_new(&q, nq) || !host_new(&k, nk) || !host_new(&v, nk) || !host_new(&d_o, nq) ||
        !bits || !got_o || !got_dq || !got_dk || !got_dv || !got_lse || !want_o || !want_lse ||
        !wq || !aq || !wk || !wv || !ak || !av) {
        printf(" : host out of memory FAIL\n");
        goto cleanup;
    }
    oracle_rng_t rng = oracle_rng(name_seed(c->name));
    gen_small(c, &p, &q, &k, &v, &d_o, &rng);

    /* inputs (K/V of seqlen_k = 0: a guard-only dummy), poisoned outputs */
    CK(buf_new(&gq, bq));
    CK(buf_new(&gk, bk));
    CK(buf_new(&gv, bk));
    CK(cudaMemcpy(gq.dev, q.bits, bq, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(gk.dev, k.bits, bk, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(gv.dev, v.bits, bk, cudaMemcpyHostToDevice));
    CK(buf_new(&go, bq));
    CK(buf_new(&glse, sizeof(float) * (size_t)nl));
    FA2_OK(fa2_forward(&plan, gq.dev, gk.dev, gv.dev, go.dev, glse.dev, NULL, 0, NULL));
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(bits, go.dev, bq, cudaMemcpyDeviceToHost));
    to_float(bits, got_o, nq, p.dtype);
    CK(cudaMemcpy(got_lse, glse.dev, sizeof(float) * (size_t)nl, cudaMemcpyDeviceToHost));
    if (oracle_forward(&pref, q.vals, k.vals, v.vals, want_o, want_lse)) {
        printf(" : oracle out of memory FAIL\n");
        goto cleanup;
    }
    check_forward(&ck, &p, mode, got_o, got_lse, want_o, want_lse, 0);
    check_guard(&ck, "O", &go);
    check_guard(&ck, "LSE", &glse);

    if (bwd) {
        CK(buf_new(&gdo, bq));
        CK(cudaMemcpy(gdo.dev, d_o.bits, bq, cudaMemcpyHostToDevice));
        CK(buf_new(&gdq, bq));
        CK(buf_new(&gdk, bk));
        CK(buf_new(&gdv, bk));
        CK(buf_new(&gws, (size_t)plan.bwd_workspace_bytes));
        FA2_OK(fa2_backward(&plan, gq.dev, gk.dev, gv.dev, go.dev, gdo.dev, glse.dev, gdq.dev,
                            gdk.dev, gdv.dev, gws.dev, gws.bytes, NULL));
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(bits, gdq.dev, bq, cudaMemcpyDeviceToHost));
        to_float(bits, got_dq, nq, p.dtype);
        CK(cudaMemcpy(bits, gdk.dev, bk, cudaMemcpyDeviceToHost));
        to_float(bits, got_dk, nk, p.dtype);
        CK(cudaMemcpy(bits, gdv.dev, bk, cudaMemcpyDeviceToHost));
        to_float(bits, got_dv, nk, p.dtype);
        if (oracle_backward(&pref, q.vals, k.vals, v.vals, d_o.vals, wq, wk, wv) ||
            bwd_allowances(&pref, q.vals, k.vals, v.vals, d_o.vals, aq, ak, av, &ck.p_allow)) {
            printf(" : oracle out of memory FAIL\n");
            goto cleanup;
        }
        check_gradients(&ck, &pref, got_dq, got_dk, got_dv, wq, wk, wv, aq, ak, av, 0, 0);
        check_guard(&ck, "dQ", &gdq);
        check_guard(&ck, "dK", &gdk);
        check_guard(&ck, "dV", &gdv);
        if (nk == 0) { /* the dummies stay untouched: guard == the whole buffer */
            check_guard(&ck, "K dummy", &gk);
            check_guard(&ck, "V dummy", &gv);
        }
    }
    pass = finish(&ck, t0);

cleanup:
    fflush(stdout);
    buf_free(&gq), buf_free(&gk), buf_free(&gv), buf_free(&go), buf_free(&glse);
    buf_free(&gdo), buf_free(&gdq), buf_free(&gdk), buf_free(&gdv), buf_free(&gws);
    host_free(&q), host_free(&k), host_free(&v), host_free(&d_o);
    free(bits), free(got_o), free(got_lse), free(got_dq), free(got_dk), free(got_dv);
    free(want_o), free(want_lse), free(wq), free(wk), free(wv), free(aq), free(ak), free(av);
    cudaGetLastError();
    return pass;
}

/* ---- R_ROWS ----------------------------------------------------------------------------- */

static int cmp_i64(const void *a, const void *b)
{
    const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Query rows to check: all when few, else the ends, the tile edges around them, the
 * rows where the mask changes (first/last row that sees a key, first row whose left
 * or right window edge leaves the key range) +-2, and 24 pseudo-random rows. */
static int64_t pick_rows(const fa2_problem_t *p, int64_t *rows, int64_t cap)
{
    const int64_t sq = p->seqlen_q, sk = p->seqlen_k, off = sk - sq;
    const int64_t wr = p->causal ? 0 : p->window_right, wl = p->window_left;
    int64_t n = 0;
    if (sq <= 64) {
        for (int64_t i = 0; i < sq; ++i)
            rows[n++] = i;
        return n;
    }
    int64_t marks[16], nm = 0;
    marks[nm++] = 0, marks[nm++] = sq / 2, marks[nm++] = sq - 1;
    marks[nm++] = 63, marks[nm++] = 127, marks[nm++] = sq - 65, marks[nm++] = sq - 129;
    if (wl >= 0) {
        marks[nm++] = wl - off;          /* last row whose window starts at key 0 */
        marks[nm++] = sk - 1 - off + wl; /* last row that sees a key */
    }
    if (wr >= 0) {
        marks[nm++] = -off - wr;         /* first row that sees a key */
        marks[nm++] = sk - 1 - off - wr; /* first row that reaches the last key */
    }
    for (int64_t m = 0; m < nm; ++m)
        for (int64_t t = -2; t <= 2 && n < cap; ++t)
            if (marks[m] + t >= 0 && marks[m] + t < sq)
                rows[n++] = marks[m] + t;
    for (uint64_t r = 0; r < 24 && n < cap; ++r)
        rows[n++] = (int64_t)(gpu_rows_mix(r + 777) % (uint64_t)sq);
    qsort(rows, (size_t)n, sizeof(int64_t), cmp_i64);
    int64_t u = 0;
    for (int64_t t = 0; t < n; ++t)
        if (u == 0 || rows[u - 1] != rows[t])
            rows[u++] = rows[t];
    return u;
}

/* Forward with Q and/or K/V broadcast along the sequence (batch 1), chosen rows. */
static int run_rows(const lcase_t *c, double t0)
{
    fa2_problem_t p = case_problem(c);
    const int bq = (c->flags & F_BCAST_Q) != 0, bkv = (c->flags & F_BCAST_KV) != 0;
    const int rkv = (c->flags & F_REPEAT_KV) != 0, same_keys = bkv || rkv;
    const int64_t d = p.head_dim, hq = p.heads_q, hkv = p.heads_kv, sq = p.seqlen_q;
    if (bq)
        p.q_batch_stride = 0, p.q_seq_stride = 0, p.q_head_stride = d;
    if (bkv) {
        p.k_batch_stride = p.v_batch_stride = 0;
        p.k_seq_stride = p.v_seq_stride = 0;
        p.k_head_stride = p.v_head_stride = d;
    }
    describe(c, &p);
    fa2_plan_t plan;
    check_t ck;
    check_init(&ck, 0);
    int pass = 0;
    const int64_t q_rows = bq ? 1 : sq, kv_rows = same_keys ? 1 : p.seqlen_k;
    const int64_t nq = q_rows * hq * d, nk = kv_rows * hkv * d;
    const size_t kv_bytes = sizeof(uint16_t) * (size_t)(rkv ? p.seqlen_k * hkv * d : nk);
    const size_t o_bytes = sizeof(uint16_t) * (size_t)(sq * hq * d);
    const size_t lse_bytes = sizeof(float) * (size_t)(sq * hq);
    host_t q = {0}, k = {0}, v = {0};
    buf_t gq = {0}, gk = {0}, gv = {0}, go = {0}, glse = {0};
    int64_t rows[128];
    double *want = NULL, *s = NULL;
    float *got = NULL;
    uint16_t *bits = NULL;

    FA2_OK(fa2_plan(&p, &g_info, &plan));
    if ((bq || bkv) && (plan.bwd_supported || plan.bwd_status != FA2_ERROR_OVERLAP)) {
        printf(" : a broadcast layout must have no backward (bwd_supported %d, bwd_status %d) "
               "FAIL\n", plan.bwd_supported, plan.bwd_status);
        goto cleanup;
    }
    if (!memory_fits(o_bytes + lse_bytes + 4 * sizeof(uint16_t) * (size_t)nq + 4 * kv_bytes)) {
        pass = -1;
        goto cleanup;
    }
    want = malloc(sizeof(double) * (size_t)d);
    got = malloc(sizeof(float) * (size_t)d);
    bits = malloc(sizeof(uint16_t) * (size_t)d);
    s = malloc(sizeof(double) * (size_t)kv_rows);
    if (!host_new(&q, nq) || !host_new(&k, nk) || !host_new(&v, nk) || !want || !got || !bits ||
        !s) {
        printf(" : host out of memory FAIL\n");
        goto cleanup;
    }
    oracle_rng_t rng = oracle_rng(name_seed(c->name));
    fill_uniform(&q, 0, nq, &rng, p.dtype);
    fill_uniform(&k, 0, nk, &rng, p.dtype);
    for (int64_t t = 0; t < nk; ++t) /* uniform keys: V in +-2^-e, every sum exact */
        if (same_keys)
            host_set(&v, t, (oracle_rng_next(&rng) & 1 ? 1.0f : -1.0f) *
                                ldexpf(1.0f, -(int)(oracle_rng_next(&rng) % 4)), p.dtype);
        else
            fill_uniform(&v, t, 1, &rng, p.dtype);

    CK(buf_new(&gq, sizeof(uint16_t) * (size_t)nq));
    CK(buf_new(&gk, kv_bytes));
    CK(buf_new(&gv, kv_bytes));
    CK(cudaMemcpy(gq.dev, q.bits, gq.bytes, cudaMemcpyHostToDevice));
    if (rkv) { /* every sequence row the host's one row (all heads) */
        CK(fill_repeat(gk.dev, k.bits, hkv * d, p.seqlen_k));
        CK(fill_repeat(gv.dev, v.bits, hkv * d, p.seqlen_k));
    } else {
        CK(cudaMemcpy(gk.dev, k.bits, gk.bytes, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(gv.dev, v.bits, gv.bytes, cudaMemcpyHostToDevice));
    }
    CK(buf_new(&go, o_bytes));
    CK(buf_new(&glse, lse_bytes));
    FA2_OK(fa2_forward(&plan, gq.dev, gk.dev, gv.dev, go.dev, glse.dev, NULL, 0, NULL));
    CK(cudaDeviceSynchronize());

    const double scale = oracle_softmax_scale(&p);
    const int64_t n_rows = pick_rows(&p, rows, 128), group = hq / hkv;
    for (int64_t r = 0; r < n_rows; ++r)
        for (int64_t h = 0; h < hq; ++h) {
            const int64_t i = rows[r], hk = h / group;
            const float *qi = q.vals + ((bq ? 0 : i) * hq + h) * d;
            int64_t lo, hi;
            double lse = -INFINITY;
            for (int64_t x = 0; x < d; ++x)
                want[x] = 0.0;
            if (oracle_key_range(&p, i, &lo, &hi)) {
                if (same_keys) { /* every key equal: uniform softmax over n = hi - lo + 1 keys */
                    double acc = 0.0;
                    for (int64_t x = 0; x < d; ++x) {
                        acc += (double)qi[x] * (double)k.vals[hk * d + x];
                        want[x] = v.vals[hk * d + x];
                    }
                    lse = scale * acc + log((double)(hi - lo + 1));
                } else {
                    double m = -INFINITY, sum = 0.0;
                    for (int64_t j = lo; j <= hi; ++j) {
                        double acc = 0.0;
                        for (int64_t x = 0; x < d; ++x)
                            acc += (double)qi[x] * (double)k.vals[(j * hkv + hk) * d + x];
                        s[j] = scale * acc;
                        m = fmax(m, s[j]);
                    }
                    for (int64_t j = lo; j <= hi; ++j)
                        sum += exp(s[j] - m);
                    lse = m + log(sum);
                    for (int64_t j = lo; j <= hi; ++j)
                        for (int64_t x = 0; x < d; ++x)
                            want[x] += exp(s[j] - lse) * (double)v.vals[(j * hkv + hk) * d + x];
                }
            }
            float lse_got;
            ck.sum_terms = same_keys && !isinf(lse) ? (double)(hi - lo + 1) : 0.0;
            CK(cudaMemcpy(bits, (uint16_t *)go.dev + (i * hq + h) * d, sizeof(uint16_t) * (size_t)d,
                          cudaMemcpyDeviceToHost));
            to_float(bits, got, d, p.dtype);
            CK(cudaMemcpy(&lse_got, (float *)glse.dev + h * sq + i, sizeof(float),
                          cudaMemcpyDeviceToHost));
            check_o_row(&ck, p.dtype, same_keys ? LSE_TIGHT : LSE_LOOSE, 0, i, h, got, d, lse_got,
                        want, lse);
        }
    check_guard(&ck, "O", &go);
    check_guard(&ck, "LSE", &glse);
    pass = finish(&ck, t0);

cleanup:
    fflush(stdout);
    buf_free(&gq), buf_free(&gk), buf_free(&gv), buf_free(&go), buf_free(&glse);
    host_free(&q), host_free(&k), host_free(&v);
    free(want), free(got), free(bits), free(s);
    cudaGetLastError();
    return pass;
}

/* ---- R_BWD_KMAX / R_BWD_QMAX ------------------------------------------------------------ */

/* Downloads n elements at element offset `at` of a device dtype buffer as floats. */
static cudaError_t fetch(float *out, const buf_t *b, int64_t at, int64_t n, uint16_t *scratch,
                         fa2_dtype_t dt)
{
    const cudaError_t e = cudaMemcpy(scratch, (const uint16_t *)b->dev + at,
                                     sizeof(uint16_t) * (size_t)n, cudaMemcpyDeviceToHost);
    if (e == cudaSuccess)
        to_float(scratch, out, n, dt);
    return e;
}

/* The backward at a length of 2^22 (one head, batch 1, contiguous). Only a small
 * window of keys (R_BWD_KMAX: the last keys) or rows (R_BWD_QMAX: the last rows) is
 * reached; the oracle on the small problem of the same relative geometry is the
 * reference there, and everything outside must be exactly 0 (dK/dV of unreached keys;
 * O, dQ of rows that see nothing, with LSE = -inf). The bulk of the big tensors repeats
 * one row (filled on the device); the reached part is random. */
static int run_bwd_big(const lcase_t *c, double t0)
{
    const int kmax = c->runner == R_BWD_KMAX;
    fa2_problem_t p = case_problem(c);
    describe(c, &p);
    const int64_t d = p.head_dim, sq = p.seqlen_q, sk = p.seqlen_k;
    const fa2_dtype_t dt = p.dtype;
    fa2_plan_t plan;
    check_t ck;
    check_init(&ck, 1);
    int pass = 0;
    buf_t gq = {0}, gk = {0}, gv = {0}, go = {0}, glse = {0}, gdo = {0}, gdq = {0}, gdk = {0},
          gdv = {0}, gws = {0};
    host_t q = {0}, k = {0}, v = {0}, d_o = {0}, bg = {0};
    uint16_t *bits = NULL;
    float *got_o = NULL, *got_lse = NULL, *got_dq = NULL, *got_dk = NULL, *got_dv = NULL;
    double *want_o = NULL, *want_lse = NULL, *wq = NULL, *wk = NULL, *wv = NULL, *aq = NULL,
           *ak = NULL, *av = NULL, *zeros = NULL;

    FA2_OK(fa2_plan(&p, &g_info, &plan));
    if (!plan.bwd_supported) {
        printf(" : plan has no backward: bwd_status %d FAIL\n", plan.bwd_status);
        goto cleanup;
    }
    /* the reached part: keys from the first row's first key (kmax), rows from the first
     * row that sees a key (qmax), with 24 (28) unreached ones in front */
    int64_t lo, hi, first = 0;
    if (kmax) {
        if (!oracle_key_range(&p, 0, &lo, &hi) || lo < 24) {
            printf(" : test bug: want the reached keys at the end FAIL\n");
            goto cleanup;
        }
        first = lo - 24;
    } else {
        while (first < sq && !oracle_key_range(&p, first, &lo, &hi))
            first += first < sq - 4096 ? 4096 : 1; /* coarse, then exact near the end */
        while (first > 0 && oracle_key_range(&p, first - 1, &lo, &hi))
            --first;
        if (first < 28 || first == sq) {
            printf(" : test bug: want the reached rows at the end FAIL\n");
            goto cleanup;
        }
        first -= 28;
    }
    fa2_problem_t ps = p; /* the small problem: same relative geometry */
    if (kmax)
        ps.seqlen_k = sk - first;
    else
        ps.seqlen_q = sq - first;
    ps.q_batch_stride = ps.seqlen_q * d, ps.o_batch_stride = ps.seqlen_q * d;
    ps.k_batch_stride = ps.v_batch_stride = ps.seqlen_k * d;
    if (!same_ranges(&p, &ps, kmax ? 0 : first, kmax ? first : 0, ps.seqlen_q)) {
        printf(" : test bug: the small problem's mask differs FAIL\n");
        goto cleanup;
    }
    const size_t bq = sizeof(uint16_t) * (size_t)(sq * d), bk = sizeof(uint16_t) * (size_t)(sk * d);
    const size_t need = kmax ? 4 * bk + 4 * bq : 4 * bq + 4 * bk + sizeof(float) * (size_t)sq +
                                                     (size_t)plan.bwd_workspace_bytes;
    printf(" (workspace %.2f GiB)", (double)plan.bwd_workspace_bytes / GIB);
    if (!memory_fits(need)) {
        pass = -1;
        goto cleanup;
    }

    /* host: the small problem's inputs; bg: the repeated row of the big tensors */
    const int64_t nqs = ps.seqlen_q * d, nks = ps.seqlen_k * d;
    oracle_rng_t rng = oracle_rng(name_seed(c->name));
    if (!host_new(&q, nqs) || !host_new(&k, nks) || !host_new(&v, nks) || !host_new(&d_o, nqs) ||
        !host_new(&bg, 2 * d)) {
        printf(" : host out of memory FAIL\n");
        goto cleanup;
    }
    fill_uniform(&bg, 0, 2 * d, &rng, dt);
    fill_uniform(&k, 0, nks, &rng, dt);
    fill_uniform(&v, 0, nks, &rng, dt);
    if (kmax) {
        fill_uniform(&q, 0, nqs, &rng, dt);
        fill_uniform(&d_o, 0, nqs, &rng, dt);
    } else { /* every row of Q (dO) is bg's first (second) row */
        for (int64_t t = 0; t < nqs; ++t) {
            q.bits[t] = bg.bits[t % d], q.vals[t] = bg.vals[t % d];
            d_o.bits[t] = bg.bits[d + t % d], d_o.vals[t] = bg.vals[d + t % d];
        }
    }

    CK(buf_new(&gq, bq));
    CK(buf_new(&gdo, bq));
    CK(buf_new(&gk, bk));
    CK(buf_new(&gv, bk));
    if (kmax) { /* K/V: the background row, then the reached keys at the end */
        CK(cudaMemcpy(gq.dev, q.bits, bq, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(gdo.dev, d_o.bits, bq, cudaMemcpyHostToDevice));
        CK(fill_repeat(gk.dev, bg.bits, d, sk));
        CK(fill_repeat(gv.dev, bg.bits + d, d, sk));
        CK(cudaMemcpy((uint16_t *)gk.dev + first * d, k.bits, sizeof(uint16_t) * (size_t)nks,
                      cudaMemcpyHostToDevice));
        CK(cudaMemcpy((uint16_t *)gv.dev + first * d, v.bits, sizeof(uint16_t) * (size_t)nks,
                      cudaMemcpyHostToDevice));
    } else {
        CK(fill_repeat(gq.dev, bg.bits, d, sq));
        CK(fill_repeat(gdo.dev, bg.bits + d, d, sq));
        CK(cudaMemcpy(gk.dev, k.bits, bk, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(gv.dev, v.bits, bk, cudaMemcpyHostToDevice));
    }
    CK(buf_new(&go, bq));
    CK(buf_new(&glse, sizeof(float) * (size_t)sq));
    CK(buf_new(&gdq, bq));
    CK(buf_new(&gdk, bk));
    CK(buf_new(&gdv, bk));
    CK(buf_new(&gws, (size_t)plan.bwd_workspace_bytes));
    const double t_run = now_s();
    FA2_OK(fa2_forward(&plan, gq.dev, gk.dev, gv.dev, go.dev, glse.dev, NULL, 0, NULL));
    FA2_OK(fa2_backward(&plan, gq.dev, gk.dev, gv.dev, go.dev, gdo.dev, glse.dev, gdq.dev,
                        gdk.dev, gdv.dev, gws.dev, gws.bytes, NULL));
    CK(cudaDeviceSynchronize());
    printf(" (kernels %.2f s)", now_s() - t_run);

    /* the reached part against the small problem's oracle */
    const int64_t nq_a = nqs > 0 ? nqs : 1, nk_a = nks > 0 ? nks : 1;
    bits = malloc(sizeof(uint16_t) * (size_t)(nq_a > nk_a ? nq_a : nk_a));
    got_o = malloc(sizeof(float) * (size_t)nq_a), got_dq = malloc(sizeof(float) * (size_t)nq_a);
    got_lse = malloc(sizeof(float) * (size_t)ps.seqlen_q);
    got_dk = malloc(sizeof(float) * (size_t)nk_a), got_dv = malloc(sizeof(float) * (size_t)nk_a);
    want_o = malloc(sizeof(double) * (size_t)nq_a), wq = malloc(sizeof(double) * (size_t)nq_a);
    aq = malloc(sizeof(double) * (size_t)nq_a);
    want_lse = malloc(sizeof(double) * (size_t)ps.seqlen_q);
    wk = malloc(sizeof(double) * (size_t)nk_a), wv = malloc(sizeof(double) * (size_t)nk_a);
    ak = malloc(sizeof(double) * (size_t)nk_a), av = malloc(sizeof(double) * (size_t)nk_a);
    if (!bits || !got_o || !got_dq || !got_lse || !got_dk || !got_dv || !want_o || !wq || !aq ||
        !want_lse || !wk || !wv || !ak || !av) {
        printf(" : host out of memory FAIL\n");
        goto cleanup;
    }
    const int64_t row0 = kmax ? 0 : first, key0 = kmax ? first : 0;
    CK(fetch(got_o, &go, row0 * d, nqs, bits, dt));
    CK(fetch(got_dq, &gdq, row0 * d, nqs, bits, dt));
    CK(fetch(got_dk, &gdk, key0 * d, nks, bits, dt));
    CK(fetch(got_dv, &gdv, key0 * d, nks, bits, dt));
    CK(cudaMemcpy(got_lse, (float *)glse.dev + row0, sizeof(float) * (size_t)ps.seqlen_q,
                  cudaMemcpyDeviceToHost));
    if (oracle_forward(&ps, q.vals, k.vals, v.vals, want_o, want_lse) ||
        oracle_backward(&ps, q.vals, k.vals, v.vals, d_o.vals, wq, wk, wv) ||
        bwd_allowances(&ps, q.vals, k.vals, v.vals, d_o.vals, aq, ak, av, &ck.p_allow)) {
        printf(" : oracle out of memory FAIL\n");
        goto cleanup;
    }
    check_forward(&ck, &ps, LSE_LOOSE, got_o, got_lse, want_o, want_lse, row0);
    check_gradients(&ck, &ps, got_dq, got_dk, got_dv, wq, wk, wv, aq, ak, av, row0, key0);

    /* the unreached part, sampled: the start, tile edges, the middle, just before the
     * reached part, and random */
    const int64_t span = first; /* unreached keys (kmax) or rows (qmax): [0, first) */
    int64_t picks[64], np = 0;
    const int64_t fixed[] = {0, 1, 2, 63, 64, 127, 128, span / 2, span - 129, span - 128,
                             span - 65, span - 64, span - 2, span - 1};
    for (size_t t = 0; t < sizeof fixed / sizeof fixed[0]; ++t)
        if (fixed[t] >= 0 && fixed[t] < span)
            picks[np++] = fixed[t];
    for (uint64_t r = 0; r < 24; ++r)
        picks[np++] = (int64_t)(gpu_rows_mix(r + 99) % (uint64_t)span);
    zeros = calloc((size_t)d, sizeof(double));
    if (!zeros) {
        printf(" : host out of memory FAIL\n");
        goto cleanup;
    }
    for (int64_t t = 0; t < np; ++t) {
        const int64_t at = picks[t];
        if (kmax) {
            ck.keys++;
            CK(fetch(got_dk, &gdk, at * d, d, bits, dt));
            CK(fetch(got_dv, &gdv, at * d, d, bits, dt));
            check_grad_row(&ck, "dK", &ck.bad_dk, &ck.ex_dk, 0, at, 0, got_dk, zeros, NULL, d, 0,
                           1);
            check_grad_row(&ck, "dV", &ck.bad_dv, &ck.ex_dv, 0, at, 0, got_dv, zeros, NULL, d, 0,
                           1);
        } else {
            float lse_got;
            CK(fetch(got_o, &go, at * d, d, bits, dt));
            CK(fetch(got_dq, &gdq, at * d, d, bits, dt));
            CK(cudaMemcpy(&lse_got, (float *)glse.dev + at, sizeof(float), cudaMemcpyDeviceToHost));
            check_o_row(&ck, dt, LSE_LOOSE, 0, at, 0, got_o, d, lse_got, zeros, -INFINITY);
            check_grad_row(&ck, "dQ", &ck.bad_dq, &ck.ex_dq, 0, at, 0, got_dq, zeros, NULL, d, 0,
                           1);
        }
    }
    check_guard(&ck, "O", &go);
    check_guard(&ck, "LSE", &glse);
    check_guard(&ck, "dQ", &gdq);
    check_guard(&ck, "dK", &gdk);
    check_guard(&ck, "dV", &gdv);
    pass = finish(&ck, t0);

cleanup:
    fflush(stdout);
    buf_free(&gq), buf_free(&gk), buf_free(&gv), buf_free(&go), buf_free(&glse);
    buf_free(&gdo), buf_free(&gdq), buf_free(&gdk), buf_free(&gdv), buf_free(&gws);
    host_free(&q), host_free(&k), host_free(&v), host_free(&d_o), host_free(&bg);
    free(bits), free(got_o), free(got_lse), free(got_dq), free(got_dk), free(got_dv);
    free(want_o), free(want_lse), free(wq), free(wk), free(wv), free(aq), free(ak), free(av);
    free(zeros);
    cudaGetLastError();
    return pass;
}

/* ---- main ------------------------------------------------------------------------------- */

/* 1 pass, 0 fail, -1 skipped */
static int run_case(const lcase_t *c)
{
    const double t0 = now_s();
    switch (c->runner) {
    case R_PLAN:
        return run_plan_limits(c, t0);
    case R_REFUSED:
        return run_refused(c, t0);
    case R_SMALL:
        return run_small(c, t0);
    case R_ROWS:
        return run_rows(c, t0);
    default:
        return run_bwd_big(c, t0);
    }
}

int main(int argc, char **argv)
{
    const int probe = gpu_rows_probe("test_limits_gpu", &g_info);
    if (probe || (argc > 1 && strcmp(argv[1], "--probe") == 0))
        return probe;
    g_lut[FA2_DTYPE_FP16] = gpu_rows_lut(FA2_DTYPE_FP16);
    g_lut[FA2_DTYPE_BF16] = gpu_rows_lut(FA2_DTYPE_BF16);
    if (!g_lut[FA2_DTYPE_FP16] || !g_lut[FA2_DTYPE_BF16]) {
        printf("test_limits_gpu: host out of memory\n");
        return 1;
    }
    const char *only = getenv("FA2_TEST_CASE");
    const char *skip_slow = getenv("FA2_LIMITS_SKIP_SLOW");
    const size_t n_cases = sizeof cases / sizeof cases[0];
    int run = 0, failed = 0, skipped = 0, found = 0;
    const double t0 = now_s();
    for (size_t t = 0; t < n_cases; ++t) {
        const lcase_t *c = &cases[t];
        if (only && *only && strcmp(only, c->name) != 0)
            continue;
        found = 1;
        if ((c->flags & F_SLOW) && skip_slow && *skip_slow == '1') {
            printf("%-34s skipped (FA2_LIMITS_SKIP_SLOW=1)\n", c->name);
            ++skipped;
            continue;
        }
        const int r = run_case(c);
        if (r < 0)
            ++skipped;
        else
            ++run, failed += r == 0;
    }
    if (only && *only && !found) {
        printf("test_limits_gpu: no case named \"%s\"; cases:", only);
        for (size_t t = 0; t < n_cases; ++t)
            printf(" %s", cases[t].name);
        printf("\n");
        failed = 1;
    }
    printf("test_limits_gpu: %d of %d cases failed, %d skipped, %.1f s\n", failed, run, skipped,
           now_s() - t0);
    free(g_lut[FA2_DTYPE_FP16]), free(g_lut[FA2_DTYPE_BF16]);
    return failed ? 1 : 0;
}
