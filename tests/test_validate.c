/* Validation, one case at a time: each bad field gives its own status, a message
 * naming the field and the value, and leaves the (poisoned) plan byte-identical.
 * Also fa2_forward's error paths, which all return before any CUDA call. CPU only. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "fa2.h"
#include "sm80/fwd_tiles.h"

#define I32MAX INT64_C(2147483647)

static fa2_device_info_t h200(void)
{
    fa2_device_info_t d;
    memset(&d, 0, sizeof d);
    d.struct_size = sizeof d;
    d.cc_major = 9;
    d.cc_minor = 0;
    d.sm_count = 132;
    d.smem_per_block_optin = 232448;
    d.smem_per_sm = 233472;
    return d;
}

/* A problem every check accepts: each test breaks one field of it. */
static fa2_problem_t base(void)
{
    fa2_problem_t p;
    fa2_problem_init(&p, FA2_DTYPE_BF16, 2, 100, 130, 8, 2, 64);
    return p;
}

/* fa2_plan must fail with `want`; the message must contain `n1` (and `n2` when not
 * NULL); the plan, poisoned with 0xAB, must come back byte-identical. */
#define EXPECT_FAIL(p, d, want, n1, n2) expect_fail(__LINE__, p, d, want, n1, n2)
static void expect_fail(int line, const fa2_problem_t *p, const fa2_device_info_t *d,
                        fa2_status_t want, const char *n1, const char *n2)
{
    fa2_plan_t plan, poison;
    fa2_status_t s;
    memset(&plan, 0xAB, sizeof plan);
    memcpy(&poison, &plan, sizeof plan);
    s = fa2_plan(p, d, &plan);
    if (s != want || !strstr(fa2_last_error(), n1) || (n2 && !strstr(fa2_last_error(), n2))) {
        print_error("line %d: got status %d, want %d; message \"%s\" should contain "
                    "\"%s\"%s%s%s\n",
                    line, (int)s, (int)want, fa2_last_error(), n1, n2 ? " and \"" : "",
                    n2 ? n2 : "", n2 ? "\"" : "");
        fail();
    }
    if (memcmp(&plan, &poison, sizeof plan) != 0) {
        print_error("line %d: fa2_plan wrote the plan on failure\n", line);
        fail();
    }
}

#define EXPECT_OK(p, d) expect_ok(__LINE__, p, d)
static void expect_ok(int line, const fa2_problem_t *p, const fa2_device_info_t *d)
{
    fa2_plan_t plan;
    fa2_status_t s = fa2_plan(p, d, &plan);
    if (s != FA2_SUCCESS) {
        print_error("line %d: got status %d, want success; message \"%s\"\n", line, (int)s,
                    fa2_last_error());
        fail();
    }
    assert_string_equal(fa2_last_error(), "");
}

static void test_base_is_valid(void **state)
{
    fa2_problem_t p = base();
    fa2_device_info_t d = h200();
    (void)state;
    EXPECT_OK(&p, &d);
}

/* ---- pointers and struct sizes ---------------------------------------------- */

static void test_null_problem(void **state)
{
    fa2_device_info_t d = h200();
    (void)state;
    EXPECT_FAIL(NULL, &d, FA2_ERROR_NULL_POINTER, "problem is NULL", NULL);
}

static void test_null_device(void **state)
{
    fa2_problem_t p = base();
    (void)state;
    EXPECT_FAIL(&p, NULL, FA2_ERROR_NULL_POINTER, "device is NULL", NULL);
}

static void test_null_plan(void **state)
{
    fa2_problem_t p = base();
    fa2_device_info_t d = h200();
    (void)state;
    assert_int_equal(fa2_plan(&p, &d, NULL), FA2_ERROR_NULL_POINTER);
    assert_non_null(strstr(fa2_last_error(), "plan is NULL"));
}

static void test_problem_struct_size(void **state)
{
    fa2_problem_t p = base();
    fa2_device_info_t d = h200();
    char want[64];
    (void)state;
    p.struct_size = 0;
    EXPECT_FAIL(&p, &d, FA2_ERROR_STRUCT_SIZE, "problem->struct_size=0", "fa2_problem_init");
    p.struct_size = sizeof p - 8;
    snprintf(want, sizeof want, "problem->struct_size=%zu", sizeof p - 8);
    EXPECT_FAIL(&p, &d, FA2_ERROR_STRUCT_SIZE, want, NULL);
    /* A newer caller's struct: fields this library does not know. */
    p.struct_size = sizeof p + 8;
    snprintf(want, sizeof want, "problem->struct_size=%zu", sizeof p + 8);
    EXPECT_FAIL(&p, &d, FA2_ERROR_STRUCT_SIZE, want, NULL);
}

static void test_device_struct_size(void **state)
{
    fa2_problem_t p = base();
    fa2_device_info_t d = h200();
    char want[64];
    (void)state;
    d.struct_size = 0;
    EXPECT_FAIL(&p, &d, FA2_ERROR_STRUCT_SIZE, "device->struct_size=0", NULL);
    d.struct_size = sizeof d + 8;
    snprintf(want, sizeof want, "device->struct_size=%zu", sizeof d + 8);
    EXPECT_FAIL(&p, &d, FA2_ERROR_STRUCT_SIZE, want, NULL);
}

/* ---- dtype and sizes ------------------------------------------------------------ */

static void test_dtype(void **state)
{
    fa2_problem_t p = base();
    fa2_device_info_t d = h200();
    (void)state;
    p.dtype = (fa2_dtype_t)0;
    EXPECT_FAIL(&p, &d, FA2_ERROR_UNSUPPORTED_DTYPE, "dtype=0", NULL);
    p.dtype = FA2_DTYPE_FP32; /* fa2_combine's only */
    EXPECT_FAIL(&p, &d, FA2_ERROR_UNSUPPORTED_DTYPE, "dtype=3", NULL);
    p.dtype = FA2_DTYPE_FP16;
    EXPECT_OK(&p, &d);
}

