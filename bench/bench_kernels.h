/* Small CUDA helpers for fa2_bench: random inputs, the baseline's row softmax, and a
 * relative L2 error. C-callable; each returns a cudaError_t value (0 = success). */
#ifndef FA2_BENCH_KERNELS_H
#define FA2_BENCH_KERNELS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Fills n 16-bit elements (bf16 if is_bf16, else fp16) with values uniform in
 * [-1, 1), from a counter-based hash of (seed, index): never zeros, reproducible. */
int bench_fill_uniform(void *data, int64_t n, int is_bf16, uint64_t seed, void *stream);

/* Row softmax for `heads` matrices S [seqlen_q, seqlen_k] (row-major, contiguous,
 * 16-bit), written to P of the same shape. With causal, key j is masked for query i
 * when j > i + seqlen_k - seqlen_q (bottom-right aligned); masked P entries are 0,
 * a fully masked row is all 0. S already holds the scaled scores. */
int bench_softmax_rows(const void *s, void *p, int64_t heads, int64_t seqlen_q,
                       int64_t seqlen_k, int causal, int is_bf16, void *stream);

/* *rel = ||a - ref||_2 / ||ref||_2 over n 16-bit elements, accumulated in double.
 * Synchronizes `stream`. NaN in either input gives NaN. */
int bench_rel_l2(const void *a, const void *ref, int64_t n, int is_bf16, double *rel,
                 void *stream);

/* Launch floors for bench/host_overhead.c: one launch of an empty kernel whose
 * parameters are 8 bytes (big_params = 0) or 1 KiB (1, the size class of libfa2's
 * parameter structs), 1 block of 32 threads, on `stream`; the launch status. */
int bench_empty_launch(int big_params, void *stream);

/* The shared-memory attribute step libfa2 takes before each launch of a kernel that
 * needs more than 48 KiB: cudaGetFuncBySymbol and cudaFuncSetAttribute (max dynamic
 * shared memory = smem_bytes) on an empty kernel; its status. */
int bench_set_smem_attribute(int smem_bytes);

#ifdef __cplusplus
}
#endif

#endif
