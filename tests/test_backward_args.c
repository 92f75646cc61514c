/* fa2_backward's argument checks, one bad argument at a time: each gives its status and
 * a message that starts with the argument's name (or names the plan field), and leaves
 * the outputs and the workspace byte-identical. Every case fails before any CUDA call,
 * so host buffers stand in for device memory and no GPU is needed. CPU only. */
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "fa2.h"

#define TENSOR_BYTES 4096 /* room for the small problem below, any stride */

/* 16-byte aligned host stand-ins; +2 bytes makes any of them misaligned */
static _Alignas(16) unsigned char g_q[TENSOR_BYTES + 16], g_k[TENSOR_BYTES + 16],
    g_v[TENSOR_BYTES + 16], g_o[TENSOR_BYTES + 16], g_do[TENSOR_BYTES + 16],
    g_lse[TENSOR_BYTES + 16], g_dq[TENSOR_BYTES + 16], g_dk[TENSOR_BYTES + 16],
    g_dv[TENSOR_BYTES + 16], g_ws[TENSOR_BYTES + 16];

static fa2_plan_t g_plan;

static fa2_device_info_t h200(void)
{
    fa2_device_info_t d = {sizeof(fa2_device_info_t), 9, 0, 132, 0, 232448, 233472};
    return d;
}

static int setup(void **state)
{
    (void)state;
    fa2_problem_t p;
    const fa2_device_info_t d = h200();
    fa2_problem_init(&p, FA2_DTYPE_BF16, 1, 4, 5, 2, 1, 64);
    p.causal = 1;
    p.deterministic = 1;
    const fa2_status_t s = fa2_plan(&p, &d, &g_plan);
    /* deterministic: D alone, 2 * 4 floats padded to 256 bytes */
    if (s != FA2_SUCCESS || !g_plan.bwd_supported || g_plan.bwd_workspace_bytes != 256) {
        print_error("setup: fa2_plan %s (%s), bwd_supported %d, bwd_workspace_bytes %" PRId64
                    "\n", fa2_status_string(s), fa2_last_error(), (int)g_plan.bwd_supported,
                    g_plan.bwd_workspace_bytes);
        return -1;
    }
    return 0;
}

static void poison(void)
{
    memset(g_dq, 0xFF, sizeof g_dq);
    memset(g_dk, 0xFF, sizeof g_dk);
    memset(g_dv, 0xFF, sizeof g_dv);
    memset(g_ws, 0xFF, sizeof g_ws);
}

static int untouched(const unsigned char *b, size_t n)
{
    for (size_t t = 0; t < n; ++t)
        if (b[t] != 0xFF)
            return 0;
    return 1;
}

/* The arguments of one call, all valid until a case breaks one. */
typedef struct args_t {
    const fa2_plan_t *plan;
    const void *q, *k, *v, *o, *d_o;
    const float *lse;
    void *dq, *dk, *dv, *ws;
    size_t ws_bytes;
} args_t;

static args_t good(void)
{
    args_t a = {&g_plan, g_q, g_k, g_v, g_o, g_do, (const float *)(void *)g_lse,
                g_dq, g_dk, g_dv, g_ws, (size_t)g_plan.bwd_workspace_bytes};
    return a;
}

/* fa2_backward(a) must return `want` with a message starting with `prefix` (or, when
 * `anywhere`, containing it), and write nothing. */
#define EXPECT_BWD(a, want, prefix, anywhere) expect_bwd(__LINE__, a, want, prefix, anywhere)
static void expect_bwd(int line, args_t a, fa2_status_t want, const char *prefix, int anywhere)
{
    poison();
    const fa2_status_t s = fa2_backward(a.plan, a.q, a.k, a.v, a.o, a.d_o, a.lse, a.dq, a.dk,
                                        a.dv, a.ws, a.ws_bytes, NULL);
    const char *m = fa2_last_error();
    const int named = anywhere ? strstr(m, prefix) != NULL
                               : strncmp(m, prefix, strlen(prefix)) == 0;
    if (s != want || !named) {
        print_error("line %d: got status %d (%s), want %d; message \"%s\" should %s \"%s\"\n",
                    line, (int)s, fa2_status_string(s), (int)want, m,
                    anywhere ? "contain" : "start with", prefix);
        fail();
    }
    if (!untouched(g_dq, sizeof g_dq) || !untouched(g_dk, sizeof g_dk) ||
        !untouched(g_dv, sizeof g_dv) || !untouched(g_ws, sizeof g_ws)) {
        print_error("line %d: fa2_backward wrote an output or the workspace on failure\n",
                    line);
        fail();
    }
}

