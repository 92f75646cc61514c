/*
 * libfa2 — FlashAttention-2 as a CUDA kernel library with a plain C API.
 *
 * The one public header. Plain C (C99, C11, C++), no CUDA types: a stream is a
 * `void *` holding a `cudaStream_t`, tensors are device pointers, sizes are int64_t,
 * strides are in elements.
 *
 * Usage: describe the problem (fa2_problem_init), describe the device
 * (fa2_device_info_query, or fill a fa2_device_info_t by hand), plan once (fa2_plan),
 * then run as often as you like (fa2_forward). A plan holds no resources: copy it,
 * keep it, or drop it.
 *
 * Errors: every function returns a fa2_status_t. On failure nothing is written to any
 * output (tensors, plan, info); fa2_last_error() then returns a message naming the
 * field and the value. The library never prints, aborts or exits.
 *
 * Threading: every function is thread-safe. fa2_last_error() is per thread.
 *
 * MIT License — see LICENSE.
 */
#ifndef FA2_H
#define FA2_H

#include <stddef.h>
#include <stdint.h>

#define FA2_VERSION_MAJOR 0
#define FA2_VERSION_MINOR 1
#define FA2_VERSION_PATCH 0
/* MAJOR*10000 + MINOR*100 + PATCH, comparable with fa2_version(). */
#define FA2_VERSION_NUMBER \
    (FA2_VERSION_MAJOR * 10000 + FA2_VERSION_MINOR * 100 + FA2_VERSION_PATCH)

#if defined(_WIN32) && defined(FA2_BUILDING_SHARED)
#define FA2_API __declspec(dllexport)
#elif defined(__GNUC__) && defined(FA2_BUILDING_LIBRARY)
#define FA2_API __attribute__((visibility("default")))
#else
#define FA2_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------
 * Status codes. Values are pinned: they never change between releases.
 * ------------------------------------------------------------------------------ */
typedef enum fa2_status_t {
    FA2_SUCCESS = 0,
    FA2_ERROR_NULL_POINTER = 1,          /* a required pointer argument is NULL */
    FA2_ERROR_STRUCT_SIZE = 2,           /* struct_size unknown: not set by an init call */
    FA2_ERROR_INVALID_SIZE = 3,          /* batch/seqlen/heads out of range */
    FA2_ERROR_SIZE_OVERFLOW = 4,         /* an extent or offset does not fit in int64 */
    FA2_ERROR_UNSUPPORTED_DTYPE = 5,     /* dtype is not FA2_DTYPE_FP16/BF16 */
    FA2_ERROR_UNSUPPORTED_HEAD_DIM = 6,  /* head_dim not a multiple of 8 in [8, 256] */
    FA2_ERROR_HEADS_MISMATCH = 7,        /* heads_q is not a multiple of heads_kv */
    FA2_ERROR_BAD_STRIDE = 8,            /* negative stride or one not a multiple of 8 */
    FA2_ERROR_MISALIGNED = 9,            /* a tensor pointer is not 16-byte aligned */
    FA2_ERROR_BAD_WINDOW = 10,           /* window_left/right < -1, or conflicting with causal */
    FA2_ERROR_BAD_SCALE = 11,            /* softmax_scale negative, NaN or infinite */
    FA2_ERROR_UNSUPPORTED_DEVICE = 12,   /* compute capability below 8.0 */
    FA2_ERROR_SHARED_MEMORY = 13,        /* the tiles do not fit the device's shared memory */
    FA2_ERROR_WORKSPACE = 14,            /* workspace missing or smaller than the plan needs */
    FA2_ERROR_NO_DEVICE = 15,            /* no CUDA device, or the device index is invalid */
    FA2_ERROR_CUDA = 16,                 /* the CUDA runtime reported an error */
    FA2_ERROR_OVERLAP = 17,              /* an output overlaps an input, another output,
                                            or itself (a layout with repeated addresses) */
    FA2_ERROR_BAD_PLAN = 18,             /* the plan was changed after fa2_plan made it */
    FA2_ERROR_DEVICE_MISMATCH = 19,      /* the current device is not the kind the plan
                                            was made for */
    FA2_ERROR_RESERVED = 20,             /* a reserved field is not zero */
    FA2_ERROR_UNSUPPORTED = 21,          /* a combination this version does not run (yet),
                                            e.g. a packed plan given to fa2_forward */
    FA2_ERROR_BAD_METADATA = 22          /* a packed batch's device metadata failed a check
                                            on the GPU (fa2_varlen_check says which) */
} fa2_status_t;

/* Limits that fa2_plan enforces (every accepted value runs correctly; see
 * docs/reliability.md, "Limits"). Sequence lengths: the kernels sum a row's keys (and,
 * in the backward, a key's query rows) in fp32 tensor-core accumulators, whose error
 * grows with the count (docs/reliability.md gives the measurement behind the bound);
 * the bound also keeps every row, key and window sum in 32 bits. The softmax
 * scale is bounded so that scale * log2(e) * Q.K of fp16 inputs (|Q.K| <= 65504^2 *
 * 256) stays finite. */
#define FA2_MAX_SEQLEN 4194304            /* 2^22: seqlen_q, seqlen_k */
#define FA2_MAX_WINDOW 2147483647         /* window_left, window_right */
#define FA2_MAX_SOFTMAX_SCALE 65536.0f    /* softmax_scale */
#define FA2_MAX_COMBINE_PARTS 65536       /* fa2_combine_problem_t.parts */
#define FA2_MAX_SPLITS 128                /* fa2_problem_t.max_splits */
#define FA2_MAX_SOFTCAP 65536.0f          /* fa2_problem_t.softcap */
#define FA2_MIN_SOFTCAP 1e-30f            /* the smallest softcap > 0: softmax_scale / softcap
                                             stays finite (a score of 0 then stays 0) */

typedef enum fa2_dtype_t {
    FA2_DTYPE_FP16 = 1, /* IEEE binary16 */
    FA2_DTYPE_BF16 = 2, /* bfloat16 */
    FA2_DTYPE_FP32 = 3  /* IEEE binary32: fa2_combine's partial results and output only */
} fa2_dtype_t;