static void test_batch(void **state)
{
    fa2_problem_t p = base();
    fa2_device_info_t d = h200();
    (void)state;
    p.batch = 0;
    EXPECT_FAIL(&p, &d, FA2_ERROR_INVALID_SIZE, "batch=0", NULL);
    p.batch = -1;
    EXPECT_FAIL(&p, &d, FA2_ERROR_INVALID_SIZE, "batch=-1", NULL);
    p.batch = I32MAX + 1;
    EXPECT_FAIL(&p, &d, FA2_ERROR_INVALID_SIZE, "batch=2147483648", NULL);
}

static void test_seqlen_q(void **state)
{
    fa2_problem_t p = base();
    fa2_device_info_t d = h200();
    (void)state;
    p.seqlen_q = 0;
    EXPECT_FAIL(&p, &d, FA2_ERROR_INVALID_SIZE, "seqlen_q=0", NULL);
    p.seqlen_q = I32MAX + 1;
    EXPECT_FAIL(&p, &d, FA2_ERROR_INVALID_SIZE, "seqlen_q=2147483648", NULL);
    /* FA2_MAX_SEQLEN = 2^22: fp32 sums stay accurate, index sums stay in int32 */
    p.seqlen_q = I32MAX;
    EXPECT_FAIL(&p, &d, FA2_ERROR_INVALID_SIZE, "seqlen_q=2147483647", "4194304");
    p.seqlen_q = FA2_MAX_SEQLEN + 1;
    EXPECT_FAIL(&p, &d, FA2_ERROR_INVALID_SIZE, "seqlen_q=4194305", "4194304");
    p = base();
    p.batch = 1;
    p.seqlen_q = FA2_MAX_SEQLEN;
    EXPECT_OK(&p, &d);
}

static void test_seqlen_k(void **state)
{
    fa2_problem_t p = base();
    fa2_device_info_t d = h200();
    (void)state;
    p.seqlen_k = -1;
    EXPECT_FAIL(&p, &d, FA2_ERROR_INVALID_SIZE, "seqlen_k=-1", NULL);
    p.seqlen_k = I32MAX + 1;
    EXPECT_FAIL(&p, &d, FA2_ERROR_INVALID_SIZE, "seqlen_k=2147483648", NULL);
    p.seqlen_k = FA2_MAX_SEQLEN + 1;
    EXPECT_FAIL(&p, &d, FA2_ERROR_INVALID_SIZE, "seqlen_k=4194305", "4194304");
    p.seqlen_k = 0; /* allowed: O = 0, LSE = -inf */
    EXPECT_OK(&p, &d);
    p.batch = 1;
    p.seqlen_k = FA2_MAX_SEQLEN;
    EXPECT_OK(&p, &d);
}

static void test_heads(void **state)
{
    fa2_problem_t p = base();
    fa2_device_info_t d = h200();
    (void)state;
    p.heads_q = 0;
    EXPECT_FAIL(&p, &d, FA2_ERROR_INVALID_SIZE, "heads_q=0", NULL);
    p.heads_q = I32MAX + 1;
    p.heads_kv = 1;
    EXPECT_FAIL(&p, &d, FA2_ERROR_INVALID_SIZE, "heads_q=2147483648", NULL);
    p = base();
    p.heads_kv = 0;
    EXPECT_FAIL(&p, &d, FA2_ERROR_INVALID_SIZE, "heads_kv=0", NULL);
    p.heads_kv = -2;
    EXPECT_FAIL(&p, &d, FA2_ERROR_INVALID_SIZE, "heads_kv=-2", NULL);
    p.heads_kv = I32MAX + 1;
    EXPECT_FAIL(&p, &d, FA2_ERROR_INVALID_SIZE, "heads_kv=2147483648", NULL);
}

static void test_head_dim(void **state)
{
    static const int64_t bad[] = {0, -8, 4, 12, 100, 255, 260, 264, 300, 512, INT64_MAX};
    fa2_problem_t p;
    fa2_device_info_t d = h200();
    char want[96];
    (void)state;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        fa2_problem_init(&p, FA2_DTYPE_FP16, 1, 16, 16, 1, 1, 64);
        p.head_dim = bad[i]; /* strides stay valid: only head_dim is wrong */
        snprintf(want, sizeof want,
                 "head_dim=%lld is not supported (multiples of 8 from 8 to 256)",
                 (long long)bad[i]);
        EXPECT_FAIL(&p, &d, FA2_ERROR_UNSUPPORTED_HEAD_DIM, want, NULL);
    }
}

static void test_heads_mismatch(void **state)
{
    fa2_problem_t p;
    fa2_device_info_t d = h200();
    (void)state;
    fa2_problem_init(&p, FA2_DTYPE_FP16, 1, 16, 16, 6, 4, 64);
    EXPECT_FAIL(&p, &d, FA2_ERROR_HEADS_MISMATCH, "heads_q=6 is not a multiple of heads_kv=4",
                NULL);
    fa2_problem_init(&p, FA2_DTYPE_FP16, 1, 16, 16, 4, 8, 64);
    EXPECT_FAIL(&p, &d, FA2_ERROR_HEADS_MISMATCH, "heads_q=4 is not a multiple of heads_kv=8",
                NULL);
    fa2_problem_init(&p, FA2_DTYPE_FP16, 1, 16, 16, 12, 4, 64); /* GQA */
    EXPECT_OK(&p, &d);
    fa2_problem_init(&p, FA2_DTYPE_FP16, 1, 16, 16, 12, 1, 64); /* MQA */
    EXPECT_OK(&p, &d);
}