static void test_null_pointers(void **state)
{
    (void)state;
    args_t a;
    a = good(), a.plan = NULL;
    EXPECT_BWD(a, FA2_ERROR_NULL_POINTER, "plan is NULL", 0);
    a = good(), a.q = NULL;
    EXPECT_BWD(a, FA2_ERROR_NULL_POINTER, "q is NULL", 0);
    a = good(), a.k = NULL;
    EXPECT_BWD(a, FA2_ERROR_NULL_POINTER, "k is NULL", 0);
    a = good(), a.v = NULL;
    EXPECT_BWD(a, FA2_ERROR_NULL_POINTER, "v is NULL", 0);
    a = good(), a.o = NULL;
    EXPECT_BWD(a, FA2_ERROR_NULL_POINTER, "o is NULL", 0);
    a = good(), a.d_o = NULL;
    EXPECT_BWD(a, FA2_ERROR_NULL_POINTER, "d_o is NULL", 0);
    a = good(), a.lse = NULL;
    EXPECT_BWD(a, FA2_ERROR_NULL_POINTER, "lse is NULL", 0);
    a = good(), a.dq = NULL;
    EXPECT_BWD(a, FA2_ERROR_NULL_POINTER, "dq is NULL", 0);
    a = good(), a.dk = NULL;
    EXPECT_BWD(a, FA2_ERROR_NULL_POINTER, "dk is NULL", 0);
    a = good(), a.dv = NULL;
    EXPECT_BWD(a, FA2_ERROR_NULL_POINTER, "dv is NULL", 0);
    /* a NULL pointer is reported before a broken plan */
    fa2_plan_t bad = g_plan;
    bad.struct_size = 0;
    a = good(), a.plan = &bad, a.dv = NULL;
    EXPECT_BWD(a, FA2_ERROR_NULL_POINTER, "dv is NULL", 0);
}

static void test_struct_size(void **state)
{
    (void)state;
    fa2_plan_t bad = g_plan;
    args_t a = good();
    a.plan = &bad;
    bad.struct_size = 0;
    EXPECT_BWD(a, FA2_ERROR_STRUCT_SIZE, "plan->struct_size=0", 0);
    bad.struct_size = sizeof bad - 8;
    EXPECT_BWD(a, FA2_ERROR_STRUCT_SIZE, "plan->struct_size=", 0);
    bad.struct_size = sizeof bad + 8;
    EXPECT_BWD(a, FA2_ERROR_STRUCT_SIZE, "plan->struct_size=", 0);
}