/* Version of the library actually linked, as FA2_VERSION_NUMBER. Compare with the
 * macro to detect a header/library mismatch. */
FA2_API unsigned fa2_version(void);

/* The same as a static string, "MAJOR.MINOR.PATCH". Never NULL. */
FA2_API const char *fa2_version_string(void);

/* How the linked library was built, as a static one-line string: version, CUDA
 * runtime version, and the GPU code it carries, e.g. "libfa2 0.1.0; CUDA runtime
 * 13.0; kernels sm_80 sm_90a, PTX compute_80". The CUDA runtime inside libfa2.so
 * needs a driver at least as new as that runtime (CUDA 13.0: driver R580). Never NULL. */
FA2_API const char *fa2_build_info(void);

/* A static, never-NULL English name for a status ("FA2_ERROR_NULL_POINTER: ...").
 * Unknown values give "unknown fa2_status_t". */
FA2_API const char *fa2_status_string(fa2_status_t status);

/* The detailed message of the calling thread's most recent libfa2 call: "" after a
 * success, else e.g. "head_dim=300 is not supported (multiples of 8 from 8 to 256)".
 * The pointer is never NULL and stays valid until the thread's next libfa2 call. */
FA2_API const char *fa2_last_error(void);

/* ---------------------------------------------------------------------------------
 * Device description. Query it from a device or fill it by hand (tests, planning
 * for a device other than the current one).
 * ------------------------------------------------------------------------------ */
typedef struct fa2_device_info_t {
    size_t struct_size;           /* sizeof(fa2_device_info_t), set by the caller */
    int32_t cc_major;             /* compute capability, e.g. 9 */
    int32_t cc_minor;             /* e.g. 0 */
    int32_t sm_count;             /* streaming multiprocessors */
    int32_t reserved0;            /* zero */
    int64_t smem_per_block_optin; /* bytes of shared memory one block may opt in to */
    int64_t smem_per_sm;          /* bytes of shared memory per multiprocessor */
} fa2_device_info_t;

/* Fills *info for CUDA device `device` (an index as for cudaSetDevice).
 * Returns FA2_ERROR_NULL_POINTER, FA2_ERROR_NO_DEVICE (no driver/device, or bad
 * index), FA2_ERROR_CUDA. Sets info->struct_size itself. Does not change the current
 * device. */
FA2_API fa2_status_t fa2_device_info_query(int device, fa2_device_info_t *info);

/* ---------------------------------------------------------------------------------
 * Problem description.
 *
 * Layout: Q [batch, seqlen_q, heads_q, head_dim], K and V [batch, seqlen_k, heads_kv,
 * head_dim], O like Q, all of `dtype`; LSE float32, contiguous [batch, heads_q,
 * seqlen_q]. Strides are in elements and free (BSHD, BHSD or any other order); the
 * head_dim stride is 1. Strides must be non-negative multiples of 8 (16-byte rows).
 * Inputs may repeat rows (a zero stride broadcasts Q, K or V); O may not: O's strides
 * must give every element its own address (else FA2_ERROR_OVERLAP). The backward
 * writes dQ with Q's strides and dK, dV with K's and V's, so it needs the same of
 * them (plan->bwd_status says so when they repeat; sum a broadcast yourself).
 * Reserved fields must be zero (FA2_ERROR_RESERVED).
 *
 * Masking: query row i may attend to key column j when
 *     j >= i + (seqlen_k - seqlen_q) - window_left   (if window_left  >= 0)
 *     j <= i + (seqlen_k - seqlen_q) + window_right  (if window_right >= 0)
 * i.e. windows are aligned to the bottom-right corner, as in FlashAttention-2 >= 2.1.
 * `causal` is window_right = 0; with causal set, window_right must be -1 or 0.
 * Rows that may attend to nothing (and every row when seqlen_k = 0) give O = 0 and
 * LSE = -inf.
 * ------------------------------------------------------------------------------ */
typedef struct fa2_problem_t {
    size_t struct_size; /* sizeof(fa2_problem_t), set by fa2_problem_init */
    fa2_dtype_t dtype;
    int32_t causal;          /* 0 or 1 */
    int64_t batch;           /* >= 1 */
    int64_t seqlen_q;        /* >= 1, <= FA2_MAX_SEQLEN */
    int64_t seqlen_k;        /* >= 0, <= FA2_MAX_SEQLEN */
    int64_t heads_q;         /* >= 1 */
    int64_t heads_kv;        /* >= 1, divides heads_q (MQA/GQA) */
    int64_t head_dim;        /* multiple of 8 in [8, 256] */
    int64_t window_left;     /* -1 = unbounded, else <= FA2_MAX_WINDOW */
    int64_t window_right;    /* -1 = unbounded, else <= FA2_MAX_WINDOW */
    float softmax_scale;     /* 0 = 1/sqrt(head_dim); else in (0, FA2_MAX_SOFTMAX_SCALE] */
    int32_t reserved0;       /* zero */
    /* strides in elements: batch, sequence, head (head_dim stride is 1) */
    int64_t q_batch_stride, q_seq_stride, q_head_stride;
    int64_t k_batch_stride, k_seq_stride, k_head_stride;
    int64_t v_batch_stride, v_seq_stride, v_head_stride;
    int64_t o_batch_stride, o_seq_stride, o_head_stride;
    int32_t deterministic;   /* 1: backward bit-identical run to run (see fa2_backward) */
    int32_t reserved1;       /* zero */
    /* Packed variable-length batch (see below); 0 and 0 for a dense batch. */
    int64_t total_q;         /* rows of packed Q and O, >= seqlen_q, <= 2^31 - 1 */
    int64_t total_k;         /* rows of packed K and V, >= seqlen_k, <= 2^31 - 1; 0 when paged */
    /* Paged K/V of a packed batch (see below); 0, 0, 0 when K/V are not paged. */
    int64_t page_size;       /* key rows per page, in [1, FA2_MAX_SEQLEN] */
    int64_t num_pages;       /* pages K and V hold, in [1, 2^31 - 1] */
    int64_t pages_per_seq;   /* page-table entries per sequence, >= ceil(seqlen_k / page_size) */
    /* Decode (see below): at most this many key splits per (sequence, kv head) when the
     * decode kernel runs, in [0, FA2_MAX_SPLITS]; 0 or 1: no splits (no workspace). */
    int64_t max_splits;
    /* 1: key splits of a fixed length, from the planned seqlen_k and max_splits only, so
     * a sequence's output is bit-identical whatever else is in the batch, and under any
     * plan of the same seqlen_k and max_splits (batch sizes differing). 0: splits sized
     * to fill the device. */
    int32_t batch_invariant;
    int32_t reserved2;       /* zero */
    /* Score variants (see below); 0 = off. Forward and backward on every path (a paged
     * cache has no backward); their tensors go with fa2_forward_with / _backward_with. */
    float softcap;           /* 0, or in [FA2_MIN_SOFTCAP, FA2_MAX_SOFTCAP]: logit softcap */
    int32_t alibi;           /* 0 or 1: per-head ALiBi slopes, passed at each call */
    int32_t sinks;           /* 0 or 1: per-head attention-sink logits, passed at each call */
    int32_t reserved3;       /* zero */
    /* ALiBi: sequence b's slopes start alibi_batch_stride floats after sequence 0's.
     * 0 (default, and the only value without alibi): one [heads_q] set for every
     * sequence; heads_q: a [batch, heads_q] tensor. In [0, 2^31 - 1]. */
    int64_t alibi_batch_stride;
} fa2_problem_t;

