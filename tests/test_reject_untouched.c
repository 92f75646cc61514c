/* Every rejection of fa2_plan, fa2_forward, fa2_forward_varlen, fa2_forward_with,
 * fa2_backward, fa2_backward_with, fa2_combine and fa2_device_info_query: each case
 * breaks one thing, expects its status and a message naming it, and checks that every
 * output the call could write (the plan; O and LSE; dQ, dK, dV, dsinks and the
 * workspace; the device info), poisoned beforehand, is byte-identical
 * afterwards. All of these fail before any CUDA call, so host buffers stand in for
 * device memory and no GPU is needed. One line per case; CPU only.
 *
 * Also the documented edges: batch 0 / heads 0 are FA2_ERROR_INVALID_SIZE (not a
 * silent no-op); a struct_size from an "older caller" (smaller than this library's
 * struct) is FA2_ERROR_STRUCT_SIZE until a release freezes the v1 layout. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "fa2.h"

#define I32MAX INT64_C(2147483647)
#define BUF 65536 /* bytes per host stand-in: more than the small problem needs */

static _Alignas(16) unsigned char g_q[BUF], g_k[BUF], g_v[BUF], g_o[BUF], g_do[BUF],
    g_lse[BUF], g_dq[BUF], g_dk[BUF], g_dv[BUF], g_ws[BUF], g_dsinks[BUF];
static unsigned char *const g_outputs[] = {g_o, g_lse, g_dq, g_dk, g_dv, g_ws, g_dsinks};
static const char *const g_output_names[] = {"o",  "lse",       "dq",    "dk",
                                             "dv", "workspace", "dsinks"};
#define N_OUTPUTS 7

static fa2_device_info_t h200(void)
{
    fa2_device_info_t d = {sizeof(fa2_device_info_t), 9, 0, 132, 0, 232448, 233472};
    return d;
}

static fa2_problem_t base(void)
{
    fa2_problem_t p;
    fa2_problem_init(&p, FA2_DTYPE_BF16, 2, 5, 7, 4, 2, 64);
    return p;
}

/* ---- fa2_plan: one field of the problem or the device set to a bad value ---------- */

typedef enum kind_t { I64, I32, F32, SZ, DEV_I32, DEV_I64, DEV_SZ } kind_t;

typedef struct plan_case_t {
    const char *what;  /* printed */
    kind_t kind;       /* which struct, which width */
    size_t offset;
    int64_t value;     /* I64/I32/SZ/DEV_*: the bad value */
    float fvalue;      /* F32 */
    fa2_status_t want;
    const char *says;  /* the message must contain this */
} plan_case_t;