static void test_misaligned(void **state)
{
    (void)state;
    args_t a;
    a = good(), a.q = g_q + 2;
    EXPECT_BWD(a, FA2_ERROR_MISALIGNED, "q=", 0);
    a = good(), a.k = g_k + 8;
    EXPECT_BWD(a, FA2_ERROR_MISALIGNED, "k=", 0);
    a = good(), a.v = g_v + 2;
    EXPECT_BWD(a, FA2_ERROR_MISALIGNED, "v=", 0);
    a = good(), a.o = g_o + 4;
    EXPECT_BWD(a, FA2_ERROR_MISALIGNED, "o=", 0);
    a = good(), a.d_o = g_do + 2;
    EXPECT_BWD(a, FA2_ERROR_MISALIGNED, "d_o=", 0);
    a = good(), a.lse = (const float *)(void *)(g_lse + 2);
    EXPECT_BWD(a, FA2_ERROR_MISALIGNED, "lse=", 0);
    a = good(), a.dq = g_dq + 2;
    EXPECT_BWD(a, FA2_ERROR_MISALIGNED, "dq=", 0);
    a = good(), a.dk = g_dk + 2;
    EXPECT_BWD(a, FA2_ERROR_MISALIGNED, "dk=", 0);
    a = good(), a.dv = g_dv + 8;
    EXPECT_BWD(a, FA2_ERROR_MISALIGNED, "dv=", 0);
    a = good(), a.ws = g_ws + 2;
    EXPECT_BWD(a, FA2_ERROR_MISALIGNED, "workspace=", 0);
    a = good(), a.q = g_q + 8;
    EXPECT_BWD(a, FA2_ERROR_MISALIGNED, "16-byte aligned", 1);
    a = good(), a.lse = (const float *)(void *)(g_lse + 1);
    EXPECT_BWD(a, FA2_ERROR_MISALIGNED, "4-byte aligned", 1);
    /* lse needs only 4 bytes: this call gets past the alignment checks and stops at
     * the workspace (before any launch) */
    a = good(), a.lse = (const float *)(void *)(g_lse + 4), a.ws = NULL;
    EXPECT_BWD(a, FA2_ERROR_WORKSPACE, "bwd_workspace_bytes", 1);
}

static void test_workspace(void **state)
{
    (void)state;
    args_t a;
    a = good(), a.ws = NULL;
    EXPECT_BWD(a, FA2_ERROR_WORKSPACE, "bwd_workspace_bytes", 1);
    a = good(), a.ws = NULL, a.ws_bytes = 1 << 20;
    EXPECT_BWD(a, FA2_ERROR_WORKSPACE, "workspace is NULL", 0);
    a = good(), a.ws_bytes = (size_t)g_plan.bwd_workspace_bytes - 1;
    EXPECT_BWD(a, FA2_ERROR_WORKSPACE, "bwd_workspace_bytes", 1);
    a = good(), a.ws_bytes = 0;
    EXPECT_BWD(a, FA2_ERROR_WORKSPACE, "workspace_bytes=0", 0);
}

/* A plan whose backward tiles do not fit its device. */
static void test_backward_unsupported(void **state)
{
    (void)state;
    fa2_plan_t bad = g_plan;
    args_t a = good();
    a.plan = &bad;
    /* edited by hand: refused as a changed plan, not trusted */
    bad.bwd_supported = 0;
    bad.bwd_status = FA2_ERROR_SHARED_MEMORY;
    EXPECT_BWD(a, FA2_ERROR_BAD_PLAN, "changed after fa2_plan", 1);

    /* a real one: a device with less shared memory than the backward needs but enough
     * for the forward (d = 64: forward 40960 bytes, backward 50176 on an H200 today;
     * 40 query rows: the prefill kernels, not the decode kernel) */
    fa2_device_info_t small = h200();
    fa2_problem_t p;
    fa2_problem_init(&p, FA2_DTYPE_FP16, 1, 40, 5, 2, 1, 64);
    fa2_plan_t full;
    assert_int_equal(fa2_plan(&p, &small, &full), FA2_SUCCESS);
    assert_true(full.bwd_smem_bytes > full.smem_bytes);
    small.smem_per_block_optin = full.bwd_smem_bytes - 16;
    fa2_plan_t tight;
    assert_int_equal(fa2_plan(&p, &small, &tight), FA2_SUCCESS);
    assert_int_equal(tight.bwd_supported, 0);
    assert_int_equal(tight.bwd_status, FA2_ERROR_SHARED_MEMORY);
    a.plan = &tight;
    EXPECT_BWD(a, FA2_ERROR_SHARED_MEMORY, "shared memory", 1);

    /* a device (sm_89) whose shared memory holds the deterministic backward's tiles at
     * d = 128 (66048 bytes, compact) but not the default mode's (70144): the message
     * says deterministic mode fits */
    fa2_device_info_t tight_rtx = {sizeof(fa2_device_info_t), 8, 9, 128, 0, 68000, 102400};
    fa2_problem_init(&p, FA2_DTYPE_BF16, 1, 4, 5, 2, 1, 128);
    fa2_plan_t consumer;
    assert_int_equal(fa2_plan(&p, &tight_rtx, &consumer), FA2_SUCCESS);
    assert_int_equal(consumer.bwd_supported, 0);
    a.plan = &consumer;
    EXPECT_BWD(a, FA2_ERROR_SHARED_MEMORY, "with deterministic = 1 the backward fits", 1);
    p.deterministic = 1;
    assert_int_equal(fa2_plan(&p, &tight_rtx, &consumer), FA2_SUCCESS);
    assert_int_equal(consumer.bwd_supported, 1);
}