/* Score variants. For query row i, key j, query head h (a packed batch: within the
 * sequence):
 *     x = softmax_scale * q_i . k_j
 *     s = softcap * tanh(x / softcap)                 (softcap > 0; else s = x)
 *     s -= slope_h * |i + seqlen_k - seqlen_q - j|    (alibi: bottom-right aligned)
 *     LSE_i = log(exp(sink_h) + sum_j exp(s_ij)),  O_i = sum_j exp(s_ij - LSE_i) v_j
 * over the keys the mask leaves visible, sink_h = -inf without sinks. The kernels take
 * tanh from the special-function unit (relative error about 2^-11, as FlashAttention
 * does) and keep the scores in units of softcap (else softmax_scale). The returned LSE
 * includes the sink; a row that sees no key has O = 0 and LSE = sink_h. The backward
 * adds softcap's derivative (1 - tanh^2) and writes dsinks_h = -sum over the batch and
 * rows of exp(sink_h - LSE_i) * sum_c dO_ic O_ic (summed in a fixed order: the same
 * bits every run, in both modes). The sinks and dsinks are float32 [heads_q], the slopes
 * float32 [heads_q] or, with alibi_batch_stride, one such row per sequence: device
 * tensors passed with the call (fa2_forward_with, fa2_backward_with). */

/* Packed variable-length batches (total_q >= 1): the sequences lie one after another
 * in Q, K, V and O, laid out [total_q, heads_q, head_dim] (Q, O) and [total_k,
 * heads_kv, head_dim] (K, V), strides free as above with every batch stride 0.
 * Sequence b (0 <= b < batch) has queries cu_seqlens_q[b] .. cu_seqlens_q[b+1] - 1
 * and keys cu_seqlens_k[b] .. cu_seqlens_k[b+1] - 1, or the first seqused_k[b] of those
 * when seqused_k is given (fa2_forward_varlen). `batch`, `seqlen_q` and `seqlen_k` are
 * upper bounds, fixed when planning: the most sequences, and the longest query and key
 * sequence. A call always runs `batch` sequences: pad with empty ones (repeat the last
 * offset). Masks and windows apply per sequence, bottom-right aligned. LSE: float32
 * [heads_q, total_q], natural log: row r of the packed Q, head h, at h * total_q + r.
 * The metadata is checked on the GPU, sequence by sequence, by the attention kernels
 * themselves (fa2_varlen_check_t lists the checks): a sequence that fails one is
 * skipped, its O and LSE rows (and in the backward its dQ, dK and dV rows) not written,
 * and the forward records which check it failed in the workspace; the other sequences
 * are computed. fa2_varlen_check reads the record. The backward: fa2_backward_varlen
 * with the forward's offsets (checked by the forward first); it skips, without a record,
 * a sequence whose offsets or lengths leave the planned bounds or the tensors, and
 * writes dQ rows that belong to no sequence (e.g. spare rows past the last offset) as 0.
 *
 * Paged K/V (page_size >= 1, a packed batch): K and V are [num_pages, page_size,
 * heads_kv, head_dim] with free strides (k/v_batch_stride is the page stride, k/v_seq_stride
 * the row stride), total_k = 0. A page table, [batch, pages_per_seq] int32 page ids on the
 * device, lists each sequence's pages in order: key j of sequence b is row j % page_size of
 * page page_table[b * pages_per_seq + j / page_size]. seqused_k gives each sequence's key
 * count (cu_seqlens_k is not read). Pages may be shared between sequences and come in any
 * order; any page size and any page stride run (which layouts run fastest:
 * docs/performance.md, "Paged KV cache"). A page id of a
 * sequence's keys outside [0, num_pages) fails its check (FA2_VARLEN_PAGE_ID). Forward
 * only (plan->bwd_status = FA2_ERROR_UNSUPPORTED). */

/* The checks a packed batch's device metadata gets, per sequence b, in this order
 * (values pinned). fa2_varlen_check reports the first one a sequence failed. */
