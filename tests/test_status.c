/* Version, status strings, the per-thread message, fa2_problem_init and the
 * device query's error paths. CPU only. */
#define _POSIX_C_SOURCE 200809L /* pthread_barrier_t under -std=c11 */
#include <limits.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>
#include <cuda_runtime_api.h>

#include "fa2.h"

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

static void test_version(void **state)
{
    (void)state;
    assert_int_equal(fa2_version(), FA2_VERSION_NUMBER);
    assert_int_equal(FA2_VERSION_NUMBER,
                     FA2_VERSION_MAJOR * 10000 + FA2_VERSION_MINOR * 100 + FA2_VERSION_PATCH);
}

/* The ABI promise: these numbers never change. */
static void test_status_values_pinned(void **state)
{
    (void)state;
    assert_int_equal(FA2_SUCCESS, 0);
    assert_int_equal(FA2_ERROR_NULL_POINTER, 1);
    assert_int_equal(FA2_ERROR_STRUCT_SIZE, 2);
    assert_int_equal(FA2_ERROR_INVALID_SIZE, 3);
    assert_int_equal(FA2_ERROR_SIZE_OVERFLOW, 4);
    assert_int_equal(FA2_ERROR_UNSUPPORTED_DTYPE, 5);
    assert_int_equal(FA2_ERROR_UNSUPPORTED_HEAD_DIM, 6);
    assert_int_equal(FA2_ERROR_HEADS_MISMATCH, 7);
    assert_int_equal(FA2_ERROR_BAD_STRIDE, 8);
    assert_int_equal(FA2_ERROR_MISALIGNED, 9);
    assert_int_equal(FA2_ERROR_BAD_WINDOW, 10);
    assert_int_equal(FA2_ERROR_BAD_SCALE, 11);
    assert_int_equal(FA2_ERROR_UNSUPPORTED_DEVICE, 12);
    assert_int_equal(FA2_ERROR_SHARED_MEMORY, 13);
    assert_int_equal(FA2_ERROR_WORKSPACE, 14);
    assert_int_equal(FA2_ERROR_NO_DEVICE, 15);
    assert_int_equal(FA2_ERROR_CUDA, 16);
    assert_int_equal(FA2_ERROR_OVERLAP, 17);
    assert_int_equal(FA2_ERROR_BAD_PLAN, 18);
    assert_int_equal(FA2_ERROR_DEVICE_MISMATCH, 19);
    assert_int_equal(FA2_ERROR_RESERVED, 20);
    assert_int_equal(FA2_ERROR_UNSUPPORTED, 21);
    assert_int_equal(FA2_DTYPE_FP16, 1);
    assert_int_equal(FA2_DTYPE_BF16, 2);
    assert_int_equal(FA2_RULE_SEED_SRAM, 1);
    assert_int_equal(FA2_RULE_HEAD_DIM, 2);
    assert_int_equal(FA2_RULE_MMA_MULTIPLE, 3);
    assert_int_equal(FA2_RULE_KERNEL_TILE, 4);
}