/* ---- strides ---------------------------------------------------------------------- */

static const struct {
    const char *name;
    size_t offset;
} strides[] = {
    {"q_batch_stride", offsetof(fa2_problem_t, q_batch_stride)},
    {"q_seq_stride", offsetof(fa2_problem_t, q_seq_stride)},
    {"q_head_stride", offsetof(fa2_problem_t, q_head_stride)},
    {"k_batch_stride", offsetof(fa2_problem_t, k_batch_stride)},
    {"k_seq_stride", offsetof(fa2_problem_t, k_seq_stride)},
    {"k_head_stride", offsetof(fa2_problem_t, k_head_stride)},
    {"v_batch_stride", offsetof(fa2_problem_t, v_batch_stride)},
    {"v_seq_stride", offsetof(fa2_problem_t, v_seq_stride)},
    {"v_head_stride", offsetof(fa2_problem_t, v_head_stride)},
    {"o_batch_stride", offsetof(fa2_problem_t, o_batch_stride)},
    {"o_seq_stride", offsetof(fa2_problem_t, o_seq_stride)},
    {"o_head_stride", offsetof(fa2_problem_t, o_head_stride)},
};

static void set_i64(fa2_problem_t *p, size_t offset, int64_t value)
{
    memcpy((char *)p + offset, &value, sizeof value);
}

static void test_stride_negative(void **state)
{
    fa2_device_info_t d = h200();
    char want[96];
    (void)state;
    for (size_t i = 0; i < sizeof strides / sizeof strides[0]; i++) {
        fa2_problem_t p = base();
        set_i64(&p, strides[i].offset, -8);
        snprintf(want, sizeof want, "%s=-8 is negative", strides[i].name);
        EXPECT_FAIL(&p, &d, FA2_ERROR_BAD_STRIDE, want, NULL);
    }
}

static void test_stride_not_multiple_of_8(void **state)
{
    static const int64_t bad[] = {3, 4, 12, 66};
    fa2_device_info_t d = h200();
    char want[96];
    (void)state;
    for (size_t i = 0; i < sizeof strides / sizeof strides[0]; i++) {
        for (size_t j = 0; j < sizeof bad / sizeof bad[0]; j++) {
            fa2_problem_t p = base();
            set_i64(&p, strides[i].offset, bad[j]);
            snprintf(want, sizeof want, "%s=%lld is not a multiple of 8 (16-byte rows)",
                     strides[i].name, (long long)bad[j]);
            EXPECT_FAIL(&p, &d, FA2_ERROR_BAD_STRIDE, want, NULL);
        }
    }
}

/* Free strides: BHSD, and 0 (K/V broadcast over the batch), are accepted. */
static void test_stride_layouts_accepted(void **state)
{
    fa2_problem_t p = base();
    fa2_device_info_t d = h200();
    (void)state;
    /* BHSD: [batch, heads, seq, head_dim] */
    p.q_head_stride = p.o_head_stride = p.seqlen_q * p.head_dim;
    p.q_seq_stride = p.o_seq_stride = p.head_dim;
    p.q_batch_stride = p.o_batch_stride = p.heads_q * p.seqlen_q * p.head_dim;
    p.k_head_stride = p.v_head_stride = p.seqlen_k * p.head_dim;
    p.k_seq_stride = p.v_seq_stride = p.head_dim;
    p.k_batch_stride = p.v_batch_stride = p.heads_kv * p.seqlen_k * p.head_dim;
    EXPECT_OK(&p, &d);
    p.k_batch_stride = p.v_batch_stride = 0;
    EXPECT_OK(&p, &d);
}

/* ---- overflow ------------------------------------------------------------------------ */

/* Each tensor's largest byte offset: a batch stride of 2^61 elements (2^62 bytes)
 * fits, 2^62 elements (2^63 bytes) does not. */
static void test_overflow_batch_stride(void **state)
{
    static const char *const tensor[] = {"q:", "k:", "v:", "o:"};
    static const size_t field[] = {
        offsetof(fa2_problem_t, q_batch_stride), offsetof(fa2_problem_t, k_batch_stride),
        offsetof(fa2_problem_t, v_batch_stride), offsetof(fa2_problem_t, o_batch_stride)};
    fa2_device_info_t d = h200();
    (void)state;
    for (int i = 0; i < 4; i++) {
        fa2_problem_t p = base();
        set_i64(&p, field[i], INT64_C(1) << 61);
        EXPECT_OK(&p, &d);
        set_i64(&p, field[i], INT64_C(1) << 62);
        EXPECT_FAIL(&p, &d, FA2_ERROR_SIZE_OVERFLOW, tensor[i], "overflows int64");
    }
}

/* (seqlen - 1) * seq_stride overflowing, with sizes each in range. */
static void test_overflow_seq_stride(void **state)
{
    fa2_problem_t p = base();
    fa2_device_info_t d = h200();
    (void)state;
    p.seqlen_k = FA2_MAX_SEQLEN;
    p.k_seq_stride = INT64_C(1) << 42;
    EXPECT_FAIL(&p, &d, FA2_ERROR_SIZE_OVERFLOW, "k:", "seqlen=4194304");
    p = base();
    p.heads_q = p.heads_kv = I32MAX;
    p.q_head_stride = INT64_C(1) << 33;
    EXPECT_FAIL(&p, &d, FA2_ERROR_SIZE_OVERFLOW, "q:", "heads=2147483647");
}

/* The exact edge: the byte past the last element, 2 * ((seq-1)*ss + (heads-1)*hs +
 * head_dim), must be <= INT64_MAX, i.e. that element count <= 2^62 - 1. */