/* Backward grids over 2^31 - 1 blocks that the forward's grid is not. Default mode:
 * the dK/dV kernel's grid (ceil(seqlen_k / 128) * heads_kv * batch at d = 64).
 * Deterministic mode: also the dQ kernel's (64 query rows per block where the forward
 * has 128), which the default mode does not run. FA2_ERROR_INVALID_SIZE, a message
 * naming the limit, nothing written. */
static void expect_grid_rejected(const fa2_plan_t *plan)
{
    args_t a = good();
    a.plan = plan;
    a.ws_bytes = sizeof g_ws;
    poison();
    assert_int_equal(plan->bwd_supported, 0);
    assert_int_equal(plan->bwd_status, FA2_ERROR_INVALID_SIZE);
    assert_int_equal(fa2_backward(a.plan, a.q, a.k, a.v, a.o, a.d_o, a.lse, a.dq, a.dk, a.dv,
                                  a.ws, a.ws_bytes, NULL),
                     FA2_ERROR_INVALID_SIZE);
    assert_non_null(strstr(fa2_last_error(), "2147483647"));
    assert_true(untouched(g_dq, sizeof g_dq) && untouched(g_dk, sizeof g_dk) &&
                untouched(g_dv, sizeof g_dv) && untouched(g_ws, sizeof g_ws));
}

static void test_backward_grid_too_large(void **state)
{
    (void)state;
    fa2_device_info_t d = h200();
    d.cc_major = 8; /* an sm_80 device: the mma.sync tiles on every build */
    fa2_problem_t p;
    fa2_plan_t plan;

    /* dK/dV grid 3 * 64 * 2^24 > 2^31 - 1; forward grid 2^30 */
    fa2_problem_init(&p, FA2_DTYPE_BF16, INT64_C(1) << 24, 128, 257, 64, 64, 64);
    assert_int_equal(fa2_plan(&p, &d, &plan), FA2_SUCCESS);
    assert_true(plan.grid_blocks <= INT64_C(2147483647));
    expect_grid_rejected(&plan);

    /* The row kernels (D, dQ conversion) take 32 rows per block at d = 64: 2^37 rows
     * are 2^32 blocks, though the dK/dV grid (2^30) and the forward's (2^30) fit. */
    fa2_problem_init(&p, FA2_DTYPE_BF16, INT64_C(1) << 24, 128, 64, 64, 64, 64);
    assert_int_equal(fa2_plan(&p, &d, &plan), FA2_SUCCESS);
    expect_grid_rejected(&plan);

    /* d = 8 (bucket 32): the row kernels take 256 rows per block (grid 2^29), the dQ
     * kernel 64 (grid 2 * 64 * 2^24 = 2^31): rejected only in deterministic mode */
    fa2_problem_init(&p, FA2_DTYPE_BF16, INT64_C(1) << 24, 128, 64, 64, 64, 8);
    assert_int_equal(fa2_plan(&p, &d, &plan), FA2_SUCCESS);
    assert_int_equal(plan.bwd_supported, 1);
    p.deterministic = 1;
    assert_int_equal(fa2_plan(&p, &d, &plan), FA2_SUCCESS);
    expect_grid_rejected(&plan);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_null_pointers),
        cmocka_unit_test(test_struct_size),
        cmocka_unit_test(test_misaligned),
        cmocka_unit_test(test_workspace),
        cmocka_unit_test(test_backward_unsupported),
        cmocka_unit_test(test_backward_grid_too_large),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