typedef enum fa2_varlen_check_t {
    FA2_VARLEN_OK = 0,
    FA2_VARLEN_CU_SEQLENS_Q = 1, /* cu_seqlens_q[b] negative, not 0 for b = 0, above
                                    cu_seqlens_q[b + 1], or cu_seqlens_q[b + 1] > total_q */
    FA2_VARLEN_SEQLEN_Q = 2,     /* cu_seqlens_q[b + 1] - cu_seqlens_q[b] > seqlen_q (the
                                    planned longest query sequence) */
    FA2_VARLEN_CU_SEQLENS_K = 3, /* the same for cu_seqlens_k and total_k (not paged) */
    FA2_VARLEN_SEQLEN_K = 4,     /* the key count (seqused_k[b], or from cu_seqlens_k)
                                    negative or > seqlen_k (the planned longest) */
    FA2_VARLEN_SEQUSED_K = 5,    /* seqused_k[b] above the keys cu_seqlens_k gives the
                                    sequence (not paged) */
    FA2_VARLEN_PAGE_ID = 6       /* a page-table entry for one of the sequence's keys
                                    outside [0, num_pages) */
} fa2_varlen_check_t;

/* Decode: when the query heads that share a kv head times the (planned) query tokens
 * are at most 16 (one query token with GQA groups up to 16, or up to 16 tokens of
 * speculative decoding with MHA) and the head-dim bucket is 64, 128 or 256, fa2_plan
 * picks the decode kernel (plan->splits >= 1): it reads each K/V row once per kv
 * head. With max_splits > 1 it may also split each sequence's keys across blocks so
 * that a small batch fills the GPU (plan->splits splits, chosen from the planned
 * shape and the device, fixed for the plan: graph replays keep it); the splits' partial
 * results then live in the workspace (plan->workspace_bytes) and are merged on the GPU
 * before the call returns its O and LSE. */

/* Sets struct_size, the sizes, dtype, contiguous BSHD strides for Q, K, V and O,
 * softmax_scale = 0 (1/sqrt(d)), causal = 0, windows = -1, deterministic = 0.
 * Does not validate: that is
 * fa2_plan's job. A NULL `problem` is a harmless no-op. */
FA2_API void fa2_problem_init(fa2_problem_t *problem, fa2_dtype_t dtype, int64_t batch,
                              int64_t seqlen_q, int64_t seqlen_k, int64_t heads_q,
                              int64_t heads_kv, int64_t head_dim);

/* fa2_problem_init for a packed variable-length batch: at most `batch` sequences, the
 * longest max_seqlen_q queries and max_seqlen_k keys, Q and O contiguous [total_q,
 * heads_q, head_dim], K and V contiguous [total_k, heads_kv, head_dim] (every batch
 * stride 0), other fields as fa2_problem_init sets them. Does not validate. A NULL
 * `problem` is a harmless no-op. */
FA2_API void fa2_problem_init_varlen(fa2_problem_t *problem, fa2_dtype_t dtype,
                                     int64_t batch, int64_t max_seqlen_q,
                                     int64_t max_seqlen_k, int64_t total_q, int64_t total_k,
                                     int64_t heads_q, int64_t heads_kv, int64_t head_dim);

/* fa2_problem_init_varlen with a paged K/V cache: K and V contiguous [num_pages,
 * page_size, heads_kv, head_dim] (k/v_batch_stride the page stride), total_k = 0, and
 * pages_per_seq page-table entries per sequence. Does not validate. A NULL `problem` is
 * a harmless no-op. */
FA2_API void fa2_problem_init_paged(fa2_problem_t *problem, fa2_dtype_t dtype,
                                    int64_t batch, int64_t max_seqlen_q,
                                    int64_t max_seqlen_k, int64_t total_q, int64_t heads_q,
                                    int64_t heads_kv, int64_t head_dim, int64_t page_size,
                                    int64_t num_pages, int64_t pages_per_seq);

/* ---------------------------------------------------------------------------------
 * Plan: what fa2_plan chose, and why.
 * ------------------------------------------------------------------------------ */
typedef enum fa2_tile_rule_t {
    FA2_RULE_SEED_SRAM = 1,     /* the seed bound ceil(M/(4d)) itself */
    FA2_RULE_HEAD_DIM = 2,      /* Bc <= d (seed: Bc = min(ceil(M/(4d)), d)) */
    FA2_RULE_MMA_MULTIPLE = 3,  /* rounded down to a multiple of 16 (mma tile) */
    FA2_RULE_KERNEL_TILE = 4    /* capped at the compiled kernel's tile (registers, warps) */
} fa2_tile_rule_t;

/* The forward kernel a plan runs (plan->fwd_kernel). fa2_forward launches exactly this
 * one; nothing is chosen again at the call. */
typedef enum fa2_fwd_kernel_t {
    FA2_FWD_KERNEL_MMA = 1,              /* mma.sync (every device), the bucket's main tile */
    FA2_FWD_KERNEL_MMA_COMPACT = 2,      /* mma.sync, the bucket's smaller tile, for devices
                                            with less shared memory */
    FA2_FWD_KERNEL_WGMMA = 3,            /* Hopper wgmma, K and V by TMA (dense or packed) */
    FA2_FWD_KERNEL_WGMMA_PAGED_TMA = 4,  /* Hopper wgmma, pages by TMA boxes of
                                            plan->page_box_rows rows */
    FA2_FWD_KERNEL_WGMMA_PAGED_COPY = 5, /* Hopper wgmma, pages by cp.async */
    FA2_FWD_KERNEL_WGMMA_PRODUCER = 6,   /* Hopper wgmma, a producer warpgroup loading K and V
                                            for two math warpgroups (dense or paged) */
    FA2_FWD_KERNEL_DECODE = 7            /* at most 16 query tokens: the decode kernel,
                                            plan->splits splits */
} fa2_fwd_kernel_t;

/* The backward kernels a plan runs (plan->bwd_kernel). */
typedef enum fa2_bwd_kernel_t {
    FA2_BWD_KERNEL_MMA = 1,         /* mma.sync (every device), the bucket's main tiles */
    FA2_BWD_KERNEL_MMA_COMPACT = 2, /* mma.sync, the bucket's smaller tiles */
    FA2_BWD_KERNEL_WGMMA = 3        /* Hopper wgmma */
} fa2_bwd_kernel_t;

/* The score code compiled into the kernels a plan runs (plan->fwd_scores, bwd_scores). */
typedef enum fa2_scores_t {
    FA2_SCORES_PLAIN = 0,           /* no softcap, no ALiBi (sinks need no score code) */
    FA2_SCORES_BOUNDED_SOFTCAP = 1, /* Hopper, bf16 softcap <= 50 without ALiBi: a fixed
                                       offset instead of a running maximum */
    FA2_SCORES_GENERAL = 2          /* softcap and/or ALiBi */
} fa2_scores_t;