static void test_overflow_exact_edge(void **state)
{
    const int64_t edge = INT64_C(1) << 62; /* first element count that overflows */
    fa2_problem_t p;
    fa2_device_info_t d = h200();
    (void)state;
    fa2_problem_init(&p, FA2_DTYPE_FP16, 1, 2, 1, 1, 1, 64);
    p.q_seq_stride = edge - 64 - 8; /* 2^62 - 8 elements */
    EXPECT_OK(&p, &d);
    p.q_seq_stride = edge - 64; /* 2^62 elements */
    EXPECT_FAIL(&p, &d, FA2_ERROR_SIZE_OVERFLOW, "q:", "overflows int64");
    fa2_problem_init(&p, FA2_DTYPE_FP16, 1, 1, 1, 2, 2, 64);
    p.o_head_stride = edge - 64 - 8;
    EXPECT_OK(&p, &d);
    p.o_head_stride = edge - 64;
    EXPECT_FAIL(&p, &d, FA2_ERROR_SIZE_OVERFLOW, "o:", "overflows int64");
}

/* LSE: batch * heads_q * seqlen_q float32 values. O holds at least 16 bytes per row
 * and may not repeat addresses, so O's extent overflows before the LSE's; with Q/K/V
 * broadcast (zero strides), a grid over the CUDA limit is refused first. */
static void test_overflow_lse(void **state)
{
    fa2_problem_t p;
    fa2_device_info_t d = h200();
    (void)state;
    fa2_problem_init(&p, FA2_DTYPE_FP16, INT64_C(1) << 20, INT64_C(1) << 20, 16,
                     INT64_C(1) << 20, 1, 64);
    for (size_t i = 0; i < sizeof strides / sizeof strides[0]; i++)
        if (strstr(strides[i].name, "head_stride") == NULL && strstr(strides[i].name, "o_") == NULL)
            set_i64(&p, strides[i].offset, 0);
    p.q_head_stride = 0;
    /* 2^60 rows, 2^67 bytes of O */
    EXPECT_FAIL(&p, &d, FA2_ERROR_SIZE_OVERFLOW, "o:", "overflows int64");
    p.batch = 1;
    p.o_batch_stride = 0;
    /* 2^40 rows: O fits in int64 bytes, the grid does not fit CUDA's */
    EXPECT_FAIL(&p, &d, FA2_ERROR_INVALID_SIZE, "grid limit", NULL);
}

/* The kernel's 1-D grid holds at most 2^31 - 1 blocks: refused at plan time rather
 * than as a launch error. Zero strides keep the tensors themselves small. */
static void test_grid_limit(void **state)
{
    fa2_problem_t p;
    fa2_device_info_t d = h200();
    int64_t br = 0;
    (void)state;
    d.cc_major = 8; /* an sm_80 device: the mma.sync tiles of fwd_tiles.h on every build */
#define X(b, bm, bn, w)                                                                \
    if ((b) == 64)                                                                     \
        br = (bm);
    FA2_FWD_TILES(X)
#undef X
    assert_true(br > 0);
    fa2_problem_init(&p, FA2_DTYPE_FP16, 65536, br * 32768, 16, 1, 1, 64);
    for (size_t i = 0; i < sizeof strides / sizeof strides[0]; i++)
        if (strstr(strides[i].name, "head_stride") == NULL && strstr(strides[i].name, "o_") == NULL)
            set_i64(&p, strides[i].offset, 0);
    p.batch = 65535; /* 65535 * 32768 blocks: fits */
    EXPECT_OK(&p, &d);
    p.batch = 65536; /* 2^31 blocks */
    EXPECT_FAIL(&p, &d, FA2_ERROR_INVALID_SIZE, "= 2147483648 thread blocks",
                "grid limit");
    p.batch = I32MAX; /* exactly 2^31 - 1 blocks of one query block each */
    p.seqlen_q = br;
    EXPECT_OK(&p, &d);
    p.seqlen_q = br + 1; /* two query blocks per (batch, head) */
    EXPECT_FAIL(&p, &d, FA2_ERROR_INVALID_SIZE, "= 4294967294 thread blocks", "grid limit");
}

/* ---- mask options -------------------------------------------------------------------- */

static void test_causal_value(void **state)
{
    fa2_problem_t p = base();
    fa2_device_info_t d = h200();
    (void)state;
    p.causal = 2;
    EXPECT_FAIL(&p, &d, FA2_ERROR_BAD_WINDOW, "causal=2", NULL);
    p.causal = -1;
    EXPECT_FAIL(&p, &d, FA2_ERROR_BAD_WINDOW, "causal=-1", NULL);
    p.causal = 1;
    EXPECT_OK(&p, &d);
}

static void test_window_left(void **state)
{
    fa2_problem_t p = base();
    fa2_device_info_t d = h200();
    (void)state;
    p.window_left = -2;
    EXPECT_FAIL(&p, &d, FA2_ERROR_BAD_WINDOW, "window_left=-2", NULL);
    p.window_left = I32MAX + 1;
    EXPECT_FAIL(&p, &d, FA2_ERROR_BAD_WINDOW, "window_left=2147483648", NULL);
    p.window_left = I32MAX;
    EXPECT_OK(&p, &d);
    p.window_left = 0;
    EXPECT_OK(&p, &d);
}

static void test_window_right(void **state)
{
    fa2_problem_t p = base();
    fa2_device_info_t d = h200();
    (void)state;
    p.window_right = -2;
    EXPECT_FAIL(&p, &d, FA2_ERROR_BAD_WINDOW, "window_right=-2", NULL);
    p.window_right = I32MAX + 1;
    EXPECT_FAIL(&p, &d, FA2_ERROR_BAD_WINDOW, "window_right=2147483648", NULL);
    p.window_right = 7;
    EXPECT_OK(&p, &d);
}