/* Each status has its own string, starting with its enum name. */
static void test_status_strings(void **state)
{
    static const char *const names[] = {
        "FA2_SUCCESS",
        "FA2_ERROR_NULL_POINTER",
        "FA2_ERROR_STRUCT_SIZE",
        "FA2_ERROR_INVALID_SIZE",
        "FA2_ERROR_SIZE_OVERFLOW",
        "FA2_ERROR_UNSUPPORTED_DTYPE",
        "FA2_ERROR_UNSUPPORTED_HEAD_DIM",
        "FA2_ERROR_HEADS_MISMATCH",
        "FA2_ERROR_BAD_STRIDE",
        "FA2_ERROR_MISALIGNED",
        "FA2_ERROR_BAD_WINDOW",
        "FA2_ERROR_BAD_SCALE",
        "FA2_ERROR_UNSUPPORTED_DEVICE",
        "FA2_ERROR_SHARED_MEMORY",
        "FA2_ERROR_WORKSPACE",
        "FA2_ERROR_NO_DEVICE",
        "FA2_ERROR_CUDA",
        "FA2_ERROR_OVERLAP",
        "FA2_ERROR_BAD_PLAN",
        "FA2_ERROR_DEVICE_MISMATCH",
        "FA2_ERROR_RESERVED",
        "FA2_ERROR_UNSUPPORTED",
        "FA2_ERROR_BAD_METADATA",
    };
    size_t n = sizeof names / sizeof names[0];
    (void)state;
    for (size_t i = 0; i < n; i++) {
        const char *s = fa2_status_string((fa2_status_t)i);
        assert_non_null(s);
        assert_int_equal(strncmp(s, names[i], strlen(names[i])), 0);
        /* "FA2_ERROR_CUDA" must not match by prefix a longer name. */
        assert_true(s[strlen(names[i])] == ':');
        for (size_t j = 0; j < i; j++)
            assert_string_not_equal(s, fa2_status_string((fa2_status_t)j));
    }
    assert_string_equal(fa2_status_string((fa2_status_t)23), "unknown fa2_status_t");
    assert_string_equal(fa2_status_string((fa2_status_t)-1), "unknown fa2_status_t");
    assert_string_equal(fa2_status_string((fa2_status_t)1000), "unknown fa2_status_t");
}

static fa2_status_t fail_plan_null(void)
{
    fa2_problem_t p;
    fa2_device_info_t d = h200();
    fa2_problem_init(&p, FA2_DTYPE_BF16, 1, 16, 16, 1, 1, 64);
    return fa2_plan(&p, &d, NULL);
}

static fa2_status_t ok_plan(void)
{
    fa2_problem_t p;
    fa2_plan_t plan;
    fa2_device_info_t d = h200();
    fa2_problem_init(&p, FA2_DTYPE_BF16, 1, 16, 16, 1, 1, 64);
    return fa2_plan(&p, &d, &plan);
}

/* "" after a success, a message after a failure, "" again after the next success. */
static void test_last_error_lifecycle(void **state)
{
    const char *m;
    (void)state;
    assert_int_equal(ok_plan(), FA2_SUCCESS);
    assert_non_null(fa2_last_error());
    assert_string_equal(fa2_last_error(), "");
    assert_int_equal(fail_plan_null(), FA2_ERROR_NULL_POINTER);
    m = fa2_last_error();
    assert_non_null(strstr(m, "plan"));
    assert_non_null(strstr(m, "NULL"));
    assert_int_equal(ok_plan(), FA2_SUCCESS);
    assert_string_equal(fa2_last_error(), "");
    /* The pointer stays the same buffer: valid until the next call. */
    assert_ptr_equal(m, fa2_last_error());
}

/* fa2_status_string and fa2_version do not clear the message, so
 * printf("%s: %s", fa2_status_string(s), fa2_last_error()) is safe in any order. */
static void test_string_calls_keep_message(void **state)
{
    (void)state;
    assert_int_equal(fail_plan_null(), FA2_ERROR_NULL_POINTER);
    (void)fa2_status_string(FA2_ERROR_NULL_POINTER);
    (void)fa2_version();
    (void)fa2_last_error();
    assert_non_null(strstr(fa2_last_error(), "plan is NULL"));
}

/* int64 values are printed in full. */
static void test_message_prints_int64(void **state)
{
    fa2_problem_t p;
    fa2_device_info_t d = h200();
    fa2_plan_t plan;
    (void)state;
    fa2_problem_init(&p, FA2_DTYPE_FP16, INT64_MAX, INT64_MAX, INT64_MAX, INT64_MAX,
                     INT64_MAX, INT64_MAX);
    assert_int_equal(fa2_plan(&p, &d, &plan), FA2_ERROR_INVALID_SIZE);
    assert_true(strlen(fa2_last_error()) < 512);
    assert_non_null(strstr(fa2_last_error(), "batch=9223372036854775807"));
}

/* ---- per-thread message ----------------------------------------------------- */

typedef struct thread_arg_t {
    pthread_barrier_t *barrier;
    int64_t head_dim;  /* an unsupported head_dim, different per thread */
    int ok;            /* 1 when the thread saw only its own messages */
} thread_arg_t;