typedef struct fa2_plan_t {
    size_t struct_size;          /* sizeof(fa2_plan_t), written by fa2_plan */
    fa2_problem_t problem;       /* validated copy, softmax_scale resolved */
    int64_t sram_elements;       /* M: shared memory per block, in dtype elements */
    int64_t seed_br;             /* ceil(M/(4d)) */
    int64_t seed_bc;             /* min(ceil(M/(4d)), d) */
    int32_t block_m;             /* Br: query rows per thread block */
    int32_t block_n;             /* Bc: key/value rows per inner step */
    int32_t block_m_rule;        /* fa2_tile_rule_t that fixed block_m */
    int32_t block_n_rule;        /* fa2_tile_rule_t that fixed block_n */
    int32_t head_dim_bucket;     /* compiled head dim the problem runs in (32..256) */
    int32_t warps;               /* warps per thread block */
    int64_t grid_blocks;         /* thread blocks: batch * heads_q * ceil(seqlen_q/Br) */
    int64_t smem_bytes;          /* dynamic shared memory per block */
    int64_t workspace_bytes;     /* caller-provided scratch the forward needs: 0 for a
                                    dense batch; a packed one: 4 * batch, where each call
                                    writes its metadata checks (fa2_varlen_check) */
    /* backward (fa2_backward) */
    int32_t bwd_block_n;         /* keys per thread block of the dK/dV kernel */
    int32_t bwd_block_m;         /* queries per inner step of the dK/dV kernel */
    int32_t bwd_dq_block_m;      /* queries per thread block of the dQ kernel (when one
                                    runs: deterministic mode, or bwd_arch 90 at bucket 256) */
    int32_t bwd_dq_block_n;      /* keys per inner step of the dQ kernel */
    int64_t bwd_smem_bytes;      /* dynamic shared memory per block, larger of the two */
    int64_t bwd_workspace_bytes; /* caller-provided scratch fa2_backward needs */
    int32_t bwd_supported;       /* 1: fa2_backward can run this plan; 0: see bwd_status */
    int32_t bwd_status;          /* FA2_SUCCESS, or what fa2_backward will return for this
                                    plan: FA2_ERROR_SHARED_MEMORY (tiles too large for the
                                    device), FA2_ERROR_INVALID_SIZE (a backward grid over
                                    2^31-1 blocks), FA2_ERROR_SIZE_OVERFLOW (workspace),
                                    FA2_ERROR_OVERLAP (Q's, K's or V's strides repeat an
                                    address, so dQ, dK or dV could not be written) */
    int32_t fwd_arch;            /* forward kernel family: 90 = Hopper wgmma kernel (sm_90
                                    devices, head dims 64/128/256 buckets), 80 = mma.sync
                                    kernel (every device) */
    int32_t bwd_arch;            /* backward kernel family: 90 = Hopper wgmma kernels
                                    (sm_90, head-dim buckets 64/128/256, both modes),
                                    80 = mma.sync */
    int32_t splits;              /* 0: the forward runs the prefill kernels; n >= 1: the
                                    decode kernel (at most 16 query tokens), each
                                    sequence's keys in n splits merged after (n > 1 needs
                                    the workspace). grid_blocks and smem_bytes are then
                                    the decode kernel's */
    int32_t fwd_kernel;          /* fa2_fwd_kernel_t: the forward kernel that runs */
    int32_t fwd_scores;          /* fa2_scores_t: its score code */
    int32_t page_box_rows;       /* FA2_FWD_KERNEL_WGMMA_PAGED_TMA: rows per TMA box, else 0 */
    int32_t decode_stages;       /* FA2_FWD_KERNEL_DECODE: K/V tiles in flight per warp */
    int32_t split_tiles;         /* FA2_FWD_KERNEL_DECODE: key tiles per split in
                                    batch-invariant mode, else 0 (each sequence's tiles
                                    divided evenly over the splits) */
    int32_t bwd_kernel;          /* fa2_bwd_kernel_t: the backward kernels that run */
    int32_t bwd_scores;          /* fa2_scores_t of the backward kernels: PLAIN or GENERAL */
    int64_t bwd_accum_offset;    /* where the fp32 dQ accumulator lies in the backward's
                                    workspace, or 0: dQ by a dQ kernel, without atomics */
    int64_t split_rows;          /* splits > 1: the workspace holds the splits' fp32 LSE */
    int64_t split_lse_offset;    /* [splits, heads_q, split_rows] from byte split_lse_offset */
    int64_t split_o_offset;      /* and O [splits, split_rows, heads_q, head_dim] from here */
    fa2_device_info_t device;    /* the device the plan was made for (a copy) */
} fa2_plan_t;

/* Validates `problem` against `device` and chooses the kernel and its tiles.
 * On success fills *plan (struct_size included). On failure *plan is untouched and
 * the status says which check failed: FA2_ERROR_NULL_POINTER, FA2_ERROR_STRUCT_SIZE,
 * FA2_ERROR_INVALID_SIZE, FA2_ERROR_SIZE_OVERFLOW, FA2_ERROR_UNSUPPORTED_DTYPE,
 * FA2_ERROR_UNSUPPORTED_HEAD_DIM, FA2_ERROR_HEADS_MISMATCH, FA2_ERROR_BAD_STRIDE,
 * FA2_ERROR_BAD_WINDOW, FA2_ERROR_BAD_SCALE, FA2_ERROR_UNSUPPORTED_DEVICE,
 * FA2_ERROR_SHARED_MEMORY, FA2_ERROR_OVERLAP (O's strides), FA2_ERROR_RESERVED; a packed
 * batch's total_q / total_k out of range: FA2_ERROR_INVALID_SIZE, its batch strides not 0:
 * FA2_ERROR_BAD_STRIDE.
 * Pure host code: needs no GPU. */