static void test_causal_with_window_right(void **state)
{
    fa2_problem_t p = base();
    fa2_device_info_t d = h200();
    (void)state;
    p.causal = 1;
    p.window_right = 5;
    EXPECT_FAIL(&p, &d, FA2_ERROR_BAD_WINDOW, "window_right=5 conflicts with causal=1", NULL);
    p.window_right = 0;
    EXPECT_OK(&p, &d);
    p.window_right = -1;
    p.window_left = 64; /* causal sliding window */
    EXPECT_OK(&p, &d);
}

static void test_softmax_scale(void **state)
{
    fa2_problem_t p = base();
    fa2_device_info_t d = h200();
    (void)state;
    p.softmax_scale = NAN;
    EXPECT_FAIL(&p, &d, FA2_ERROR_BAD_SCALE, "softmax_scale=", "nan");
    p.softmax_scale = INFINITY;
    EXPECT_FAIL(&p, &d, FA2_ERROR_BAD_SCALE, "softmax_scale=inf", NULL);
    p.softmax_scale = -INFINITY;
    EXPECT_FAIL(&p, &d, FA2_ERROR_BAD_SCALE, "softmax_scale=-inf", NULL);
    p.softmax_scale = -0.5f;
    EXPECT_FAIL(&p, &d, FA2_ERROR_BAD_SCALE, "softmax_scale=-0.5", NULL);
    p.softmax_scale = 0.0f;
    EXPECT_OK(&p, &d);
    p.softmax_scale = 1e-30f;
    EXPECT_OK(&p, &d);
    p.softmax_scale = 100.0f;
    EXPECT_OK(&p, &d);
}

/* ---- device ---------------------------------------------------------------------------- */

static void test_device_compute_capability(void **state)
{
    fa2_problem_t p = base();
    fa2_device_info_t d = h200();
    (void)state;
    d.cc_major = 7;
    d.cc_minor = 5;
    EXPECT_FAIL(&p, &d, FA2_ERROR_UNSUPPORTED_DEVICE,
                "device compute capability 7.5: libfa2 needs sm_80 or newer", NULL);
    d.cc_minor = 0;
    EXPECT_FAIL(&p, &d, FA2_ERROR_UNSUPPORTED_DEVICE, "compute capability 7.0", NULL);
    d.cc_major = 8;
    EXPECT_OK(&p, &d);
    d.cc_major = 12;
    EXPECT_OK(&p, &d);
}

/* head_dim 256 on devices with less shared memory (sm_86/89 class): the main tile where
 * it fits, the compact tile where only that fits, refused below the compact tile. */
static void test_device_shared_memory(void **state)
{
    fa2_problem_t p;
    fa2_device_info_t d = h200();
    fa2_plan_t plan;
    char needs[64], has[64];
    int64_t main_bytes = 0, compact_bytes = 0;
    (void)state;
#define X(b, bm, bn, w)                                                                \
    if ((b) == 256)                                                                    \
        main_bytes = fa2_fwd_smem_bytes(b, bm, bn);
    FA2_FWD_TILES(X)
#undef X
#define X(b, bm, bn, w)                                                                \
    if ((b) == 256)                                                                    \
        compact_bytes = fa2_fwd_smem_bytes(b, bm, bn);
    FA2_FWD_COMPACT_TILES(X)
#undef X
    assert_true(compact_bytes > 0 && compact_bytes < main_bytes);
    fa2_problem_init(&p, FA2_DTYPE_BF16, 1, 128, 128, 1, 1, 256);
    d.cc_major = 8;
    d.cc_minor = 6;
    d.smem_per_block_optin = main_bytes; /* exactly enough for the main tile */
    assert_int_equal(fa2_plan(&p, &d, &plan), FA2_SUCCESS);
    assert_int_equal(plan.smem_bytes, main_bytes);
    d.smem_per_block_optin = main_bytes - 1; /* the compact tile */
    assert_int_equal(fa2_plan(&p, &d, &plan), FA2_SUCCESS);
    assert_int_equal(plan.smem_bytes, compact_bytes);
    d.smem_per_block_optin = compact_bytes; /* exactly enough for it */
    EXPECT_OK(&p, &d);
    d.smem_per_block_optin = compact_bytes - 1;
    snprintf(needs, sizeof needs, "needs %lld bytes", (long long)compact_bytes);
    snprintf(has, sizeof has, "device has %lld", (long long)(compact_bytes - 1));
    EXPECT_FAIL(&p, &d, FA2_ERROR_SHARED_MEMORY, needs, has);
    d.smem_per_block_optin = 0;
    EXPECT_FAIL(&p, &d, FA2_ERROR_SHARED_MEMORY, needs, "device has 0");
    d.smem_per_block_optin = -1;
    EXPECT_FAIL(&p, &d, FA2_ERROR_SHARED_MEMORY, needs, "device has -1");
}

/* ---- fa2_forward's checks (return before any CUDA call) -------------------------------- */

#define PTR(x) ((void *)(uintptr_t)(x))

static fa2_plan_t valid_plan(void)
{
    fa2_problem_t p = base();
    fa2_device_info_t d = h200();
    fa2_plan_t plan;
    assert_int_equal(fa2_plan(&p, &d, &plan), FA2_SUCCESS);
    return plan;
}

#define EXPECT_FWD(call, want, n1)                                                        \
    do {                                                                                  \
        fa2_status_t s_ = (call);                                                         \
        if (s_ != (want) || !strstr(fa2_last_error(), (n1))) {                            \
            print_error("line %d: got %d, want %d; message \"%s\" should contain \"%s\"\n", \
                        __LINE__, (int)s_, (int)(want), fa2_last_error(), (n1));          \
            fail();                                                                       \
        }                                                                                 \
    } while (0)