static void *thread_main(void *raw)
{
    thread_arg_t *a = raw;
    char want[64];
    fa2_problem_t p;
    fa2_device_info_t d = h200();
    fa2_plan_t plan;
    int ok = 1;

    /* A new thread starts with an empty message. */
    ok &= fa2_last_error()[0] == '\0';
    snprintf(want, sizeof want, "head_dim=%lld ", (long long)a->head_dim);
    fa2_problem_init(&p, FA2_DTYPE_FP16, 1, 16, 16, 1, 1, a->head_dim);
    for (int i = 0; i < 200; i++) {
        ok &= fa2_plan(&p, &d, &plan) == FA2_ERROR_UNSUPPORTED_HEAD_DIM;
        /* Everyone has failed once; now each reads while the others keep writing. */
        if (i == 0)
            pthread_barrier_wait(a->barrier);
        ok &= strstr(fa2_last_error(), want) != NULL;
    }
    a->ok = ok;
    return NULL;
}

static void test_message_is_per_thread(void **state)
{
    enum { N = 4 };
    pthread_t t[N];
    thread_arg_t args[N];
    pthread_barrier_t barrier;
    (void)state;

    /* The main thread's own failure must survive the other threads' failures. */
    assert_int_equal(fail_plan_null(), FA2_ERROR_NULL_POINTER);
    assert_int_equal(pthread_barrier_init(&barrier, NULL, N), 0);
    for (int i = 0; i < N; i++) {
        args[i].barrier = &barrier;
        args[i].head_dim = 300 + 8 * i;
        args[i].ok = 0;
        assert_int_equal(pthread_create(&t[i], NULL, thread_main, &args[i]), 0);
    }
    for (int i = 0; i < N; i++) {
        assert_int_equal(pthread_join(t[i], NULL), 0);
        assert_int_equal(args[i].ok, 1);
    }
    pthread_barrier_destroy(&barrier);
    assert_non_null(strstr(fa2_last_error(), "plan is NULL"));
}

/* ---- fa2_problem_init ------------------------------------------------------- */

static void test_problem_init_bshd(void **state)
{
    fa2_problem_t p;
    (void)state;
    memset(&p, 0xAB, sizeof p);
    fa2_problem_init(&p, FA2_DTYPE_BF16, 3, 100, 200, 16, 4, 72);
    assert_int_equal(p.struct_size, sizeof(fa2_problem_t));
    assert_int_equal(p.dtype, FA2_DTYPE_BF16);
    assert_int_equal(p.batch, 3);
    assert_int_equal(p.seqlen_q, 100);
    assert_int_equal(p.seqlen_k, 200);
    assert_int_equal(p.heads_q, 16);
    assert_int_equal(p.heads_kv, 4);
    assert_int_equal(p.head_dim, 72);
    assert_int_equal(p.causal, 0);
    assert_int_equal(p.window_left, -1);
    assert_int_equal(p.window_right, -1);
    assert_true(p.softmax_scale == 0.0f);
    assert_int_equal(p.reserved0, 0);
    /* Q and O: [3, 100, 16, 72] */
    assert_int_equal(p.q_head_stride, 72);
    assert_int_equal(p.q_seq_stride, 16 * 72);
    assert_int_equal(p.q_batch_stride, 100 * 16 * 72);
    assert_int_equal(p.o_head_stride, 72);
    assert_int_equal(p.o_seq_stride, 16 * 72);
    assert_int_equal(p.o_batch_stride, 100 * 16 * 72);
    /* K and V: [3, 200, 4, 72] */
    assert_int_equal(p.k_head_stride, 72);
    assert_int_equal(p.k_seq_stride, 4 * 72);
    assert_int_equal(p.k_batch_stride, 200 * 4 * 72);
    assert_int_equal(p.v_head_stride, 72);
    assert_int_equal(p.v_seq_stride, 4 * 72);
    assert_int_equal(p.v_batch_stride, 200 * 4 * 72);
}