FA2_API fa2_status_t fa2_plan(const fa2_problem_t *problem, const fa2_device_info_t *device,
                              fa2_plan_t *plan);

/* Writes one line that says what `plan` runs and why, for an engine's log: the forward
 * kernel, its tile, shared memory, grid and score code, why that kernel family and why
 * the decode kernel runs or not; the backward kernels. Into text[0..size), cut to fit
 * and NUL-terminated; *length (when not NULL) gets the whole line's length, so a call
 * with size 0 (text may be NULL) sizes the buffer. The words are for people: their
 * wording may change between versions. Pure host code. On failure text and *length are
 * untouched. Returns FA2_ERROR_NULL_POINTER (plan; text when size > 0),
 * FA2_ERROR_STRUCT_SIZE, FA2_ERROR_BAD_PLAN (the plan is not what fa2_plan made). */
FA2_API fa2_status_t fa2_plan_describe(const fa2_plan_t *plan, char *text, size_t size,
                                       size_t *length);

/* Runs the fused forward pass O = softmax(scale * Q K^T + mask) V on `stream`
 * (a cudaStream_t; NULL = the legacy default stream), asynchronously: returns once
 * the kernel is queued. q, k, v, o are device pointers laid out as plan->problem says,
 * 16-byte aligned. `lse` (float32 [batch, heads_q, seqlen_q], 4-byte aligned) is
 * optional: NULL skips it. `workspace` may be NULL when plan->workspace_bytes is 0.
 * The pointers must stay valid until the work on `stream` completes.
 * Before anything is queued the call re-checks the plan (FA2_ERROR_BAD_PLAN when any
 * field differs from what fa2_plan makes of plan->problem and plan->device), checks
 * that the current device matches plan->device (compute capability and shared
 * memory; FA2_ERROR_DEVICE_MISMATCH) and that o and lse overlap neither each other nor
 * q, k, v (FA2_ERROR_OVERLAP). An error the application left pending in the CUDA
 * runtime is neither reported nor cleared. Capturable in a CUDA graph: no
 * synchronisation, no allocation.
 * Returns FA2_ERROR_NULL_POINTER, FA2_ERROR_STRUCT_SIZE (plan not from fa2_plan),
 * FA2_ERROR_BAD_PLAN, FA2_ERROR_UNSUPPORTED (a packed plan: see fa2_forward_varlen),
 * FA2_ERROR_DEVICE_MISMATCH, FA2_ERROR_MISALIGNED, FA2_ERROR_OVERLAP,
 * FA2_ERROR_WORKSPACE, FA2_ERROR_NO_DEVICE, FA2_ERROR_CUDA (the launch failed; the
 * message carries the CUDA error string). */
FA2_API fa2_status_t fa2_forward(const fa2_plan_t *plan, const void *q, const void *k,
                                 const void *v, void *o, float *lse, void *workspace,
                                 size_t workspace_bytes, void *stream);

/* fa2_forward for a packed variable-length batch (plan->problem.total_q >= 1; see
 * fa2_problem_t): cu_seqlens_q and cu_seqlens_k are device arrays of batch + 1 int32
 * offsets (4-byte aligned); seqused_k (batch int32, or NULL) gives each sequence's key
 * count. The call reads them on the GPU only: no host synchronisation and no choice
 * from their values, so it can be captured in a CUDA graph once and replayed with new
 * offsets and new tensor contents (the pointers, the plan and the stream fixed). The
 * same checks and statuses as fa2_forward, and FA2_ERROR_NULL_POINTER for a missing
 * cu_seqlens_q or cu_seqlens_k, FA2_ERROR_MISALIGNED for a misaligned one,
 * FA2_ERROR_UNSUPPORTED for a dense plan (call fa2_forward). fa2_forward refuses a
 * packed plan the same way. A paged plan needs page_table ([batch, pages_per_seq]
 * int32) and seqused_k (FA2_ERROR_NULL_POINTER), reads no cu_seqlens_k; any other plan
 * needs page_table NULL (FA2_ERROR_UNSUPPORTED). `workspace` (plan->workspace_bytes,
 * 4-byte aligned, overlapping no output) receives the metadata checks: its first batch
 * int32 are, after the call has run, 0 for each sequence that passed and the
 * fa2_varlen_check_t it failed otherwise. Every call rewrites them (nothing to reset
 * between graph replays); copy them yourself or call fa2_varlen_check. */
FA2_API fa2_status_t fa2_forward_varlen(const fa2_plan_t *plan, const void *q, const void *k,
                                        const void *v, void *o, float *lse,
                                        const int32_t *cu_seqlens_q,
                                        const int32_t *cu_seqlens_k, const int32_t *seqused_k,
                                        const int32_t *page_table, void *workspace,
                                        size_t workspace_bytes, void *stream);

/* Every tensor of one forward call, for fa2_forward_with: the arguments of fa2_forward
 * (a dense plan) or fa2_forward_varlen (a packed one), and those of the score variants.
 * Make it with fa2_forward_args_init (all NULL / 0, struct_size set), then fill it. */
typedef struct fa2_forward_args_t {
    size_t struct_size; /* sizeof(fa2_forward_args_t), set by fa2_forward_args_init */
    const void *q;
    const void *k;
    const void *v;
    void *o;
    float *lse;                  /* optional */
    const int32_t *cu_seqlens_q; /* packed plans only (see fa2_forward_varlen) */
    const int32_t *cu_seqlens_k;
    const int32_t *seqused_k;
    const int32_t *page_table;
    const float *alibi_slopes;   /* [heads_q] float32: exactly when the plan has alibi */
    const float *sinks;          /* [heads_q] float32: exactly when the plan has sinks */
    void *workspace;
    size_t workspace_bytes;
    void *stream;                /* a cudaStream_t; NULL = the legacy default stream */
} fa2_forward_args_t;

/* Zeroes *args and sets its struct_size. A NULL `args` is a harmless no-op. */
FA2_API void fa2_forward_args_init(fa2_forward_args_t *args);