static void test_forward_null(void **state)
{
    fa2_plan_t pl = valid_plan();
    void *a = PTR(0x1000);
    (void)state;
    EXPECT_FWD(fa2_forward(NULL, a, a, a, a, NULL, NULL, 0, NULL), FA2_ERROR_NULL_POINTER,
               "plan is NULL");
    EXPECT_FWD(fa2_forward(&pl, NULL, a, a, a, NULL, NULL, 0, NULL), FA2_ERROR_NULL_POINTER,
               "q is NULL");
    EXPECT_FWD(fa2_forward(&pl, a, NULL, a, a, NULL, NULL, 0, NULL), FA2_ERROR_NULL_POINTER,
               "k is NULL");
    EXPECT_FWD(fa2_forward(&pl, a, a, NULL, a, NULL, NULL, 0, NULL), FA2_ERROR_NULL_POINTER,
               "v is NULL");
    EXPECT_FWD(fa2_forward(&pl, a, a, a, NULL, NULL, NULL, 0, NULL), FA2_ERROR_NULL_POINTER,
               "o is NULL");
}

/* A packed variable-length batch: its plan, the fields' checks, and the dense and
 * packed entry points refusing each other's plans before any CUDA call. */
static fa2_problem_t packed(void)
{
    fa2_problem_t p = base();
    p.total_q = p.seqlen_q + 100;
    p.total_k = p.seqlen_k + 7;
    p.q_batch_stride = p.k_batch_stride = p.v_batch_stride = p.o_batch_stride = 0;
    return p;
}

static void test_packed_batch(void **state)
{
    fa2_problem_t p = packed();
    fa2_device_info_t d = h200();
    fa2_plan_t pl, dense = valid_plan();
    const int32_t *cu = (const int32_t *)PTR(0x2000);
    void *a = PTR(0x1000);
    (void)state;
    EXPECT_OK(&p, &d);
    assert_int_equal(fa2_plan(&p, &d, &pl), FA2_SUCCESS);
    assert_int_equal(pl.bwd_supported, 1);
    p.k_batch_stride = 64;
    EXPECT_FAIL(&p, &d, FA2_ERROR_BAD_STRIDE, "packed batch", "k 64");
    p = packed();
    p.total_q = p.seqlen_q - 1;
    EXPECT_FAIL(&p, &d, FA2_ERROR_INVALID_SIZE, "total_q=", NULL);
    p = packed();
    p.total_k = p.seqlen_k - 1;
    EXPECT_FAIL(&p, &d, FA2_ERROR_INVALID_SIZE, "total_k=", NULL);
    p = packed();
    p.total_q = (int64_t)INT32_MAX + 1;
    EXPECT_FAIL(&p, &d, FA2_ERROR_INVALID_SIZE, "total_q=", NULL);
    p = base();
    p.total_k = 5;
    EXPECT_FAIL(&p, &d, FA2_ERROR_INVALID_SIZE, "total_k=5", "with total_q=0");

    EXPECT_FWD(fa2_forward(&pl, a, a, a, a, NULL, NULL, 0, NULL), FA2_ERROR_UNSUPPORTED,
               "call fa2_forward_varlen");
    EXPECT_FWD(fa2_forward_varlen(&dense, a, a, a, a, NULL, cu, cu, NULL, NULL, NULL, 0, NULL),
               FA2_ERROR_UNSUPPORTED, "call fa2_forward");
    EXPECT_FWD(fa2_forward_varlen(&pl, a, a, a, a, NULL, NULL, cu, NULL, NULL, NULL, 0, NULL),
               FA2_ERROR_NULL_POINTER, "cu_seqlens_q is NULL");
    EXPECT_FWD(fa2_forward_varlen(&pl, a, a, a, a, NULL, cu, NULL, NULL, NULL, NULL, 0, NULL),
               FA2_ERROR_NULL_POINTER, "cu_seqlens_k is NULL");
    EXPECT_FWD(fa2_forward_varlen(&pl, a, a, a, a, NULL, cu, (const int32_t *)PTR(0x2002),
                                  NULL, NULL, NULL, 0, NULL),
               FA2_ERROR_MISALIGNED, "cu_seqlens_k");
    EXPECT_FWD(fa2_backward(&pl, a, a, a, a, a, (const float *)a, a, a, a, a, 1 << 30, NULL),
               FA2_ERROR_UNSUPPORTED, "call fa2_backward_varlen");
    EXPECT_FWD(fa2_backward_varlen(&dense, a, a, a, a, a, (const float *)a, a, a, a, cu, cu,
                                   NULL, a, 1 << 30, NULL),
               FA2_ERROR_UNSUPPORTED, "call fa2_backward");
    EXPECT_FWD(fa2_backward_varlen(&pl, a, a, a, a, a, (const float *)a, a, a, a, cu, NULL,
                                   NULL, a, 1 << 30, NULL),
               FA2_ERROR_NULL_POINTER, "cu_seqlens_k is NULL");

    /* The forward's workspace holds one metadata record per sequence; fa2_varlen_check's
     * refusals come before its copy from the device. */
    assert_int_equal(pl.workspace_bytes, 4 * pl.problem.batch);
    assert_int_equal(dense.workspace_bytes, 0);
    int64_t seq = 7;
    fa2_varlen_check_t check = FA2_VARLEN_PAGE_ID;
    EXPECT_FWD(fa2_varlen_check(NULL, a, 1 << 20, &seq, &check), FA2_ERROR_NULL_POINTER,
               "plan is NULL");
    assert_true(seq == 7 && check == FA2_VARLEN_PAGE_ID); /* a refusal writes nothing */
    EXPECT_FWD(fa2_varlen_check(&pl, NULL, 1 << 20, NULL, NULL), FA2_ERROR_NULL_POINTER,
               "workspace is NULL");
    EXPECT_FWD(fa2_varlen_check(&dense, a, 1 << 20, NULL, NULL), FA2_ERROR_UNSUPPORTED,
               "dense batch");
    EXPECT_FWD(fa2_varlen_check(&pl, a, (size_t)pl.workspace_bytes - 1, NULL, NULL),
               FA2_ERROR_WORKSPACE, "workspace_bytes=");
    EXPECT_FWD(fa2_varlen_check(&pl, PTR(0x1002), 1 << 20, NULL, NULL), FA2_ERROR_MISALIGNED,
               "workspace");
    fa2_plan_t forged = pl;
    forged.workspace_bytes = 0;
    EXPECT_FWD(fa2_varlen_check(&forged, a, 1 << 20, NULL, NULL), FA2_ERROR_BAD_PLAN, "changed");
}