static void test_problem_init_null_is_noop(void **state)
{
    (void)state;
    fa2_problem_init(NULL, FA2_DTYPE_FP16, 1, 1, 1, 1, 1, 64);
}

/* Strides whose product overflows do not wrap (fa2_plan reports the overflow). */
static void test_problem_init_huge_sizes(void **state)
{
    fa2_problem_t p;
    fa2_device_info_t d = h200();
    fa2_plan_t plan;
    (void)state;
    fa2_problem_init(&p, FA2_DTYPE_FP16, 4, FA2_MAX_SEQLEN, FA2_MAX_SEQLEN, INT32_MAX, INT32_MAX,
                     256);
    /* Saturated, not wrapped: a batch stride is never below a sequence stride. */
    assert_true(p.q_batch_stride >= p.q_seq_stride);
    assert_true(p.k_batch_stride >= p.k_seq_stride);
    assert_int_equal(p.q_batch_stride % 8, 0);
    assert_int_equal(fa2_plan(&p, &d, &plan), FA2_ERROR_SIZE_OVERFLOW);
}

/* ---- fa2_device_info_query -------------------------------------------------- */

static void test_device_query_null(void **state)
{
    (void)state;
    assert_int_equal(fa2_device_info_query(0, NULL), FA2_ERROR_NULL_POINTER);
    assert_non_null(strstr(fa2_last_error(), "info"));
}

/* No device index is negative or INT_MAX, with or without a GPU. */
static void test_device_query_bad_index(void **state)
{
    fa2_device_info_t info, poison;
    (void)state;
    memset(&info, 0xAB, sizeof info);
    poison = info;
    assert_int_equal(fa2_device_info_query(-1, &info), FA2_ERROR_NO_DEVICE);
    assert_true(fa2_last_error()[0] != '\0');
    assert_memory_equal(&info, &poison, sizeof info);
    assert_int_equal(fa2_device_info_query(INT_MAX, &info), FA2_ERROR_NO_DEVICE);
    assert_true(fa2_last_error()[0] != '\0');
    assert_memory_equal(&info, &poison, sizeof info);
}

/* Device 0: filled in on a GPU machine, NO_DEVICE (info untouched) elsewhere. */
static void test_device_query_zero(void **state)
{
    fa2_device_info_t info, poison;
    fa2_status_t s;
    (void)state;
    memset(&info, 0xAB, sizeof info);
    poison = info;
    s = fa2_device_info_query(0, &info);
    if (s == FA2_SUCCESS) {
        assert_int_equal(info.struct_size, sizeof info);
        assert_true(info.cc_major >= 1);
        assert_true(info.sm_count >= 1);
        assert_true(info.smem_per_block_optin >= 48 * 1024);
        assert_true(info.smem_per_sm >= info.smem_per_block_optin);
        assert_int_equal(info.reserved0, 0);
        assert_string_equal(fa2_last_error(), "");
    } else {
        int driver = -1;
        assert_int_equal(s, FA2_ERROR_NO_DEVICE);
        /* No driver at all must say so, not "driver version is insufficient". */
        if (cudaDriverGetVersion(&driver) == cudaSuccess && driver == 0)
            assert_non_null(strstr(fa2_last_error(), "no NVIDIA driver found"));
        else
            assert_non_null(strstr(fa2_last_error(), "cudaGetDeviceCount"));
        assert_memory_equal(&info, &poison, sizeof info);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_version),
        cmocka_unit_test(test_status_values_pinned),
        cmocka_unit_test(test_status_strings),
        cmocka_unit_test(test_last_error_lifecycle),
        cmocka_unit_test(test_string_calls_keep_message),
        cmocka_unit_test(test_message_prints_int64),
        cmocka_unit_test(test_message_is_per_thread),
        cmocka_unit_test(test_problem_init_bshd),
        cmocka_unit_test(test_problem_init_null_is_noop),
        cmocka_unit_test(test_problem_init_huge_sizes),
        cmocka_unit_test(test_device_query_null),
        cmocka_unit_test(test_device_query_bad_index),
        cmocka_unit_test(test_device_query_zero),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