/* fa2_forward (dense plans) or fa2_forward_varlen (packed plans) with its tensors in
 * one struct: the same checks, statuses and behaviour, and FA2_ERROR_STRUCT_SIZE for
 * args not from fa2_forward_args_init, FA2_ERROR_UNSUPPORTED for a packed plan's
 * metadata passed with a dense plan, or a score variant's tensor passed for a plan
 * without that variant. */
FA2_API fa2_status_t fa2_forward_with(const fa2_plan_t *plan, const fa2_forward_args_t *args);

/* Reads the metadata checks the last fa2_forward_varlen with this plan and workspace
 * wrote. Synchronous: it copies batch int32 from the device, so call it once that work
 * has finished (after the stream synchronizes). FA2_SUCCESS when every sequence passed;
 * FA2_ERROR_BAD_METADATA when one failed, with *sequence the first that failed and
 * *check its first failed check (the message names both); on FA2_SUCCESS *sequence = -1
 * and *check = FA2_VARLEN_OK; on any other status they are not written. sequence and
 * check may be NULL. Also FA2_ERROR_NULL_POINTER,
 * FA2_ERROR_STRUCT_SIZE, FA2_ERROR_BAD_PLAN, FA2_ERROR_UNSUPPORTED (a dense plan),
 * FA2_ERROR_WORKSPACE (smaller than plan->workspace_bytes), FA2_ERROR_MISALIGNED,
 * FA2_ERROR_CUDA (the copy failed: the message carries the CUDA error). */
FA2_API fa2_status_t fa2_varlen_check(const fa2_plan_t *plan, const void *workspace,
                                      size_t workspace_bytes, int64_t *sequence,
                                      fa2_varlen_check_t *check);

/* ---------------------------------------------------------------------------------
 * Merging partial results. Attention computed over separate key ranges (a shared prefix
 * and each sequence's own suffix, context parallelism across GPUs, split-KV) gives each
 * range i its own O_i and LSE_i; fa2_combine merges them into the attention over all
 * the keys, row by row and head by head (natural log, as libfa2's LSE):
 *   LSE = log(sum_i exp(LSE_i)),   O = sum_i exp(LSE_i - LSE) * O_i
 * A part with LSE_i = -inf (no key visible to the row) weighs 0; a row whose parts are
 * all -inf gets O = 0 and LSE = -inf.
 * ------------------------------------------------------------------------------ */
typedef struct fa2_combine_problem_t {
    size_t struct_size;  /* sizeof(fa2_combine_problem_t), set by fa2_combine_problem_init */
    int32_t parts_dtype; /* fa2_dtype_t of the O_i: FA2_DTYPE_FP32, FP16 or BF16 */
    int32_t dtype;       /* fa2_dtype_t of O: FA2_DTYPE_FP32, FP16 or BF16 */
    int64_t parts;       /* N, in [1, FA2_MAX_COMBINE_PARTS] */
    int64_t rows;        /* query rows, in [1, 2^31 - 1] */
    int64_t heads;       /* in [1, 2^31 - 1]; rows * heads * head_dim / 8 <= 2^31 - 1 */
    int64_t head_dim;    /* a multiple of 8 in [8, 256] */
    /* Strides in elements (O's: multiples of 8, so rows stay 16-byte aligned; the
     * LSEs' (float32): any), non-negative. O must not repeat an address. */
    int64_t o_parts_part_stride, o_parts_row_stride, o_parts_head_stride;
    int64_t lse_parts_part_stride, lse_parts_row_stride, lse_parts_head_stride;
    int64_t o_row_stride, o_head_stride;
    int64_t lse_row_stride, lse_head_stride;
} fa2_combine_problem_t;

/* Sets struct_size, the sizes and dtypes, and contiguous strides: O_i [parts, rows,
 * heads, head_dim], LSE_i float32 [parts, heads, rows] (each part laid out as the LSE of
 * a batch-1 or packed forward), O [rows, heads, head_dim], LSE [heads, rows]. Does not
 * validate (fa2_combine does). A NULL `problem` is a harmless no-op. */
FA2_API void fa2_combine_problem_init(fa2_combine_problem_t *problem, fa2_dtype_t parts_dtype,
                                      fa2_dtype_t dtype, int64_t parts, int64_t rows,
                                      int64_t heads, int64_t head_dim);

/* Merges the N partial results o_parts / lse_parts (device pointers, laid out as
 * `problem` says) into o and, when lse is not NULL, lse, on `stream`, asynchronously,
 * in one kernel (fp32 arithmetic). o_parts and o 16-byte aligned, the LSEs 4-byte
 * aligned; o and lse may overlap neither each other nor the parts. Graph-capturable.
 * Returns FA2_ERROR_NULL_POINTER (problem, o_parts, lse_parts, o), FA2_ERROR_STRUCT_SIZE,
 * FA2_ERROR_UNSUPPORTED_DTYPE, FA2_ERROR_INVALID_SIZE (parts, rows, heads),
 * FA2_ERROR_UNSUPPORTED_HEAD_DIM, FA2_ERROR_BAD_STRIDE, FA2_ERROR_SIZE_OVERFLOW,
 * FA2_ERROR_MISALIGNED, FA2_ERROR_OVERLAP (also O's strides repeating an address),
 * FA2_ERROR_NO_DEVICE, FA2_ERROR_CUDA; nothing is written on failure. */
FA2_API fa2_status_t fa2_combine(const fa2_combine_problem_t *problem, const void *o_parts,
                                 const float *lse_parts, void *o, float *lse, void *stream);