/* A paged K/V cache: its fields' checks, the plan (forward only) and the arrays a call
 * needs, before any CUDA call. */
static void test_paged_batch(void **state)
{
    fa2_problem_t p = packed();
    fa2_device_info_t d = h200();
    fa2_plan_t pl;
    const int32_t *arr = (const int32_t *)PTR(0x2000);
    void *a = PTR(0x1000);
    (void)state;
    p.total_k = 0;
    p.page_size = 16;
    p.num_pages = 1000;
    p.pages_per_seq = (p.seqlen_k + 15) / 16;
    p.k_batch_stride = p.v_batch_stride = 16 * p.k_seq_stride; /* page strides */
    EXPECT_OK(&p, &d);
    assert_int_equal(fa2_plan(&p, &d, &pl), FA2_SUCCESS);
    assert_int_equal(pl.bwd_supported, 0);
    assert_int_equal(pl.bwd_status, FA2_ERROR_UNSUPPORTED);
    /* every page size runs, odd ones included */
    p.page_size = 17;
    p.pages_per_seq = (p.seqlen_k + 16) / 17;
    EXPECT_OK(&p, &d);
    p.pages_per_seq -= 1; /* cannot hold the longest sequence */
    EXPECT_FAIL(&p, &d, FA2_ERROR_INVALID_SIZE, "pages_per_seq=", NULL);
    p.pages_per_seq += 1;
    p.num_pages = 0;
    EXPECT_FAIL(&p, &d, FA2_ERROR_INVALID_SIZE, "num_pages=0", NULL);
    p.num_pages = 1000;
    p.total_k = 64;
    EXPECT_FAIL(&p, &d, FA2_ERROR_INVALID_SIZE, "total_k=64", NULL);
    p.total_k = 0;
    p.q_batch_stride = 64;
    EXPECT_FAIL(&p, &d, FA2_ERROR_BAD_STRIDE, "page strides", NULL);
    p.q_batch_stride = 0;
    p.page_size = 16;
    p.pages_per_seq = (p.seqlen_k + 15) / 16;
    assert_int_equal(fa2_plan(&p, &d, &pl), FA2_SUCCESS);
    EXPECT_FWD(fa2_forward_varlen(&pl, a, a, a, a, NULL, arr, NULL, arr, NULL, NULL, 0, NULL),
               FA2_ERROR_NULL_POINTER, "page_table is NULL");
    EXPECT_FWD(fa2_forward_varlen(&pl, a, a, a, a, NULL, arr, NULL, NULL, arr, NULL, 0, NULL),
               FA2_ERROR_NULL_POINTER, "seqused_k is NULL");
    EXPECT_FWD(fa2_forward_varlen(&pl, a, a, a, a, NULL, arr, NULL, arr,
                                  (const int32_t *)PTR(0x2001), NULL, 0, NULL),
               FA2_ERROR_MISALIGNED, "page_table");
    p = packed();
    assert_int_equal(fa2_plan(&p, &d, &pl), FA2_SUCCESS);
    EXPECT_FWD(fa2_forward_varlen(&pl, a, a, a, a, NULL, arr, arr, NULL, arr, NULL, 0, NULL),
               FA2_ERROR_UNSUPPORTED, "not paged");
}

/* fa2_problem_init_varlen / _paged make exactly the problems the tests above build by
 * hand, and fa2_plan accepts them. */
static void test_layout_init_helpers(void **state)
{
    fa2_problem_t want = packed(), got;
    fa2_device_info_t d = h200();
    (void)state;
    memset(&got, 0xAB, sizeof got);
    fa2_problem_init_varlen(&got, FA2_DTYPE_BF16, want.batch, want.seqlen_q, want.seqlen_k,
                            want.total_q, want.total_k, want.heads_q, want.heads_kv,
                            want.head_dim);
    assert_memory_equal(&got, &want, sizeof got);
    EXPECT_OK(&got, &d);

    want.total_k = 0;
    want.page_size = 16;
    want.num_pages = 1000;
    want.pages_per_seq = (want.seqlen_k + 15) / 16;
    want.k_batch_stride = want.v_batch_stride = 16 * want.k_seq_stride;
    memset(&got, 0xAB, sizeof got);
    fa2_problem_init_paged(&got, FA2_DTYPE_BF16, want.batch, want.seqlen_q, want.seqlen_k,
                           want.total_q, want.heads_q, want.heads_kv, want.head_dim, 16, 1000,
                           want.pages_per_seq);
    assert_memory_equal(&got, &want, sizeof got);
    EXPECT_OK(&got, &d);

    fa2_problem_init_varlen(NULL, FA2_DTYPE_BF16, 1, 1, 1, 1, 1, 1, 1, 64); /* no-op */
    fa2_problem_init_paged(NULL, FA2_DTYPE_BF16, 1, 1, 1, 1, 1, 1, 64, 16, 1, 1);
}

