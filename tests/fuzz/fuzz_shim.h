/* FUZZ-ONLY: the state of cuda_shim.c, set and read by fuzz_plan.c. */
#ifndef FA2_FUZZ_SHIM_H
#define FA2_FUZZ_SHIM_H

#include "common/params.h"

typedef struct fuzz_shim_t {
    /* what the fakes return */
    int launch_error;   /* the launchers' status (a cudaError_t value) */
    int count_error;    /* cudaGetDeviceCount */
    int device_count;
    int attr_error;     /* cudaDeviceGetAttribute */
    int device_error;   /* cudaGetDevice */
    int attr[5];        /* cc major, cc minor, SMs, smem optin, smem per SM */
    int memcpy_error;   /* cudaMemcpy (fa2_varlen_check's copy) */
    const char *records;      /* the fake device address of the metadata records */
    int64_t bad_sequence;     /* the record that holds bad_check (others 0) */
    int32_t bad_check;
    /* what the launchers saw */
    int fwd_calls, bwd_calls, cache_calls, combine_calls;
    fa2_params_t fwd;
    fa2_params_t bwd;
    fa2_cache_write_params_t cache;
    fa2_combine_params_t combine;
} fuzz_shim_t;

extern fuzz_shim_t g_shim;

#endif