/* Writes new key and value rows into a paged plan's cache (what an engine runs before
 * attention each step), on `stream`, asynchronously: row t of k_new and v_new
 * ([n_tokens, heads_kv, head_dim] of the plan's dtype, rows new_row_stride elements
 * apart, heads head_dim apart, 16-byte aligned) goes to slot slot_mapping[t] (device
 * int32 [n_tokens]): row slot % page_size of page slot / page_size of k_cache and
 * v_cache, laid out as plan->problem says. A slot outside [0, num_pages * page_size)
 * is skipped (padding tokens: -1). The slots are read on the GPU only, so the call can
 * be captured in a CUDA graph with attention and replayed with new slots; n_tokens is
 * fixed by the capture. Two tokens with one slot: either may win.
 * Returns FA2_ERROR_NULL_POINTER, FA2_ERROR_STRUCT_SIZE, FA2_ERROR_BAD_PLAN,
 * FA2_ERROR_UNSUPPORTED (the plan's K/V are not paged), FA2_ERROR_INVALID_SIZE
 * (n_tokens outside [0, 2^31 - 1]), FA2_ERROR_BAD_STRIDE (new_row_stride below
 * heads_kv * head_dim or not a multiple of 8), FA2_ERROR_SIZE_OVERFLOW (the new rows'
 * extent), FA2_ERROR_MISALIGNED, FA2_ERROR_OVERLAP (the new rows meet the caches), FA2_ERROR_DEVICE_MISMATCH, FA2_ERROR_NO_DEVICE,
 * FA2_ERROR_CUDA. */
FA2_API fa2_status_t fa2_cache_write(const fa2_plan_t *plan, const void *k_new,
                                     const void *v_new, int64_t n_tokens,
                                     int64_t new_row_stride, const int32_t *slot_mapping,
                                     void *k_cache, void *v_cache, void *stream);

/* Runs the backward pass of fa2_forward on `stream`, asynchronously: given Q, K, V,
 * the forward's output O and its LSE (lse must not be NULL: run the forward with an
 * LSE buffer), and dO = dLoss/dO, writes dQ, dK, dV. Strides: dO as O, dQ as Q, dK as
 * K, dV as V (plan->problem); all 16-byte aligned. With GQA/MQA, dK and dV are
 * summed over the query heads that share a K/V head. `workspace` must hold
 * plan->bwd_workspace_bytes bytes of device memory (16-byte aligned; contents need
 * not be initialised, they are scratch until the work on `stream` completes).
 * plan->problem.deterministic = 0 (default): dQ is accumulated with fp32 atomics in
 * the workspace, so dQ may differ in its last bits from run to run (dK and dV never
 * do). deterministic = 1: no atomics, dQ from a kernel of its own; bit-identical
 * results run to run, usually slower. Exception: on sm_90 with head dims above 192
 * (bwd_arch 90) both modes take the dQ-kernel route. The workspace size depends on the route (no accumulator on the
 * dQ-kernel route).
 * The same plan, device and pending-error rules as fa2_forward; dq, dk, dv and the
 * workspace must overlap neither each other nor any input (FA2_ERROR_OVERLAP).
 * Returns FA2_ERROR_NULL_POINTER, FA2_ERROR_STRUCT_SIZE, FA2_ERROR_BAD_PLAN,
 * FA2_ERROR_DEVICE_MISMATCH, FA2_ERROR_MISALIGNED, FA2_ERROR_OVERLAP,
 * FA2_ERROR_WORKSPACE, plan->bwd_status when the plan has no backward
 * (bwd_supported = 0: FA2_ERROR_SHARED_MEMORY, FA2_ERROR_INVALID_SIZE,
 * FA2_ERROR_SIZE_OVERFLOW or FA2_ERROR_OVERLAP), FA2_ERROR_NO_DEVICE, FA2_ERROR_CUDA.
 * Nothing is written on failure (docs/reliability.md: the one exception, a CUDA
 * failure of a later kernel's launch, can come only from an error that leaves the
 * CUDA context unusable). */
FA2_API fa2_status_t fa2_backward(const fa2_plan_t *plan, const void *q, const void *k,
                                  const void *v, const void *o, const void *d_o,
                                  const float *lse, void *dq, void *dk, void *dv,
                                  void *workspace, size_t workspace_bytes, void *stream);

/* fa2_backward for a packed variable-length batch: the same tensors laid out as
 * packed rows, and the forward's cu_seqlens_q, cu_seqlens_k and seqused_k (see
 * fa2_forward_varlen). The same checks and statuses as fa2_backward and
 * fa2_forward_varlen; fa2_backward refuses a packed plan with FA2_ERROR_UNSUPPORTED. */
FA2_API fa2_status_t fa2_backward_varlen(const fa2_plan_t *plan, const void *q, const void *k,
                                         const void *v, const void *o, const void *d_o,
                                         const float *lse, void *dq, void *dk, void *dv,
                                         const int32_t *cu_seqlens_q,
                                         const int32_t *cu_seqlens_k,
                                         const int32_t *seqused_k, void *workspace,
                                         size_t workspace_bytes, void *stream);

/* Every tensor of one backward call, for fa2_backward_with (as fa2_forward_args_t). */
typedef struct fa2_backward_args_t {
    size_t struct_size; /* sizeof(fa2_backward_args_t), set by fa2_backward_args_init */
    const void *q;
    const void *k;
    const void *v;
    const void *o;
    const void *d_o;
    const float *lse;
    void *dq;
    void *dk;
    void *dv;
    const int32_t *cu_seqlens_q; /* packed plans only (see fa2_backward_varlen) */
    const int32_t *cu_seqlens_k;
    const int32_t *seqused_k;
    const float *alibi_slopes;   /* [heads_q] float32: exactly when the plan has alibi */
    const float *sinks;          /* [heads_q] float32: exactly when the plan has sinks */
    float *dsinks;               /* [heads_q] float32, written: exactly with sinks */
    void *workspace;
    size_t workspace_bytes;
    void *stream;
} fa2_backward_args_t;

/* Zeroes *args and sets its struct_size. A NULL `args` is a harmless no-op. */
FA2_API void fa2_backward_args_init(fa2_backward_args_t *args);

/* fa2_backward (dense plans) or fa2_backward_varlen (packed ones) with its tensors in
 * one struct, as fa2_forward_with; the only backward for a plan with ALiBi or sinks
 * (the slopes, or the sinks and dsinks, required; dsinks written, 4-byte aligned,
 * overlapping no other tensor). */
FA2_API fa2_status_t fa2_backward_with(const fa2_plan_t *plan,
                                       const fa2_backward_args_t *args);

#ifdef __cplusplus
}
#endif

#endif /* FA2_H */