/* ALiBi slopes per sequence: any stride up to 2^31 - 1 plans; one whose slopes would span
 * more bytes than int64 holds is refused. */
static void test_alibi_batch_stride(void **state)
{
    fa2_problem_t p = base();
    fa2_device_info_t d = h200();
    (void)state;
    p.alibi = 1;
    p.alibi_batch_stride = p.heads_q;
    EXPECT_OK(&p, &d);
    p.alibi_batch_stride = INT32_MAX;
    EXPECT_OK(&p, &d);
    p.batch = INT32_MAX;
    EXPECT_FAIL(&p, &d, FA2_ERROR_SIZE_OVERFLOW, "alibi_batch_stride=2147483647",
                "batch=2147483647");
    p = base();
    p.alibi_batch_stride = 8; /* without alibi */
    EXPECT_FAIL(&p, &d, FA2_ERROR_BAD_STRIDE, "alibi_batch_stride=8", "alibi=0");
}

static void test_forward_struct_size(void **state)
{
    fa2_plan_t pl = valid_plan();
    void *a = PTR(0x1000);
    (void)state;
    pl.struct_size = 0;
    EXPECT_FWD(fa2_forward(&pl, a, a, a, a, NULL, NULL, 0, NULL), FA2_ERROR_STRUCT_SIZE,
               "plan->struct_size=0");
    pl.struct_size = sizeof pl + 8;
    EXPECT_FWD(fa2_forward(&pl, a, a, a, a, NULL, NULL, 0, NULL), FA2_ERROR_STRUCT_SIZE,
               "plan->struct_size=");
}

static void test_forward_misaligned(void **state)
{
    fa2_plan_t pl = valid_plan();
    void *a = PTR(0x1000), *b = PTR(0x1001), *c = PTR(0x1008);
    (void)state;
    EXPECT_FWD(fa2_forward(&pl, b, a, a, a, NULL, NULL, 0, NULL), FA2_ERROR_MISALIGNED,
               "q=");
    EXPECT_FWD(fa2_forward(&pl, c, a, a, a, NULL, NULL, 0, NULL), FA2_ERROR_MISALIGNED,
               "16-byte aligned");
    EXPECT_FWD(fa2_forward(&pl, a, b, a, a, NULL, NULL, 0, NULL), FA2_ERROR_MISALIGNED,
               "k=");
    EXPECT_FWD(fa2_forward(&pl, a, a, c, a, NULL, NULL, 0, NULL), FA2_ERROR_MISALIGNED,
               "v=");
    EXPECT_FWD(fa2_forward(&pl, a, a, a, b, NULL, NULL, 0, NULL), FA2_ERROR_MISALIGNED,
               "o=");
    EXPECT_FWD(fa2_forward(&pl, a, a, a, a, (float *)PTR(0x1002), NULL, 0, NULL),
               FA2_ERROR_MISALIGNED, "lse=");
    EXPECT_FWD(fa2_forward(&pl, a, a, a, a, (float *)PTR(0x1001), NULL, 0, NULL),
               FA2_ERROR_MISALIGNED, "4-byte aligned");
}

/* Forward plans need no workspace today, and one edited to ask for some is refused
 * as changed. */
static void test_forward_workspace(void **state)
{
    fa2_plan_t pl = valid_plan();
    void *a = PTR(0x1000);
    (void)state;
    assert_int_equal(pl.workspace_bytes, 0);
    pl.workspace_bytes = 256;
    EXPECT_FWD(fa2_forward(&pl, a, a, a, a, NULL, PTR(0x2000), 128, NULL), FA2_ERROR_BAD_PLAN,
               "changed after fa2_plan");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_base_is_valid),
        cmocka_unit_test(test_null_problem),
        cmocka_unit_test(test_null_device),
        cmocka_unit_test(test_null_plan),
        cmocka_unit_test(test_problem_struct_size),
        cmocka_unit_test(test_device_struct_size),
        cmocka_unit_test(test_dtype),
        cmocka_unit_test(test_batch),
        cmocka_unit_test(test_seqlen_q),
        cmocka_unit_test(test_seqlen_k),
        cmocka_unit_test(test_heads),
        cmocka_unit_test(test_head_dim),
        cmocka_unit_test(test_heads_mismatch),
        cmocka_unit_test(test_stride_negative),
        cmocka_unit_test(test_stride_not_multiple_of_8),
        cmocka_unit_test(test_stride_layouts_accepted),
        cmocka_unit_test(test_overflow_batch_stride),
        cmocka_unit_test(test_overflow_seq_stride),
        cmocka_unit_test(test_overflow_exact_edge),
        cmocka_unit_test(test_overflow_lse),
        cmocka_unit_test(test_grid_limit),
        cmocka_unit_test(test_causal_value),
        cmocka_unit_test(test_window_left),
        cmocka_unit_test(test_window_right),
        cmocka_unit_test(test_causal_with_window_right),
        cmocka_unit_test(test_softmax_scale),
        cmocka_unit_test(test_device_compute_capability),
        cmocka_unit_test(test_device_shared_memory),
        cmocka_unit_test(test_forward_null),
        cmocka_unit_test(test_packed_batch),
        cmocka_unit_test(test_paged_batch),
        cmocka_unit_test(test_layout_init_helpers),
        cmocka_unit_test(test_alibi_batch_stride),
        cmocka_unit_test(test_forward_struct_size),
        cmocka_unit_test(test_forward_misaligned),
        cmocka_unit_test(test_forward_workspace),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