#define P64(f, v, st, m) {#f "=" #v, I64, offsetof(fa2_problem_t, f), (v), 0, st, m}
#define P32(f, v, st, m) {#f "=" #v, I32, offsetof(fa2_problem_t, f), (v), 0, st, m}
#define PF(f, v, st, m) {#f "=" #v, F32, offsetof(fa2_problem_t, f), 0, (v), st, m}
#define D32(f, v, st, m) {"device." #f "=" #v, DEV_I32, offsetof(fa2_device_info_t, f), (v), 0, st, m}
#define D64(f, v, st, m) {"device." #f "=" #v, DEV_I64, offsetof(fa2_device_info_t, f), (v), 0, st, m}
#define STRIDE_CASES(f)                                                                \
    P64(f, -8, FA2_ERROR_BAD_STRIDE, #f "=-8 is negative"),                            \
    P64(f, 12, FA2_ERROR_BAD_STRIDE, #f "=12 is not a multiple of 8"),                 \
    P64(f, 1, FA2_ERROR_BAD_STRIDE, #f "=1 is not a multiple of 8"),                   \
    P64(f, INT64_C(1) << 62, FA2_ERROR_SIZE_OVERFLOW, "overflows int64")

static const plan_case_t plan_cases[] = {
    /* struct sizes: 0, an older (smaller) caller, a newer (larger) caller */
    {"problem.struct_size=0", SZ, offsetof(fa2_problem_t, struct_size), 0, 0,
     FA2_ERROR_STRUCT_SIZE, "problem->struct_size=0"},
    {"problem.struct_size=older caller (without deterministic)", SZ,
     offsetof(fa2_problem_t, struct_size), (int64_t)offsetof(fa2_problem_t, deterministic), 0,
     FA2_ERROR_STRUCT_SIZE, "problem->struct_size="},
    {"problem.struct_size=sizeof-8", SZ, offsetof(fa2_problem_t, struct_size),
     (int64_t)sizeof(fa2_problem_t) - 8, 0, FA2_ERROR_STRUCT_SIZE, "fa2_problem_init"},
    {"problem.struct_size=sizeof+8", SZ, offsetof(fa2_problem_t, struct_size),
     (int64_t)sizeof(fa2_problem_t) + 8, 0, FA2_ERROR_STRUCT_SIZE, "problem->struct_size="},
    {"problem.struct_size=SIZE_MAX", SZ, offsetof(fa2_problem_t, struct_size), -1, 0,
     FA2_ERROR_STRUCT_SIZE, "problem->struct_size="},
    {"device.struct_size=0", DEV_SZ, offsetof(fa2_device_info_t, struct_size), 0, 0,
     FA2_ERROR_STRUCT_SIZE, "device->struct_size=0"},
    {"device.struct_size=older caller (sizeof-8)", DEV_SZ,
     offsetof(fa2_device_info_t, struct_size), (int64_t)sizeof(fa2_device_info_t) - 8, 0,
     FA2_ERROR_STRUCT_SIZE, "device->struct_size="},
    {"device.struct_size=sizeof+8", DEV_SZ, offsetof(fa2_device_info_t, struct_size),
     (int64_t)sizeof(fa2_device_info_t) + 8, 0, FA2_ERROR_STRUCT_SIZE, "device->struct_size="},
    /* dtype */
    P32(dtype, 0, FA2_ERROR_UNSUPPORTED_DTYPE, "dtype=0"),
    P32(dtype, 3, FA2_ERROR_UNSUPPORTED_DTYPE, "dtype=3"),
    P32(dtype, -1, FA2_ERROR_UNSUPPORTED_DTYPE, "dtype=-1"),
    /* sizes: 0 is a clear status, never a silent no-op */
    P64(batch, 0, FA2_ERROR_INVALID_SIZE, "batch=0 is out of range [1, 2147483647]"),
    P64(batch, -1, FA2_ERROR_INVALID_SIZE, "batch=-1"),
    P64(batch, I32MAX + 1, FA2_ERROR_INVALID_SIZE, "batch=2147483648"),
    P64(seqlen_q, 0, FA2_ERROR_INVALID_SIZE, "seqlen_q=0 is out of range"),
    P64(seqlen_q, I32MAX + 1, FA2_ERROR_INVALID_SIZE, "seqlen_q=2147483648"),
    P64(seqlen_q, INT64_MIN, FA2_ERROR_INVALID_SIZE, "seqlen_q=-9223372036854775808"),
    P64(seqlen_k, -1, FA2_ERROR_INVALID_SIZE, "seqlen_k=-1"),
    P64(seqlen_k, I32MAX + 1, FA2_ERROR_INVALID_SIZE, "seqlen_k=2147483648"),
    P64(heads_q, 0, FA2_ERROR_INVALID_SIZE, "heads_q=0 is out of range"),
    P64(heads_q, I32MAX + 1, FA2_ERROR_INVALID_SIZE, "heads_q=2147483648"),
    P64(heads_kv, 0, FA2_ERROR_INVALID_SIZE, "heads_kv=0 is out of range"),
    P64(heads_kv, -2, FA2_ERROR_INVALID_SIZE, "heads_kv=-2"),
    P64(heads_kv, 3, FA2_ERROR_HEADS_MISMATCH, "heads_q=4 is not a multiple of heads_kv=3"),
    P64(heads_kv, 8, FA2_ERROR_HEADS_MISMATCH, "heads_q=4 is not a multiple of heads_kv=8"),
    /* head_dim */
    P64(head_dim, 0, FA2_ERROR_UNSUPPORTED_HEAD_DIM, "head_dim=0"),
    P64(head_dim, 4, FA2_ERROR_UNSUPPORTED_HEAD_DIM, "head_dim=4"),
    P64(head_dim, 60, FA2_ERROR_UNSUPPORTED_HEAD_DIM, "head_dim=60"),
    P64(head_dim, 264, FA2_ERROR_UNSUPPORTED_HEAD_DIM, "head_dim=264"),
    P64(head_dim, -64, FA2_ERROR_UNSUPPORTED_HEAD_DIM, "head_dim=-64"),
    /* every stride: negative, not a multiple of 8, an extent past int64 */
    STRIDE_CASES(q_batch_stride), STRIDE_CASES(q_seq_stride), STRIDE_CASES(q_head_stride),
    STRIDE_CASES(k_batch_stride), STRIDE_CASES(k_seq_stride), STRIDE_CASES(k_head_stride),
    STRIDE_CASES(v_batch_stride), STRIDE_CASES(v_seq_stride), STRIDE_CASES(v_head_stride),
    STRIDE_CASES(o_batch_stride), STRIDE_CASES(o_seq_stride), STRIDE_CASES(o_head_stride),
    /* flags and mask */
    P32(deterministic, 2, FA2_ERROR_INVALID_SIZE, "deterministic=2"),
    P32(deterministic, -1, FA2_ERROR_INVALID_SIZE, "deterministic=-1"),
    P32(causal, 2, FA2_ERROR_BAD_WINDOW, "causal=2"),
    P32(causal, -1, FA2_ERROR_BAD_WINDOW, "causal=-1"),
    P64(window_left, -2, FA2_ERROR_BAD_WINDOW, "window_left=-2"),
    P64(window_left, I32MAX + 1, FA2_ERROR_BAD_WINDOW, "window_left=2147483648"),
    P64(window_right, -2, FA2_ERROR_BAD_WINDOW, "window_right=-2"),
    P64(window_right, I32MAX + 1, FA2_ERROR_BAD_WINDOW, "window_right=2147483648"),
    /* scale */
    PF(softmax_scale, NAN, FA2_ERROR_BAD_SCALE, "softmax_scale="),
    PF(softmax_scale, INFINITY, FA2_ERROR_BAD_SCALE, "softmax_scale=inf"),
    PF(softmax_scale, -INFINITY, FA2_ERROR_BAD_SCALE, "softmax_scale=-inf"),
    PF(softmax_scale, -1.0f, FA2_ERROR_BAD_SCALE, "softmax_scale=-1"),
    PF(softmax_scale, -0x1p-149f, FA2_ERROR_BAD_SCALE, "softmax_scale=-"),
    /* decode: key splits, batch-invariant mode */
    P64(max_splits, -1, FA2_ERROR_INVALID_SIZE, "max_splits=-1"),
    P64(max_splits, FA2_MAX_SPLITS + 1, FA2_ERROR_INVALID_SIZE, "max_splits=129"),
    P32(batch_invariant, 2, FA2_ERROR_INVALID_SIZE, "batch_invariant=2"),
    P32(reserved2, 1, FA2_ERROR_RESERVED, "reserved2=1"),
    /* the score variants */
    PF(softcap, NAN, FA2_ERROR_BAD_SCALE, "softcap=nan"),
    PF(softcap, -1.0f, FA2_ERROR_BAD_SCALE, "softcap=-1"),
    PF(softcap, 1e-31f, FA2_ERROR_BAD_SCALE, "softcap=1e-31"),
    PF(softcap, 131072.0f, FA2_ERROR_BAD_SCALE, "softcap=131072"),
    PF(softcap, INFINITY, FA2_ERROR_BAD_SCALE, "softcap=inf"),
    P32(alibi, 2, FA2_ERROR_INVALID_SIZE, "alibi=2"),
    P32(sinks, -1, FA2_ERROR_INVALID_SIZE, "sinks=-1"),
    P32(reserved3, 1, FA2_ERROR_RESERVED, "reserved3=1"),
    P64(alibi_batch_stride, 8, FA2_ERROR_BAD_STRIDE, "alibi_batch_stride=8"),
    P64(alibi_batch_stride, -1, FA2_ERROR_BAD_STRIDE, "alibi_batch_stride=-1"),
    /* device */
    D32(cc_major, 7, FA2_ERROR_UNSUPPORTED_DEVICE, "compute capability 7.0"),
    D32(cc_major, 0, FA2_ERROR_UNSUPPORTED_DEVICE, "compute capability 0.0"),
    D32(cc_major, -1, FA2_ERROR_UNSUPPORTED_DEVICE, "compute capability -1.0"),
    D64(smem_per_block_optin, 0, FA2_ERROR_SHARED_MEMORY, "device has 0"),
    D64(smem_per_block_optin, -1, FA2_ERROR_SHARED_MEMORY, "device has -1"),
    D64(smem_per_block_optin, 1024, FA2_ERROR_SHARED_MEMORY, "device has 1024"),
    D64(smem_per_block_optin, INT64_MIN, FA2_ERROR_SHARED_MEMORY, "smem_per_block_optin"),
};

static void apply(const plan_case_t *c, fa2_problem_t *p, fa2_device_info_t *d)
{
    const int32_t v32 = (int32_t)c->value;
    const size_t vsz = (size_t)c->value;
    switch (c->kind) {
    case I64: memcpy((char *)p + c->offset, &c->value, 8); break;
    case I32: memcpy((char *)p + c->offset, &v32, 4); break;
    case F32: memcpy((char *)p + c->offset, &c->fvalue, 4); break;
    case SZ: memcpy((char *)p + c->offset, &vsz, sizeof vsz); break;
    case DEV_I32: memcpy((char *)d + c->offset, &v32, 4); break;
    case DEV_I64: memcpy((char *)d + c->offset, &c->value, 8); break;
    case DEV_SZ: memcpy((char *)d + c->offset, &vsz, sizeof vsz); break;
    }
}

static int g_case; /* running number, printed */

/* Runs fa2_plan(p, d) on a poisoned plan; 1 when the status, message and the
 * untouched plan are as expected. Prints one line. */
static int expect_plan_fail(const char *what, const fa2_problem_t *p, const fa2_device_info_t *d,
                            int null_plan, fa2_status_t want, const char *says)
{
    fa2_plan_t plan, poison;
    memset(&plan, 0xA5, sizeof plan);
    poison = plan;
    const fa2_status_t s = fa2_plan(p, d, null_plan ? NULL : &plan);
    const char *m = fa2_last_error();
    const int ok_status = s == want, ok_msg = strstr(m, says) != NULL,
              ok_untouched = memcmp(&plan, &poison, sizeof plan) == 0;
    const int ok = ok_status && ok_msg && ok_untouched;
    printf("reject %3d: fa2_plan %-50s -> %s \"%s\"%s%s%s %s\n", ++g_case, what,
           fa2_status_string(s), m, ok_status ? "" : " [wrong status]",
           ok_msg ? "" : " [message lacks the expected text]",
           ok_untouched ? "" : " [plan written]", ok ? "ok" : "FAIL");
    return ok;
}

static void test_plan_rejections(void **state)
{
    (void)state;
    int failed = 0;
    fa2_problem_t p = base();
    fa2_device_info_t d = h200();
    fa2_plan_t plan;
    assert_int_equal(fa2_plan(&p, &d, &plan), FA2_SUCCESS); /* the base is valid */

    failed += !expect_plan_fail("problem=NULL", NULL, &d, 0, FA2_ERROR_NULL_POINTER,
                                "problem is NULL");
    failed += !expect_plan_fail("device=NULL", &p, NULL, 0, FA2_ERROR_NULL_POINTER,
                                "device is NULL");
    failed += !expect_plan_fail("plan=NULL", &p, &d, 1, FA2_ERROR_NULL_POINTER, "plan is NULL");
    for (size_t i = 0; i < sizeof plan_cases / sizeof plan_cases[0]; ++i) {
        p = base(), d = h200();
        apply(&plan_cases[i], &p, &d);
        failed += !expect_plan_fail(plan_cases[i].what, &p, &d, 0, plan_cases[i].want,
                                    plan_cases[i].says);
    }
    /* combinations no single field makes */
    p = base(), d = h200();
    p.causal = 1, p.window_right = 5;
    failed += !expect_plan_fail("causal=1 window_right=5", &p, &d, 0, FA2_ERROR_BAD_WINDOW,
                                "conflicts with causal=1");
    fa2_problem_init(&p, FA2_DTYPE_FP16, I32MAX, FA2_MAX_SEQLEN, 16, I32MAX, 1, 64);
    p.q_batch_stride = p.q_seq_stride = p.q_head_stride = 0;
    p.k_batch_stride = p.v_batch_stride = 0;
    failed += !expect_plan_fail("o bytes past int64 (q broadcast)", &p, &d, 0,
                                FA2_ERROR_SIZE_OVERFLOW, "o:");
    p.o_batch_stride = p.o_seq_stride = p.o_head_stride = 0;
    failed += !expect_plan_fail("o with zero strides", &p, &d, 0, FA2_ERROR_OVERLAP,
                                "give two elements of O one address");
    fa2_problem_init(&p, FA2_DTYPE_FP16, 65536, INT64_C(128) * 32768, 16, 1, 1, 64);
    p.q_batch_stride = p.q_seq_stride = p.q_head_stride = 0;
    failed += !expect_plan_fail("grid of 2^31 blocks", &p, &d, 0, FA2_ERROR_INVALID_SIZE,
                                "grid limit");
    p = base(), d = h200();
    p.reserved0 = 3;
    failed += !expect_plan_fail("problem.reserved0=3", &p, &d, 0, FA2_ERROR_RESERVED,
                                "reserved0=3");
    p = base(), p.reserved1 = -1;
    failed += !expect_plan_fail("problem.reserved1=-1", &p, &d, 0, FA2_ERROR_RESERVED,
                                "reserved1=-1");
    p = base(), d.reserved0 = 1;
    failed += !expect_plan_fail("device.reserved0=1", &p, &d, 0, FA2_ERROR_RESERVED,
                                "device->reserved0=1");
    d = h200(), p.softmax_scale = 3.4e38f;
    failed += !expect_plan_fail("softmax_scale=3.4e38", &p, &d, 0, FA2_ERROR_BAD_SCALE,
                                "FA2_MAX_SOFTMAX_SCALE");
    assert_int_equal(failed, 0);
}

/* ---- fa2_forward and fa2_backward ---------------------------------------------------- */

typedef struct call_t {
    const fa2_plan_t *plan;
    const void *q, *k, *v, *o_in, *d_o;
    void *o;
    float *lse;
    void *dq, *dk, *dv, *ws;
    size_t ws_bytes;
} call_t;

static fa2_plan_t g_plan;

static call_t good(void)
{
    call_t c = {&g_plan, g_q, g_k, g_v, g_o, g_do, g_o, (float *)(void *)g_lse,
                g_dq, g_dk, g_dv, g_ws, (size_t)g_plan.bwd_workspace_bytes};
    return c;
}

/* Every output poisoned (0xEE), before a call. */
static void poison_outputs(void)
{
    for (int i = 0; i < N_OUTPUTS; ++i)
        memset(g_outputs[i], 0xEE, BUF);
}

/* After the call: 1 when its status and message are the expected ones and no output was
 * written; prints one line naming the call, the case and what went wrong. */
static int report(const char *call, const char *what, fa2_status_t s, fa2_status_t want,
                  const char *says)
{
    const char *m = fa2_last_error();
    const char *written = NULL;
    for (int i = 0; i < N_OUTPUTS && !written; ++i)
        for (size_t t = 0; t < BUF; ++t)
            if (g_outputs[i][t] != 0xEE) {
                written = g_output_names[i];
                break;
            }
    const int ok = s == want && strstr(m, says) && !written;
    printf("reject %3d: %-18s %-45s -> %s \"%s\"%s%s%s%s %s\n", ++g_case, call, what,
           fa2_status_string(s), m, s == want ? "" : " [wrong status]",
           strstr(m, says) ? "" : " [message lacks the expected text]",
           written ? " [wrote " : "", written ? written : "", ok ? "ok" : "FAIL");
    return ok;
}

static int expect_call_fail(int backward, const char *what, call_t c, fa2_status_t want,
                            const char *says)
{
    poison_outputs();
    const fa2_status_t s =
        backward ? fa2_backward(c.plan, c.q, c.k, c.v, c.o_in, c.d_o, c.lse, c.dq, c.dk, c.dv,
                                c.ws, c.ws_bytes, NULL)
                 : fa2_forward(c.plan, c.q, c.k, c.v, c.o, c.lse, c.ws, c.ws_bytes, NULL);
    return report(backward ? "fa2_backward" : "fa2_forward", what, s, want, says);
}

#define MIS(x, n) ((void *)((unsigned char *)(x) + (n)))

static void test_forward_rejections(void **state)
{
    (void)state;
    int failed = 0;
    call_t c;
    fa2_plan_t bad;
#define FWD(what, edit, st, m) (c = good(), edit, failed += !expect_call_fail(0, what, c, st, m))
    FWD("plan=NULL", c.plan = NULL, FA2_ERROR_NULL_POINTER, "plan is NULL");
    FWD("q=NULL", c.q = NULL, FA2_ERROR_NULL_POINTER, "q is NULL");
    FWD("k=NULL", c.k = NULL, FA2_ERROR_NULL_POINTER, "k is NULL");
    FWD("v=NULL", c.v = NULL, FA2_ERROR_NULL_POINTER, "v is NULL");
    FWD("o=NULL", c.o = NULL, FA2_ERROR_NULL_POINTER, "o is NULL");
    bad = g_plan, bad.struct_size = 0;
    FWD("plan.struct_size=0", c.plan = &bad, FA2_ERROR_STRUCT_SIZE, "plan->struct_size=0");
    bad = g_plan, bad.struct_size = sizeof bad - 8;
    FWD("plan.struct_size=older caller", c.plan = &bad, FA2_ERROR_STRUCT_SIZE, "plan->struct_size=");
    bad = g_plan, bad.struct_size = sizeof bad + 8;
    FWD("plan.struct_size=sizeof+8", c.plan = &bad, FA2_ERROR_STRUCT_SIZE, "plan->struct_size=");
    FWD("q misaligned (+2)", c.q = MIS(g_q, 2), FA2_ERROR_MISALIGNED, "q=");
    FWD("q misaligned (+8)", c.q = MIS(g_q, 8), FA2_ERROR_MISALIGNED, "16-byte aligned");
    FWD("k misaligned (+4)", c.k = MIS(g_k, 4), FA2_ERROR_MISALIGNED, "k=");
    FWD("v misaligned (+1)", c.v = MIS(g_v, 1), FA2_ERROR_MISALIGNED, "v=");
    FWD("o misaligned (+2)", c.o = MIS(g_o, 2), FA2_ERROR_MISALIGNED, "o=");
    FWD("lse misaligned (+2)", c.lse = MIS(g_lse, 2), FA2_ERROR_MISALIGNED, "4-byte aligned");
    /* a plan edited after fa2_plan is refused, whatever the edit */
    bad = g_plan, bad.workspace_bytes = 256;
    FWD("plan edited: workspace_bytes", (c.plan = &bad, c.ws_bytes = 128), FA2_ERROR_BAD_PLAN,
        "changed after fa2_plan");
    bad = g_plan, bad.problem.head_dim = 4096;
    FWD("plan edited: head_dim 4096", c.plan = &bad, FA2_ERROR_BAD_PLAN, "head_dim=4096");
    bad = g_plan, bad.problem.seqlen_q = -5;
    FWD("plan edited: seqlen_q -5", c.plan = &bad, FA2_ERROR_BAD_PLAN, "seqlen_q=-5");
    bad = g_plan, bad.problem.dtype = (fa2_dtype_t)77;
    FWD("plan edited: dtype 77", c.plan = &bad, FA2_ERROR_BAD_PLAN, "dtype=77");
    bad = g_plan, bad.smem_bytes += 1024;
    FWD("plan edited: smem_bytes", c.plan = &bad, FA2_ERROR_BAD_PLAN, "changed after fa2_plan");
    /* outputs overlapping inputs */
    FWD("o overlaps q", c.o = g_q, FA2_ERROR_OVERLAP, "o [");
    FWD("lse overlaps o", c.lse = (float *)g_o, FA2_ERROR_OVERLAP, "lse [");
    /* a decode plan with key splits: its workspace (the splits' partial results) */
    fa2_problem_t dp;
    fa2_problem_init(&dp, FA2_DTYPE_BF16, 1, 1, 512, 4, 1, 64);
    dp.max_splits = 64;
    fa2_plan_t split_plan;
    assert_int_equal(fa2_plan(&dp, &g_plan.device, &split_plan), FA2_SUCCESS);
    assert_true(split_plan.splits > 1 && split_plan.workspace_bytes > 0 &&
                split_plan.workspace_bytes <= BUF);
    const size_t ws_bytes = (size_t)split_plan.workspace_bytes;
    FWD("decode splits: workspace NULL",
        (c.plan = &split_plan, c.ws = NULL, c.ws_bytes = ws_bytes), FA2_ERROR_WORKSPACE,
        "workspace is NULL");
    FWD("decode splits: workspace 1 byte short",
        (c.plan = &split_plan, c.ws_bytes = ws_bytes - 1), FA2_ERROR_WORKSPACE, "the plan needs");
    FWD("decode splits: workspace misaligned (+2)",
        (c.plan = &split_plan, c.ws = MIS(g_ws, 2), c.ws_bytes = ws_bytes), FA2_ERROR_MISALIGNED,
        "workspace=");
    FWD("decode splits: workspace overlaps o",
        (c.plan = &split_plan, c.ws = g_o, c.ws_bytes = ws_bytes), FA2_ERROR_OVERLAP, "workspace");
#undef FWD
    assert_int_equal(failed, 0);
}

static void test_backward_rejections(void **state)
{
    (void)state;
    int failed = 0;
    call_t c;
    fa2_plan_t bad;
#define BWD(what, edit, st, m) (c = good(), edit, failed += !expect_call_fail(1, what, c, st, m))
    BWD("plan=NULL", c.plan = NULL, FA2_ERROR_NULL_POINTER, "plan is NULL");
    BWD("q=NULL", c.q = NULL, FA2_ERROR_NULL_POINTER, "q is NULL");
    BWD("k=NULL", c.k = NULL, FA2_ERROR_NULL_POINTER, "k is NULL");
    BWD("v=NULL", c.v = NULL, FA2_ERROR_NULL_POINTER, "v is NULL");
    BWD("o=NULL", c.o_in = NULL, FA2_ERROR_NULL_POINTER, "o is NULL");
    BWD("d_o=NULL", c.d_o = NULL, FA2_ERROR_NULL_POINTER, "d_o is NULL");
    BWD("lse=NULL", c.lse = NULL, FA2_ERROR_NULL_POINTER, "lse is NULL");
    BWD("dq=NULL", c.dq = NULL, FA2_ERROR_NULL_POINTER, "dq is NULL");
    BWD("dk=NULL", c.dk = NULL, FA2_ERROR_NULL_POINTER, "dk is NULL");
    BWD("dv=NULL", c.dv = NULL, FA2_ERROR_NULL_POINTER, "dv is NULL");
    bad = g_plan, bad.struct_size = 0;
    BWD("plan.struct_size=0", c.plan = &bad, FA2_ERROR_STRUCT_SIZE, "plan->struct_size=0");
    bad = g_plan, bad.struct_size = sizeof bad - 8;
    BWD("plan.struct_size=older caller", c.plan = &bad, FA2_ERROR_STRUCT_SIZE, "plan->struct_size=");
    /* a plan without a backward returns the reason fa2_plan recorded (bwd_status) */
    {
        fa2_problem_t pr;
        fa2_device_info_t dev = g_plan.device;
        /* 64 query rows: the prefill kernels (the decode kernel takes more memory) */
        fa2_problem_init(&pr, FA2_DTYPE_BF16, 2, 64, 7, 4, 2, 64);
        assert_int_equal(fa2_plan(&pr, &dev, &bad), FA2_SUCCESS);
        dev.smem_per_block_optin = bad.smem_bytes; /* the forward fits, not the backward */
        assert_int_equal(fa2_plan(&pr, &dev, &bad), FA2_SUCCESS);
        BWD("plan: no backward (shared memory)", c.plan = &bad, FA2_ERROR_SHARED_MEMORY,
            "shared memory");
        fa2_problem_init(&pr, FA2_DTYPE_BF16, INT64_C(1) << 24, 64, 257, 64, 64, 64);
        assert_int_equal(fa2_plan(&pr, &g_plan.device, &bad), FA2_SUCCESS);
        BWD("plan: no backward (grid)", c.plan = &bad, FA2_ERROR_INVALID_SIZE,
            "exceeds the CUDA limit");
        /* seqlen_k = 0 with batch > 1: fa2_problem_init's K/V batch stride is 0, and the
         * empty tensors still have a backward (dQ = 0) */
        fa2_problem_init(&pr, FA2_DTYPE_BF16, 3, 17, 0, 4, 2, 64);
        assert_int_equal(fa2_plan(&pr, &g_plan.device, &bad), FA2_SUCCESS);
        assert_int_equal(bad.bwd_supported, 1);
        pr = g_plan.problem;
        pr.k_seq_stride = 0; /* K broadcast over the sequence: dK rows would collide */
        assert_int_equal(fa2_plan(&pr, &g_plan.device, &bad), FA2_SUCCESS);
        BWD("plan: no backward (K broadcast)", c.plan = &bad, FA2_ERROR_OVERLAP,
            "sum a broadcast gradient yourself");
    }
    /* a plan edited after fa2_plan is refused, whatever the edit */
    bad = g_plan, bad.bwd_supported = 0, bad.bwd_status = FA2_ERROR_SHARED_MEMORY;
    BWD("plan edited: bwd_supported", c.plan = &bad, FA2_ERROR_BAD_PLAN,
        "changed after fa2_plan");
    bad = g_plan, bad.bwd_workspace_bytes = 16;
    BWD("plan edited: bwd_workspace_bytes", c.plan = &bad, FA2_ERROR_BAD_PLAN,
        "changed after fa2_plan");
    bad = g_plan, bad.problem.head_dim = 4096;
    BWD("plan edited: head_dim 4096", c.plan = &bad, FA2_ERROR_BAD_PLAN, "head_dim=4096");
    bad = g_plan, bad.problem.seqlen_q = INT64_C(1) << 40;
    BWD("plan edited: seqlen_q 2^40", c.plan = &bad, FA2_ERROR_BAD_PLAN, "seqlen_q=");
    /* sm_86 with its shared memory: no Hopper kernels, smaller tiles (a build without
     * sm_90a plans mma.sync kernels for both devices: the tiles tell them apart) */
    bad = g_plan, bad.device.cc_major = 8, bad.device.cc_minor = 6;
    bad.device.smem_per_block_optin = 101376, bad.device.smem_per_sm = 102400;
    BWD("plan edited: device", c.plan = &bad, FA2_ERROR_BAD_PLAN, "changed after fa2_plan");
    BWD("q misaligned", c.q = MIS(g_q, 2), FA2_ERROR_MISALIGNED, "q=");
    BWD("k misaligned", c.k = MIS(g_k, 8), FA2_ERROR_MISALIGNED, "k=");
    BWD("v misaligned", c.v = MIS(g_v, 4), FA2_ERROR_MISALIGNED, "v=");
    BWD("o misaligned", c.o_in = MIS(g_o, 2), FA2_ERROR_MISALIGNED, "o=");
    BWD("d_o misaligned", c.d_o = MIS(g_do, 2), FA2_ERROR_MISALIGNED, "d_o=");
    BWD("lse misaligned", c.lse = MIS(g_lse, 1), FA2_ERROR_MISALIGNED, "lse=");
    BWD("dq misaligned", c.dq = MIS(g_dq, 2), FA2_ERROR_MISALIGNED, "dq=");
    BWD("dk misaligned", c.dk = MIS(g_dk, 8), FA2_ERROR_MISALIGNED, "dk=");
    BWD("dv misaligned", c.dv = MIS(g_dv, 2), FA2_ERROR_MISALIGNED, "dv=");
    BWD("workspace misaligned", c.ws = MIS(g_ws, 4), FA2_ERROR_MISALIGNED, "workspace=");
    BWD("workspace=NULL", c.ws = NULL, FA2_ERROR_WORKSPACE, "workspace is NULL");
    BWD("workspace_bytes=0", c.ws_bytes = 0, FA2_ERROR_WORKSPACE, "workspace_bytes=0");
    /* outputs overlapping inputs or each other */
    BWD("dq overlaps q", c.dq = (void *)g_q, FA2_ERROR_OVERLAP, "dq [");
    BWD("dk overlaps dv", c.dk = c.dv, FA2_ERROR_OVERLAP, "dk [");
    BWD("workspace overlaps lse", c.ws = (void *)g_lse, FA2_ERROR_OVERLAP, "workspace [");
    BWD("dv overlaps d_o", c.dv = (void *)g_do, FA2_ERROR_OVERLAP, "dv [");
    BWD("workspace_bytes one short", c.ws_bytes = (size_t)g_plan.bwd_workspace_bytes - 1,
        FA2_ERROR_WORKSPACE, "bwd_workspace_bytes");
#undef BWD
    assert_int_equal(failed, 0);
}

/* fa2_forward_with / fa2_backward_with and the score variants: the args struct, the
 * per-head tensors against the plan's variants (given exactly when the plan has them,
 * 4-byte aligned, dsinks overlapping nothing), the older calls refusing a plan that
 * needs them, a backward the plan does not have. */
static int expect_with_fail(int backward, const char *what, const fa2_plan_t *plan,
                            const void *args, fa2_status_t want, const char *says)
{
    poison_outputs();
    const fa2_status_t s =
        backward ? fa2_backward_with(plan, (const fa2_backward_args_t *)args)
                 : fa2_forward_with(plan, (const fa2_forward_args_t *)args);
    return report(backward ? "fa2_backward_with" : "fa2_forward_with", what, s, want, says);
}

static void test_score_variant_rejections(void **state)
{
    (void)state;
    int failed = 0;
    fa2_problem_t pr = base();
    fa2_plan_t scored, sinks_only, capped;
    pr.alibi = 1, pr.sinks = 1;
    assert_int_equal(fa2_plan(&pr, &g_plan.device, &scored), FA2_SUCCESS);
    pr.alibi = 0;
    assert_int_equal(fa2_plan(&pr, &g_plan.device, &sinks_only), FA2_SUCCESS);
    assert_int_equal(sinks_only.bwd_supported, 1);
    pr.sinks = 0, pr.softcap = 30.0f;
    assert_int_equal(fa2_plan(&pr, &g_plan.device, &capped), FA2_SUCCESS);
    assert_int_equal(scored.bwd_supported & capped.bwd_supported, 1);

    fa2_forward_args_t f, fwd;
    fa2_forward_args_init(&fwd);
    fwd.q = g_q, fwd.k = g_k, fwd.v = g_v, fwd.o = g_o, fwd.lse = (float *)(void *)g_lse;
    fwd.alibi_slopes = (const float *)(const void *)g_q;
    fwd.sinks = (const float *)(const void *)g_k;
#define FWD(what, plan, edit, st, m) \
    (f = fwd, edit, failed += !expect_with_fail(0, what, plan, &f, st, m))
    failed += !expect_with_fail(0, "args=NULL", &scored, NULL, FA2_ERROR_NULL_POINTER,
                                "args is NULL");
    FWD("args.struct_size=0", &scored, f.struct_size = 0, FA2_ERROR_STRUCT_SIZE,
        "fa2_forward_args_init");
    FWD("alibi_slopes=NULL", &scored, f.alibi_slopes = NULL, FA2_ERROR_NULL_POINTER,
        "alibi_slopes is NULL");
    FWD("sinks=NULL", &scored, f.sinks = NULL, FA2_ERROR_NULL_POINTER, "sinks is NULL");
    FWD("sinks misaligned (+2)", &scored, f.sinks = MIS(g_k, 2), FA2_ERROR_MISALIGNED, "sinks=");
    FWD("alibi_slopes without ALiBi", &sinks_only, (void)0, FA2_ERROR_UNSUPPORTED,
        "problem.alibi=0");
    FWD("sinks without sinks", &g_plan, f.alibi_slopes = NULL, FA2_ERROR_UNSUPPORTED,
        "problem.sinks=0");
    FWD("cu_seqlens_q for a dense plan", &scored, f.cu_seqlens_q = (const int32_t *)g_v,
        FA2_ERROR_UNSUPPORTED, "dense plan");
#undef FWD
    poison_outputs();
    failed += !report("fa2_forward", "a plan with ALiBi and sinks",
                      fa2_forward(&scored, g_q, g_k, g_v, g_o, (float *)(void *)g_lse, NULL, 0,
                                  NULL),
                      FA2_ERROR_UNSUPPORTED, "fa2_forward_with");

    fa2_backward_args_t b, bwd;
    fa2_backward_args_init(&bwd);
    bwd.q = g_q, bwd.k = g_k, bwd.v = g_v, bwd.o = g_o, bwd.d_o = g_do;
    bwd.lse = (const float *)(const void *)g_lse;
    bwd.dq = g_dq, bwd.dk = g_dk, bwd.dv = g_dv, bwd.workspace = g_ws;
    bwd.workspace_bytes = (size_t)sinks_only.bwd_workspace_bytes;
    bwd.sinks = (const float *)(const void *)g_k, bwd.dsinks = (float *)(void *)g_dsinks;
#define BWD(what, plan, edit, st, m) \
    (b = bwd, edit, failed += !expect_with_fail(1, what, plan, &b, st, m))
    failed += !expect_with_fail(1, "args=NULL", &sinks_only, NULL, FA2_ERROR_NULL_POINTER,
                                "args is NULL");
    BWD("args.struct_size=sizeof+8", &sinks_only, b.struct_size += 8, FA2_ERROR_STRUCT_SIZE,
        "fa2_backward_args_init");
    BWD("dsinks=NULL", &sinks_only, b.dsinks = NULL, FA2_ERROR_NULL_POINTER, "dsinks is NULL");
    BWD("sinks=NULL", &sinks_only, b.sinks = NULL, FA2_ERROR_NULL_POINTER, "sinks is NULL");
    BWD("dsinks misaligned (+2)", &sinks_only, b.dsinks = MIS(g_dsinks, 2),
        FA2_ERROR_MISALIGNED, "dsinks=");
    BWD("dsinks overlaps dq", &sinks_only, b.dsinks = (float *)(void *)g_dq, FA2_ERROR_OVERLAP,
        "dsinks [");
    BWD("dsinks without sinks", &g_plan, b.sinks = NULL, FA2_ERROR_UNSUPPORTED,
        "problem.sinks=0");
    BWD("alibi_slopes without ALiBi", &sinks_only,
        b.alibi_slopes = (const float *)(const void *)g_q, FA2_ERROR_UNSUPPORTED,
        "problem.alibi=0");
    BWD("alibi_slopes=NULL", &scored, (void)0, FA2_ERROR_NULL_POINTER, "alibi_slopes is NULL");
    BWD("sinks for a softcap plan", &capped, b.dsinks = NULL, FA2_ERROR_UNSUPPORTED,
        "problem.sinks=0");
#undef BWD
    poison_outputs();
    failed += !report("fa2_backward", "a plan with sinks",
                      fa2_backward(&sinks_only, g_q, g_k, g_v, g_o, g_do,
                                   (const float *)(const void *)g_lse, g_dq, g_dk, g_dv, g_ws,
                                   (size_t)sinks_only.bwd_workspace_bytes, NULL),
                      FA2_ERROR_UNSUPPORTED, "fa2_backward_with");
    assert_int_equal(failed, 0);
}

/* fa2_device_info_query: a NULL info; a bad index (with no device or driver too, this
 * is FA2_ERROR_NO_DEVICE); the info untouched either way. */
static void test_device_query_rejections(void **state)
{
    (void)state;
    fa2_device_info_t info, poison;
    int failed = 0;
    const int bad[] = {-1, 1 << 20};
    fa2_status_t s = fa2_device_info_query(0, NULL);
    printf("reject %3d: fa2_device_info_query info=NULL -> %s \"%s\" %s\n", ++g_case,
           fa2_status_string(s), fa2_last_error(), s == FA2_ERROR_NULL_POINTER ? "ok" : "FAIL");
    failed += s != FA2_ERROR_NULL_POINTER;
    for (int i = 0; i < 2; ++i) {
        memset(&info, 0x3C, sizeof info);
        poison = info;
        s = fa2_device_info_query(bad[i], &info);
        const int ok = s == FA2_ERROR_NO_DEVICE && memcmp(&info, &poison, sizeof info) == 0 &&
                       fa2_last_error()[0] != '\0';
        printf("reject %3d: fa2_device_info_query device=%d -> %s \"%s\" %s\n", ++g_case, bad[i],
               fa2_status_string(s), fa2_last_error(), ok ? "ok" : "FAIL");
        failed += !ok;
    }
    assert_int_equal(failed, 0);
}

/* ---- packed batches: fa2_plan's packed fields, fa2_forward_varlen ----------------------- */

static _Alignas(16) int32_t g_offsets[16];

/* The base problem as a packed batch: 2 sequences, rows 12 of Q and 16 of K/V. */
static fa2_problem_t packed_base(void)
{
    fa2_problem_t p = base();
    p.total_q = 12;
    p.total_k = 16;
    p.q_batch_stride = p.k_batch_stride = p.v_batch_stride = p.o_batch_stride = 0;
    return p;
}

static int expect_varlen_ws_fail(const char *what, const fa2_plan_t *plan, const void *o,
                                 const int32_t *cu_q, const int32_t *cu_k, void *ws,
                                 size_t ws_bytes, fa2_status_t want, const char *says)
{
    poison_outputs();
    const fa2_status_t s = fa2_forward_varlen(plan, g_q, g_k, g_v, (void *)o,
                                              (float *)(void *)g_lse, cu_q, cu_k, NULL, NULL,
                                              ws, ws_bytes, NULL);
    return report("fa2_forward_varlen", what, s, want, says);
}

/* expect_varlen_fail with a good workspace */
static int expect_varlen_fail(const char *what, const fa2_plan_t *plan, const void *o,
                              const int32_t *cu_q, const int32_t *cu_k, fa2_status_t want,
                              const char *says)
{
    return expect_varlen_ws_fail(what, plan, o, cu_q, cu_k, g_ws, BUF, want, says);
}

static void test_packed_rejections(void **state)
{
    (void)state;
    int failed = 0;
    const fa2_device_info_t d = h200();
    fa2_problem_t p = packed_base();
    fa2_plan_t packed;
    assert_int_equal(fa2_plan(&p, &d, &packed), FA2_SUCCESS);
    p = packed_base(), p.total_q = 4; /* below seqlen_q = 5 */
    failed += !expect_plan_fail("total_q below seqlen_q", &p, &d, 0, FA2_ERROR_INVALID_SIZE,
                                "total_q=4");
    p = packed_base(), p.total_k = I32MAX + 1;
    failed += !expect_plan_fail("total_k past 2^31 - 1", &p, &d, 0, FA2_ERROR_INVALID_SIZE,
                                "total_k=2147483648");
    p = packed_base(), p.o_batch_stride = 64;
    failed += !expect_plan_fail("packed with o_batch_stride=64", &p, &d, 0,
                                FA2_ERROR_BAD_STRIDE, "batch strides 0");
    p = base(), p.total_k = 16;
    failed += !expect_plan_fail("total_k without total_q", &p, &d, 0, FA2_ERROR_INVALID_SIZE,
                                "total_k=16");
    const int32_t *cu = g_offsets;
    failed += !expect_varlen_fail("cu_seqlens_q=NULL", &packed, g_o, NULL, cu,
                                  FA2_ERROR_NULL_POINTER, "cu_seqlens_q is NULL");
    failed += !expect_varlen_fail("cu_seqlens_k=NULL", &packed, g_o, cu, NULL,
                                  FA2_ERROR_NULL_POINTER, "cu_seqlens_k is NULL");
    failed += !expect_varlen_fail("cu_seqlens_k misaligned (+2)", &packed, g_o, cu,
                                  (const int32_t *)MIS(g_offsets, 2), FA2_ERROR_MISALIGNED,
                                  "cu_seqlens_k");
    failed += !expect_varlen_fail("a dense plan", &g_plan, g_o, cu, cu, FA2_ERROR_UNSUPPORTED,
                                  "call fa2_forward");
    failed += !expect_varlen_fail("o overlaps q", &packed, g_q, cu, cu, FA2_ERROR_OVERLAP,
                                  "o [");
    failed += !expect_varlen_ws_fail("workspace=NULL", &packed, g_o, cu, cu, NULL, BUF,
                                     FA2_ERROR_WORKSPACE, "workspace is NULL");
    failed += !expect_varlen_ws_fail("workspace_bytes one short", &packed, g_o, cu, cu, g_ws,
                                     (size_t)packed.workspace_bytes - 1, FA2_ERROR_WORKSPACE,
                                     "workspace_bytes=");
    failed += !expect_varlen_ws_fail("workspace misaligned (+2)", &packed, g_o, cu, cu,
                                     MIS(g_ws, 2), BUF - 2, FA2_ERROR_MISALIGNED, "workspace");
    failed += !expect_varlen_ws_fail("workspace = o", &packed, g_o, cu, cu, g_o, BUF,
                                     FA2_ERROR_OVERLAP, "workspace");
    failed += !expect_varlen_ws_fail("workspace overlaps cu_seqlens_q", &packed, g_o, cu, cu,
                                     (void *)g_offsets, (size_t)packed.workspace_bytes,
                                     FA2_ERROR_OVERLAP, "cu_seqlens_q");
    /* and fa2_forward given the packed plan */
    call_t c = good();
    c.plan = &packed;
    failed += !expect_call_fail(0, "a packed plan", c, FA2_ERROR_UNSUPPORTED,
                                "call fa2_forward_varlen");
    assert_int_equal(failed, 0);
}

/* ---- fa2_combine: each field or pointer broken once -------------------------------- */

/* fa2_combine(problem, g_q as the parts, g_k as their LSEs, o, lse): 1 when the status
 * and message are as expected and every output is untouched. */
static int expect_combine_fail(const char *what, const fa2_combine_problem_t *p, void *o,
                               float *lse, fa2_status_t want, const char *says)
{
    poison_outputs();
    const fa2_status_t s = fa2_combine(p, g_q, (const float *)(void *)g_k, o, lse, NULL);
    return report("fa2_combine", what, s, want, says);
}

static fa2_combine_problem_t combine_base(void)
{
    fa2_combine_problem_t p;
    fa2_combine_problem_init(&p, FA2_DTYPE_FP32, FA2_DTYPE_BF16, 3, 5, 2, 64);
    return p;
}

static void test_combine_rejections(void **state)
{
    (void)state;
    int failed = 0;
    float *lse = (float *)(void *)g_lse;
    fa2_combine_problem_t p = combine_base();
    failed += !expect_combine_fail("problem=NULL", NULL, g_o, lse, FA2_ERROR_NULL_POINTER,
                                   "problem is NULL");
    failed += !expect_combine_fail("o=NULL", &p, NULL, lse, FA2_ERROR_NULL_POINTER,
                                   "o is NULL");
#define COMBINE_CASE(field, value, want, says)                                            \
    p = combine_base(), p.field = (value);                                                 \
    failed += !expect_combine_fail(#field "=" #value, &p, g_o, lse, want, says)
    COMBINE_CASE(struct_size, 0, FA2_ERROR_STRUCT_SIZE, "struct_size=0");
    COMBINE_CASE(parts_dtype, 9, FA2_ERROR_UNSUPPORTED_DTYPE, "parts_dtype=9");
    COMBINE_CASE(dtype, 0, FA2_ERROR_UNSUPPORTED_DTYPE, "dtype=0");
    COMBINE_CASE(parts, 0, FA2_ERROR_INVALID_SIZE, "parts=0");
    COMBINE_CASE(parts, FA2_MAX_COMBINE_PARTS + 1, FA2_ERROR_INVALID_SIZE, "parts=65537");
    COMBINE_CASE(rows, I32MAX + 1, FA2_ERROR_INVALID_SIZE, "rows=2147483648");
    COMBINE_CASE(heads, -1, FA2_ERROR_INVALID_SIZE, "heads=-1");
    COMBINE_CASE(head_dim, 12, FA2_ERROR_UNSUPPORTED_HEAD_DIM, "head_dim=12");
    COMBINE_CASE(head_dim, 264, FA2_ERROR_UNSUPPORTED_HEAD_DIM, "head_dim=264");
    p = combine_base(), p.rows = I32MAX, p.heads = 64; /* 2^31 - 1 rows x 64 heads x 8 */
    failed += !expect_combine_fail("rows=2^31-1 heads=64 (grid)", &p, g_o, lse,
                                   FA2_ERROR_INVALID_SIZE, "thread blocks");
    COMBINE_CASE(o_parts_row_stride, 12, FA2_ERROR_BAD_STRIDE, "o_parts_row_stride=12");
    COMBINE_CASE(lse_parts_part_stride, -1, FA2_ERROR_BAD_STRIDE, "lse_parts_part_stride=-1");
    COMBINE_CASE(o_head_stride, 4, FA2_ERROR_BAD_STRIDE, "o_head_stride=4");
    COMBINE_CASE(o_parts_part_stride, INT64_C(1) << 62, FA2_ERROR_SIZE_OVERFLOW, "overflows");
    COMBINE_CASE(o_head_stride, 0, FA2_ERROR_OVERLAP, "repeat an address");
    COMBINE_CASE(lse_row_stride, 0, FA2_ERROR_OVERLAP, "lse's strides");
#undef COMBINE_CASE
    p = combine_base();
    failed += !expect_combine_fail("o misaligned (+2)", &p, MIS(g_o, 2), lse,
                                   FA2_ERROR_MISALIGNED, "o=");
    failed += !expect_combine_fail("o overlaps o_parts", &p, g_q, lse, FA2_ERROR_OVERLAP,
                                   "o_parts");
    failed += !expect_combine_fail("lse overlaps o", &p, g_o, (float *)(void *)(g_o + 64),
                                   FA2_ERROR_OVERLAP, "lse");
    assert_int_equal(failed, 0);
}

static int setup(void **state)
{
    (void)state;
    fa2_problem_t p = base();
    const fa2_device_info_t d = h200();
    p.causal = 1;
    p.deterministic = 1; /* workspace: D only, whatever scratch the atomics may need */
    if (fa2_plan(&p, &d, &g_plan) != FA2_SUCCESS || !g_plan.bwd_supported ||
        g_plan.bwd_workspace_bytes <= 0 || g_plan.bwd_workspace_bytes > BUF)
        return -1;
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plan_rejections),
        cmocka_unit_test(test_forward_rejections),
        cmocka_unit_test(test_backward_rejections),
        cmocka_unit_test(test_score_variant_rejections),
        cmocka_unit_test(test_packed_rejections),
        cmocka_unit_test(test_device_query_rejections),
        cmocka_unit_test(test_combine_rejections),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
