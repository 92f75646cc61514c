/* Planner properties: for every supported head dim, several shared-memory sizes,
 * both dtypes, both backward modes and sm_80/sm_90 devices, an accepted plan fits the
 * device, has tiles that are multiples of 16, covers the problem with its grid, runs
 * the kernel family (fwd_arch, bwd_arch) and tiles of the compiled tables, and reports
 * the seed values of the FlashAttention rule, computed here independently. CPU only. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "internal.h" /* fa2_device_runs_plan */
#include "sm90/bwd_sm90_tiles.h"
#include "sm80/bwd_tiles.h"
#include "fa2.h"
#include "sm90/fwd_sm90_tiles.h"
#include "sm80/fwd_tiles.h"

typedef struct tile_t {
    int64_t bucket, br, bc, warps, arch, smem;
} tile_t;

/* The mma.sync kernel's table (every device). */
static const tile_t tiles[] = {
#define X(b, bm, bn, w) {b, bm, bn, w, 80, ((bm) + 3 * (bn)) * (((b) + 63) / 64 * 64) * 2},
    FA2_FWD_TILES(X)
#undef X
};
#define NTILES (sizeof tiles / sizeof tiles[0])

/* The Hopper kernel's table: used on sm_90 when the library has sm_90a code. */
static const tile_t sm90_tiles[] = {
#define X(b, wg, bn) {b, 64 * (wg), bn, 4 * (wg), 90, (64 * (wg) + 3 * (bn)) * (b) * 2 + 1024},
    FA2_FWD_SM90_TILES(X)
#undef X
};
#define NSM90 (sizeof sm90_tiles / sizeof sm90_tiles[0])

/* The backward's tiles. Shared memory, written out here from docs/planning.md:
 *   dkdv: K, V (block_n rows), Q, dO double buffered (block_m rows), rows of d rounded
 *         up to 64 2-byte values; LSE and D double buffered (block_m floats each);
 *   ds:   dS of one step, block_m rows of max(2 block_n, 128) bytes (default mode);
 *   dq:   the deterministic mode's dQ kernel: Q, dO (dq_block_m rows), K, V double
 *         buffered (dq_block_n rows).
 * The plan's bwd_smem_bytes is dkdv + ds in default mode, max(dkdv, dq) in
 * deterministic mode (bwd_smem_of). */
typedef struct bwd_tile_t {
    int64_t bucket, block_n, block_m, dq_block_m, dq_block_n, arch;
    int64_t dkdv, ds, dq;
    int64_t split; /* Hopper rows: dQ by a kernel of its own, both modes */
} bwd_tile_t;

#define COLS(b) (((b) + 63) / 64 * 64)
#define DKDV_SMEM(b, bn, bm) ((2 * (bn) + 4 * (bm)) * COLS(b) * 2 + 4 * (bm) * 4)
#define DS_SMEM(bn, bm) ((bm) * (2 * (bn) > 128 ? 2 * (bn) : 128))
#define DQ_SMEM(b, qbm, qbn) ((2 * (qbm) + 4 * (qbn)) * COLS(b) * 2)

/* The mma.sync kernels' table (every device; deterministic mode everywhere). */
static const bwd_tile_t bwd_tiles[] = {
#define X(b, bn, bm, w, sl, qbm, qbn, qw) \
    {b, bn, bm, qbm, qbn, 80, DKDV_SMEM(b, bn, bm), DS_SMEM(bn, bm), DQ_SMEM(b, qbm, qbn)},
    FA2_BWD_TILES(X)
#undef X
};
#define NBWD (sizeof bwd_tiles / sizeof bwd_tiles[0])

/* The Hopper dK/dV kernel's table (sm_90, default mode, sm_90a builds). A row is
 * (d, warpgroups, block_m[, split]); a row without `split` reads as split = 0 (the
 * variadic X takes both forms). block_n is 64 keys per warpgroup, or 64 keys shared
 * by the warpgroups when split. Shared memory: K, V (block_n rows), Q, dO double
 * buffered (block_m rows), rows of d 2-byte values in 128-byte panels; dS^T (block_n x
 * block_m, 2 bytes; split: also P^T and P in fp32, 8 bytes in all); LSE and D double
 * buffered; not split: one step's dQ in fp32 (block_m rows of 4 d + 16 bytes) and two
 * 8-byte mbarriers; 1 KiB of alignment slack. Not split: only dkdv is used (ds = dq =
 * 0) and the plan keeps the mma.sync row's dq_block_m/n (unused in default mode).
 * The Hopper dQ kernel (deterministic mode, and split rows in both modes): 128 query
 * rows x 64 keys, Q and dO (128 rows), K double buffered and V (64 rows), 1 KiB of
 * slack; bwd_smem_bytes is then the larger kernel's. */
#define SM90_BWD_BN(wg, split) ((split) ? 64 : 64 * (wg))
#define SM90_BWD_SMEM(b, bn, bm, split)                                                  \
    ((2 * (bn) + 4 * (bm)) * (b) * 2 + (bn) * (bm) * ((split) ? 8 : 2) + 4 * (bm) * 4 + \
     ((split) ? 0 : (bm) * (4 * (b) + 16) + 16) + 1024)
#define SM90_DQ_SMEM(b) ((2 * 128 + 3 * 64) * (b) * 2 + 1024)
#define SM90_BWD_ROW(b, wg, bm, split, ...)                                   \
    {b, SM90_BWD_BN(wg, split), bm, 128, 64, 90,                             \
     SM90_BWD_SMEM(b, SM90_BWD_BN(wg, split), bm, split), 0, SM90_DQ_SMEM(b), \
     split},
static const bwd_tile_t bwd_sm90_tiles[] = {
#define X(...) SM90_BWD_ROW(__VA_ARGS__, 0, 0)
    FA2_BWD_SM90_TILES(X)
#undef X
};
#define NBWD90 (sizeof bwd_sm90_tiles / sizeof bwd_sm90_tiles[0])

/* The compact tiles (99 KiB devices), forward and backward: used where the bucket's
 * main tile does not fit the device (the backward's: in the plan's mode). */
static const tile_t compact_tiles[] = {
#define X(b, bm, bn, w) {b, bm, bn, w, 80, ((bm) + 3 * (bn)) * (((b) + 63) / 64 * 64) * 2},
    FA2_FWD_COMPACT_TILES(X)
#undef X
};
#define NCOMPACT (sizeof compact_tiles / sizeof compact_tiles[0])

static const bwd_tile_t bwd_compact_tiles[] = {
#define X(b, bn, bm, w, sl, qbm, qbn, qw) \
    {b, bn, bm, qbm, qbn, 80, DKDV_SMEM(b, bn, bm), DS_SMEM(bn, bm), DQ_SMEM(b, qbm, qbn)},
    FA2_BWD_COMPACT_TILES(X)
#undef X
};
#define NBWDCOMPACT (sizeof bwd_compact_tiles / sizeof bwd_compact_tiles[0])

static const int64_t buckets[] = {32, 64, 96, 128, 192, 256};

static fa2_device_info_t device(int64_t optin)
{
    fa2_device_info_t d;
    memset(&d, 0, sizeof d);
    d.struct_size = sizeof d;
    d.cc_major = 9;
    d.cc_minor = 0;
    d.sm_count = 132;
    d.smem_per_block_optin = optin;
    d.smem_per_sm = optin + 1024;
    return d;
}

/* An sm_80 device (A100-like, here with any shared-memory size). */
static fa2_device_info_t device80(int64_t optin)
{
    fa2_device_info_t d = device(optin);
    d.cc_major = 8;
    return d;
}

/* The smallest compiled head dim >= d, from the documented list. */
static int64_t bucket_of(int64_t d)
{
    for (size_t i = 0; i < sizeof buckets / sizeof buckets[0]; i++)
        if (buckets[i] >= d)
            return buckets[i];
    return 0;
}

static const tile_t *tile_of(int64_t bucket)
{
    for (size_t i = 0; i < NTILES; i++)
        if (tiles[i].bucket == bucket)
            return &tiles[i];
    return NULL;
}

/* The tile fa2_plan must pick for `bucket` on device `d`. */
static const tile_t *tile_for(int64_t bucket, const fa2_device_info_t *d)
{
#if defined(FA2_WITH_SM90A)
    if (d->cc_major == 9 && d->cc_minor == 0)
        for (size_t i = 0; i < NSM90; i++)
            if (sm90_tiles[i].bucket == bucket)
                return &sm90_tiles[i];
#else
    (void)d;
#endif
    const tile_t *t = tile_of(bucket);
    if (t && t->smem > d->smem_per_block_optin)
        for (size_t i = 0; i < NCOMPACT; i++)
            if (compact_tiles[i].bucket == bucket)
                return &compact_tiles[i];
    return t;
}

/* tile_for for problem p: on sm_90, a dense batch of more than 64 rows per head or a
 * paged cache at a one-warpgroup bucket of 128 takes the producer layout (math
 * warpgroups of 64 rows and one producer warpgroup) when softcap is off or bounds the
 * scores (bf16, at most FA2_MAX_BOUNDED_SOFTCAP, no ALiBi); *scratch holds that tile. */
static const tile_t *tile_for_problem(const fa2_problem_t *p, const fa2_device_info_t *d,
                                      tile_t *scratch)
{
    const tile_t *t = tile_for(bucket_of(p->head_dim), d);
#if defined(FA2_WITH_SM90A)
    const int bounded = p->dtype == FA2_DTYPE_BF16 && p->softcap > 0.0f &&
                        p->softcap <= FA2_MAX_BOUNDED_SOFTCAP && !p->alibi;
    const int rows = p->page_size != 0 || (p->total_q == 0 && p->seqlen_q > 64);
    if (t && t->arch == 90 && t->bucket == 128 && t->warps == 4 && rows &&
        (p->softcap == 0.0f || bounded)) {
        *scratch = *t;
        scratch->br = 64 * FA2_WGMMA_PRODUCER_WARPGROUPS;
        scratch->warps = 4 * (FA2_WGMMA_PRODUCER_WARPGROUPS + 1);
        /* Q, the K stages and two V buffers, and the alignment pad */
        scratch->smem =
            (scratch->br + (FA2_WGMMA_PRODUCER_K_STAGES + 2) * t->bc) * t->bucket * 2 + 1024;
        return scratch;
    }
#else
    (void)p;
    (void)scratch;
#endif
    return t;
}

static const bwd_tile_t *bwd_tile_of(int64_t bucket)
{
    for (size_t i = 0; i < NBWD; i++)
        if (bwd_tiles[i].bucket == bucket)
            return &bwd_tiles[i];
    return NULL;
}

static int64_t bwd_smem_of(const bwd_tile_t *t, int deterministic);

/* The backward tiles fa2_plan must pick for `bucket` on device `d` in the given mode:
 * the Hopper row on sm_90 when the library has sm_90a code and the table has the
 * bucket (with the Hopper dQ kernel's tiles in deterministic mode and for split rows),
 * else the mma.sync row, or its compact row where the main one does not fit. 0 if no
 * row at all. */
static int bwd_tile_for(int64_t bucket, const fa2_device_info_t *d, int deterministic,
                        bwd_tile_t *out)
{
    const bwd_tile_t *t = bwd_tile_of(bucket);
    if (!t)
        return 0;
    *out = *t;
    if (bwd_smem_of(out, deterministic) > d->smem_per_block_optin)
        for (size_t i = 0; i < NBWDCOMPACT; i++)
            if (bwd_compact_tiles[i].bucket == bucket)
                *out = bwd_compact_tiles[i];
#if defined(FA2_WITH_SM90A)
    if (d->cc_major == 9 && d->cc_minor == 0)
        for (size_t i = 0; i < NBWD90; i++)
            if (bwd_sm90_tiles[i].bucket == bucket) {
                const bwd_tile_t *h = &bwd_sm90_tiles[i];
                out->block_n = h->block_n;
                out->block_m = h->block_m;
                out->arch = 90;
                out->dkdv = h->dkdv;
                out->ds = 0;
                out->dq = h->dq;
                out->split = h->split;
                if (h->split || deterministic) {
                    out->dq_block_m = h->dq_block_m;
                    out->dq_block_n = h->dq_block_n;
                }
            }
#else
    (void)d;
    (void)deterministic;
#endif
    return 1;
}

/* bwd_smem_bytes for tile `t` in the given mode. */
static int64_t bwd_smem_of(const bwd_tile_t *t, int deterministic)
{
    if (deterministic || t->split) /* a dQ kernel runs */
        return t->dkdv > t->dq ? t->dkdv : t->dq;
    return t->dkdv + t->ds;
}

/* The compiled table itself: one row per documented bucket, shapes the mma needs. */
static void test_tile_table(void **state)
{
    (void)state;
    assert_int_equal(NTILES, sizeof buckets / sizeof buckets[0]);
    for (size_t i = 0; i < NTILES; i++) {
        const tile_t *t = tile_of(buckets[i]);
        assert_non_null(t);
        assert_true(t->br >= 16 && t->br % 16 == 0);
        assert_true(t->bc >= 16 && t->bc % 16 == 0);
        assert_true(t->warps == 4 || t->warps == 8);
        /* 16 query rows (one m16 mma tile) per warp at least. */
        assert_true(t->br % (16 * t->warps) == 0);
        assert_int_equal(t->smem, fa2_fwd_smem_bytes(t->bucket, t->br, t->bc));
    }
    for (size_t i = 0; i < NSM90; i++) {
        const tile_t *t = &sm90_tiles[i];
        assert_non_null(tile_of(t->bucket)); /* a Hopper row replaces a bucket's tile */
        assert_true(t->bucket % 64 == 0 && t->br % 64 == 0 && t->bc % 16 == 0);
        assert_int_equal(t->smem, fa2_fwd_sm90_smem_bytes(t->bucket, t->br, t->bc));
    }
    /* Backward: one mma.sync row per bucket, the header's formulas are the documented
     * ones; Hopper rows replace buckets that exist, in whole 64-row wgmma tiles and
     * 128-byte panels. */
    assert_int_equal(NBWD, sizeof buckets / sizeof buckets[0]);
    for (size_t i = 0; i < NBWD; i++) {
        const bwd_tile_t *t = bwd_tile_of(buckets[i]);
        int64_t cols = fa2_fwd_smem_cols(buckets[i]);
        assert_non_null(t);
        assert_true(t->block_n >= 16 && t->block_n % 16 == 0);
        assert_true(t->block_m >= 16 && t->block_m % 16 == 0);
        assert_true(t->dq_block_m >= 16 && t->dq_block_m % 16 == 0);
        assert_true(t->dq_block_n >= 16 && t->dq_block_n % 16 == 0);
        assert_int_equal(t->arch, 80);
        assert_int_equal(t->dkdv, fa2_bwd_dkdv_smem_bytes(cols, t->block_n, t->block_m));
        assert_int_equal(t->ds, fa2_bwd_ds_smem_bytes(t->block_n, t->block_m));
        assert_int_equal(t->dq, fa2_bwd_dq_smem_bytes(cols, t->dq_block_m, t->dq_block_n));
    }
    for (size_t i = 0; i < NBWD90; i++) {
        const bwd_tile_t *t = &bwd_sm90_tiles[i];
        assert_non_null(bwd_tile_of(t->bucket));
        assert_true(t->bucket % 64 == 0);
        assert_true(t->block_n >= 64 && t->block_n % 64 == 0);
        assert_true(t->block_m >= 64 && t->block_m % 64 == 0 && t->block_m <= 256);
        assert_int_equal(t->arch, 90);
        assert_true(t->dkdv > 0);
    }
}

/* Which rule fixed one side, per docs/planning.md. */
static int32_t expected_rule(int64_t seed, int64_t uncapped, int64_t kernel)
{
    int64_t rounded = seed - seed % 16;
    if (rounded != kernel)
        return FA2_RULE_KERNEL_TILE;
    if (rounded != seed)
        return FA2_RULE_MMA_MULTIPLE;
    return seed < uncapped ? FA2_RULE_HEAD_DIM : FA2_RULE_SEED_SRAM;
}

/* The kernel the plan names (fwd_kernel, fwd_scores and the fields the launch reads):
 * the decode kernel when `decode`, with the deepest pipeline that fits; else the family
 * and tile `t` says, a paged cache's loader on Hopper by the TMA box rule; the
 * workspace offsets of the splits' results. */
static void check_kernel_choice(const fa2_problem_t *p, const fa2_plan_t *pl, const tile_t *t,
                                int decode, int deep_fits)
{
    const int hopper = t->arch == 90;
    const int producer = hopper && t->warps == 4 * (FA2_WGMMA_PRODUCER_WARPGROUPS + 1);
    int32_t box = 0;
    if (hopper && !producer && p->page_size) {
        const int64_t rows = p->page_size < t->bc ? p->page_size : t->bc;
        const int nest = p->page_size >= t->bc ? p->page_size % t->bc == 0
                                               : t->bc % p->page_size == 0;
        if (nest && rows % 8 == 0 && rows >= 32 && p->k_seq_stride > 0 && p->v_seq_stride > 0)
            box = (int32_t)rows; /* the GPU suites' caches: positive strides below 2^39 */
    }
    int32_t kernel = !hopper            ? (t->br == tile_of(t->bucket)->br &&
                                                   t->bc == tile_of(t->bucket)->bc
                                               ? FA2_FWD_KERNEL_MMA
                                               : FA2_FWD_KERNEL_MMA_COMPACT)
                     : producer         ? FA2_FWD_KERNEL_WGMMA_PRODUCER
                     : !p->page_size    ? FA2_FWD_KERNEL_WGMMA
                     : box              ? FA2_FWD_KERNEL_WGMMA_PAGED_TMA
                                        : FA2_FWD_KERNEL_WGMMA_PAGED_COPY;
    if (decode)
        kernel = FA2_FWD_KERNEL_DECODE, box = 0;
    assert_int_equal(pl->fwd_kernel, kernel);
    assert_int_equal(pl->page_box_rows, box);
    const int scored = p->softcap != 0.0f || p->alibi;
    const int bounded = hopper && !decode && p->dtype == FA2_DTYPE_BF16 &&
                        p->softcap > 0.0f && p->softcap <= FA2_MAX_BOUNDED_SOFTCAP && !p->alibi;
    assert_int_equal(pl->fwd_scores, !scored  ? FA2_SCORES_PLAIN
                                     : bounded ? FA2_SCORES_BOUNDED_SOFTCAP
                                               : FA2_SCORES_GENERAL);
    assert_int_equal(pl->decode_stages, decode ? (deep_fits ? 3 : 2) : 0);
    if (!decode || !p->batch_invariant)
        assert_int_equal(pl->split_tiles, 0);
    if (pl->splits > 1) {
        const int64_t rows = p->total_q ? p->total_q : p->batch * p->seqlen_q;
        const int64_t lse = (int64_t)pl->splits * p->heads_q * rows * 4;
        assert_int_equal(pl->split_rows, rows);
        assert_int_equal(pl->split_lse_offset % 256, 0);
        assert_true(pl->split_lse_offset >= (p->total_q ? 4 * p->batch : 0));
        assert_int_equal(pl->split_o_offset % 256, 0);
        assert_true(pl->split_o_offset >= pl->split_lse_offset + lse);
        assert_int_equal(pl->workspace_bytes, pl->split_o_offset + lse * p->head_dim);
    } else {
        assert_int_equal(pl->split_rows, 0);
        assert_int_equal(pl->split_lse_offset, 0);
        assert_int_equal(pl->split_o_offset, 0);
    }
}

/* Everything an accepted plan must satisfy. */
static void check_plan(const fa2_problem_t *p, const fa2_device_info_t *d,
                       const fa2_plan_t *pl)
{
    int64_t bucket = bucket_of(p->head_dim);
    tile_t producer_tile;
    const tile_t *t = tile_for_problem(p, d, &producer_tile);
    int64_t m = d->smem_per_block_optin / 2; /* bytes -> 2-byte elements */
    int64_t seed = (m + 4 * bucket - 1) / (4 * bucket);
    int64_t per_head;
    bwd_tile_t bt = {0};

    assert_non_null(t);
    assert_int_equal(pl->struct_size, sizeof(fa2_plan_t));
    assert_int_equal(pl->head_dim_bucket, bucket);
    assert_int_equal(pl->sram_elements, m);
    assert_int_equal(pl->seed_br, seed);
    assert_int_equal(pl->seed_bc, seed < bucket ? seed : bucket);
    /* The seed is ceil(M / 4d): the smallest integer with 4 d * seed >= M. */
    assert_true(4 * bucket * pl->seed_br >= m);
    assert_true(4 * bucket * (pl->seed_br - 1) < m);

    /* Tiles: the compiled ones, multiples of 16, fit in shared memory. */
    assert_int_equal(pl->block_m, t->br);
    assert_int_equal(pl->block_n, t->bc);
    assert_int_equal(pl->warps, t->warps);
    assert_true(pl->block_m >= 16 && pl->block_m % 16 == 0);
    assert_true(pl->block_n >= 16 && pl->block_n % 16 == 0);
    assert_int_equal(pl->fwd_arch, t->arch);
    /* The decode kernel: exactly for its buckets, at most 16 query tokens (16 rows of
     * query heads per kv head times tokens a block), when its shared memory fits; splits
     * only when allowed. */
    const int decode_bucket = bucket == 64 || bucket == 128 || bucket == 256;
    const int64_t row_tiles = (p->heads_q / p->heads_kv * p->seqlen_q + 15) / 16;
    const int64_t row_bytes = (bucket + 63) / 64 * 64 * 2, keys = bucket >= 256 ? 16 : bucket >= 128 ? 32 : 64;
    /* Q, then 4 warps x 3 stages x (K, V) where that fits, else 2 stages */
    const int64_t deep_smem = 16 * row_bytes + 4 * 3 * 2 * keys * row_bytes;
    const int64_t decode_smem = deep_smem <= d->smem_per_block_optin
                                    ? deep_smem
                                    : 16 * row_bytes + 4 * 2 * 2 * keys * row_bytes;
    const int decode = decode_bucket && p->seqlen_q <= 16 &&
                       decode_smem <= d->smem_per_block_optin;
    assert_int_equal(pl->splits > 0, decode);
    assert_true(pl->splits <= (p->max_splits > 1 ? p->max_splits : 1));
    if (decode) {
        assert_int_equal(pl->smem_bytes, decode_smem);
        assert_int_equal(pl->grid_blocks, p->batch * p->heads_kv * row_tiles * pl->splits);
    } else {
        assert_int_equal(pl->smem_bytes, t->smem);
        /* Q (Br rows) + K double buffer + V (Bc rows each), rows of >= d 2-byte values. */
        assert_true(pl->smem_bytes >= (pl->block_m + 3 * pl->block_n) * bucket * 2);
    }
    assert_true(pl->smem_bytes <= d->smem_per_block_optin);
    check_kernel_choice(p, pl, t, decode, deep_smem <= d->smem_per_block_optin);
    assert_int_equal(pl->block_m_rule, expected_rule(pl->seed_br, seed, t->br));
    assert_int_equal(pl->block_n_rule, expected_rule(pl->seed_bc, seed, t->bc));

    /* Grid (prefill): one block per (batch, head, Br query rows), covering every row. */
    if (!decode) {
        assert_int_equal(pl->grid_blocks % (p->batch * p->heads_q), 0);
        per_head = pl->grid_blocks / (p->batch * p->heads_q);
        assert_true(per_head * pl->block_m >= p->seqlen_q);
        assert_true((per_head - 1) * pl->block_m < p->seqlen_q);
    }
    /* Workspace: none, unless the decode kernel splits the keys (fp32 O and LSE per
     * split, row and query head). */
    if (pl->splits <= 1)
        assert_int_equal(pl->workspace_bytes, 0);
    else
        assert_true(pl->workspace_bytes >= (int64_t)pl->splits * p->batch * p->seqlen_q *
                                               p->heads_q * (p->head_dim + 1) * 4);

    /* Backward: the kernel family and tiles of the table for this device and mode;
     * refused for shared memory exactly when those tiles do not fit. */
    assert_true(bwd_tile_for(bucket, d, p->deterministic, &bt));
    assert_int_equal(pl->bwd_arch, bt.arch);
    assert_int_equal(pl->bwd_block_n, bt.block_n);
    assert_int_equal(pl->bwd_block_m, bt.block_m);
    assert_int_equal(pl->bwd_dq_block_m, bt.dq_block_m);
    assert_int_equal(pl->bwd_dq_block_n, bt.dq_block_n);
    assert_int_equal(pl->bwd_smem_bytes, bwd_smem_of(&bt, p->deterministic));
    /* Workspace: D (4 bytes per query row, padded to 256), then the fp32 dQ
     * accumulator (head_dim floats per row) when dQ is summed by atomics: default
     * mode, not a split Hopper row. */
    if (pl->bwd_status != FA2_ERROR_SIZE_OVERFLOW) {
        const int64_t d_bytes = p->batch * p->heads_q * p->seqlen_q * 4;
        const int atomics = !p->deterministic && !bt.split;
        assert_int_equal(pl->bwd_workspace_bytes,
                         (d_bytes + 255) / 256 * 256 + (atomics ? d_bytes * p->head_dim : 0));
        assert_int_equal(pl->bwd_accum_offset, atomics ? (d_bytes + 255) / 256 * 256 : 0);
    }
    const bwd_tile_t *main_bwd = bwd_tile_of(bucket);
    assert_int_equal(pl->bwd_kernel,
                     bt.arch == 90 ? FA2_BWD_KERNEL_WGMMA
                     : bt.block_n == main_bwd->block_n && bt.block_m == main_bwd->block_m
                         ? FA2_BWD_KERNEL_MMA
                         : FA2_BWD_KERNEL_MMA_COMPACT);
    assert_int_equal(pl->bwd_scores, p->softcap != 0.0f || p->alibi ? FA2_SCORES_GENERAL
                                                                     : FA2_SCORES_PLAIN);
    assert_int_equal(pl->bwd_status == FA2_ERROR_SHARED_MEMORY,
                     pl->bwd_smem_bytes > d->smem_per_block_optin);
    assert_int_equal(pl->bwd_supported, pl->bwd_status == FA2_SUCCESS);

    /* The problem, copied, with the default scale resolved. */
    assert_int_equal(pl->problem.struct_size, sizeof(fa2_problem_t));
    assert_int_equal(pl->problem.head_dim, p->head_dim);
    assert_int_equal(pl->problem.batch, p->batch);
    assert_int_equal(pl->problem.seqlen_q, p->seqlen_q);
    assert_int_equal(pl->problem.q_seq_stride, p->q_seq_stride);
    if (p->softmax_scale == 0.0f)
        assert_true(pl->problem.softmax_scale == 1.0f / sqrtf((float)p->head_dim));
    else
        assert_true(pl->problem.softmax_scale == p->softmax_scale);
}

/* Every head dim 8..256 (step 8) x M x dtype x a few lengths x backward mode, on an
 * sm_90 and an sm_80 device. Accepted exactly when the compiled forward tile fits in
 * the device's shared memory. */
static void test_properties_sweep(void **state)
{
    static const int64_t smem[] = {48 * 1024, 99 * 1024, 163 * 1024, 227 * 1024};
    static const int64_t seqlens[] = {1, 17, 128, 129, 1000};
    static const fa2_dtype_t dtypes[] = {FA2_DTYPE_FP16, FA2_DTYPE_BF16};
    int accepted = 0, rejected = 0, bwd_refused = 0;
    (void)state;
    for (int cc = 8; cc <= 9; cc++) {
        for (size_t si = 0; si < 4; si++) {
            fa2_device_info_t d = cc == 9 ? device(smem[si]) : device80(smem[si]);
            for (int64_t hd = 8; hd <= 256; hd += 8) {
                for (size_t ti = 0; ti < 2; ti++) {
                    for (size_t li = 0; li < 5; li++) {
                        for (int det = 0; det < 2; det++) {
                            fa2_problem_t p;
                            fa2_plan_t pl, poison;
                            tile_t producer_tile;
                            fa2_status_t s;
                            int fits;
                            fa2_problem_init(&p, dtypes[ti], 3, seqlens[li], 77, 6, 2, hd);
                            const tile_t *t = tile_for_problem(&p, &d, &producer_tile);
                            p.deterministic = det;
                            memset(&pl, 0xAB, sizeof pl);
                            poison = pl;
                            s = fa2_plan(&p, &d, &pl);
                            fits = t->smem <= smem[si];
                            if (s != (fits ? FA2_SUCCESS : FA2_ERROR_SHARED_MEMORY)) {
                                print_error("cc %d.0 M=%lld bytes d=%lld det=%d: status %d "
                                            "(%s)\n",
                                            cc, (long long)smem[si], (long long)hd, det,
                                            (int)s, fa2_last_error());
                                fail();
                            }
                            if (s == FA2_SUCCESS) {
                                check_plan(&p, &d, &pl);
                                accepted++;
                                bwd_refused += !pl.bwd_supported;
                            } else {
                                assert_non_null(strstr(fa2_last_error(), "needs"));
                                assert_memory_equal(&pl, &poison, sizeof pl);
                                rejected++;
                            }
                        }
                    }
                }
            }
        }
    }
    /* Every branch ran: the sweep is not vacuous. */
    assert_true(accepted > 0);
    assert_true(rejected > 0);
    assert_true(bwd_refused > 0);
    /* Every head dim runs forward and backward, in both modes, at 227 KiB (H100/H200
     * opt-in). */
    for (int64_t hd = 8; hd <= 256; hd += 8) {
        fa2_device_info_t h = device(227 * 1024);
        bwd_tile_t bt = {0};
        assert_true(tile_of(bucket_of(hd))->smem <= 227 * 1024);
        assert_true(tile_for(bucket_of(hd), &h)->smem <= 227 * 1024);
        for (int det = 0; det < 2; det++) {
            assert_true(bwd_tile_for(bucket_of(hd), &h, det, &bt));
            assert_true(bwd_smem_of(&bt, det) <= 227 * 1024);
        }
    }
}

/* A 99 KiB device (sm_89, 101376 bytes opt-in: RTX 30xx/40xx/50xx): every head dim
 * plans forward and backward in both modes; the compact tiles run where the main ones
 * do not fit (forward d > 192, default-mode backward d 97 ... 192), the main ones
 * elsewhere. */
static void test_99k_every_head_dim(void **state)
{
    fa2_device_info_t d = device80(101376);
    int compact_fwd = 0, compact_bwd = 0;
    (void)state;
    d.cc_minor = 9;
    for (size_t i = 0; i < NCOMPACT; i++) {
        const tile_t *c = &compact_tiles[i], *t = tile_of(c->bucket);
        assert_non_null(t);
        assert_true(c->smem < t->smem && c->smem <= 101376);
        assert_true(c->br % (16 * c->warps) == 0 && c->bc % 16 == 0);
        assert_int_equal(c->smem, fa2_fwd_smem_bytes(c->bucket, c->br, c->bc));
    }
    for (size_t i = 0; i < NBWDCOMPACT; i++) {
        const bwd_tile_t *c = &bwd_compact_tiles[i], *t = bwd_tile_of(c->bucket);
        assert_non_null(t);
        for (int det = 0; det < 2; det++)
            assert_true(bwd_smem_of(c, det) <= 101376);
        assert_true(bwd_smem_of(c, 0) < bwd_smem_of(t, 0));
    }
    for (int64_t hd = 8; hd <= 256; hd += 8)
        for (int det = 0; det < 2; det++) {
            fa2_problem_t p;
            fa2_plan_t pl;
            bwd_tile_t bt;
            fa2_problem_init(&p, FA2_DTYPE_BF16, 2, 1000, 1000, 8, 2, hd);
            p.deterministic = det;
            assert_int_equal(fa2_plan(&p, &d, &pl), FA2_SUCCESS);
            check_plan(&p, &d, &pl);
            assert_int_equal(pl.bwd_supported, 1);
            assert_int_equal(pl.fwd_arch, 80);
            assert_int_equal(pl.bwd_arch, 80);
            compact_fwd += pl.block_m != tile_of(pl.head_dim_bucket)->br;
            assert_true(bwd_tile_for(pl.head_dim_bucket, &d, det, &bt));
            compact_bwd += pl.bwd_block_n != bwd_tile_of(pl.head_dim_bucket)->block_n ||
                           pl.bwd_block_m != bwd_tile_of(pl.head_dim_bucket)->block_m;
        }
    /* d 200 ... 256 forward (8 dims, 2 modes); default-mode backward 104 ... 192 (12). */
    assert_int_equal(compact_fwd, 16);
    assert_int_equal(compact_bwd, 12);
}

/* The H200 (cc 9.0, 132 SMs, 232448 bytes opt-in) gets a plan for every bucket and
 * dtype; the seed values of docs/planning.md's worked example. */
static void test_h200_every_bucket(void **state)
{
    fa2_device_info_t d = device(232448);
    (void)state;
    d.smem_per_sm = 233472;
    for (size_t i = 0; i < sizeof buckets / sizeof buckets[0]; i++) {
        for (int bf16 = 0; bf16 < 2; bf16++) {
            fa2_problem_t p;
            fa2_plan_t pl;
            fa2_problem_init(&p, bf16 ? FA2_DTYPE_BF16 : FA2_DTYPE_FP16, 4, 4096, 4096, 16,
                             16, buckets[i]);
            assert_int_equal(fa2_plan(&p, &d, &pl), FA2_SUCCESS);
            check_plan(&p, &d, &pl);
            assert_int_equal(pl.grid_blocks, 4 * 16 * ((4096 + pl.block_m - 1) / pl.block_m));
        }
    }
}

static fa2_plan_t h200_plan(int64_t head_dim)
{
    fa2_device_info_t d = device(232448);
    fa2_problem_t p;
    fa2_plan_t pl;
    fa2_problem_init(&p, FA2_DTYPE_BF16, 1, 1024, 1024, 1, 1, head_dim);
    assert_int_equal(fa2_plan(&p, &d, &pl), FA2_SUCCESS);
    return pl;
}

/* docs/planning.md's H200 numbers: M = 232448 / 2 = 116224 elements. */
static void test_h200_worked_example(void **state)
{
    fa2_plan_t pl;
    (void)state;
    pl = h200_plan(64); /* 116224 / 256 = 454 exactly */
    assert_int_equal(pl.sram_elements, 116224);
    assert_int_equal(pl.seed_br, 454);
    assert_int_equal(pl.seed_bc, 64);
    assert_int_equal(pl.block_n_rule, pl.block_n == 64 ? FA2_RULE_HEAD_DIM
                                                       : FA2_RULE_KERNEL_TILE);
    pl = h200_plan(128); /* 116224 / 512 = 227 exactly */
    assert_int_equal(pl.seed_br, 227);
    assert_int_equal(pl.seed_bc, 128);
    pl = h200_plan(256); /* 116224 / 1024 = 113.5 */
    assert_int_equal(pl.seed_br, 114);
    assert_int_equal(pl.seed_bc, 114);
    /* The seed's 4 B x d model allows 112 rows; the kernel's 128 rows still fit. */
    assert_int_equal(pl.block_m_rule, pl.block_m == 112 ? FA2_RULE_MMA_MULTIPLE
                                                        : FA2_RULE_KERNEL_TILE);
}

/* Which kernel family runs where: the Hopper kernels (arch 90) only on cc 9.0, only
 * in a build with sm_90a code, only for the buckets of their tables (the backward in
 * both modes); the mma.sync kernels (arch 80) everywhere else. */
static void test_kernel_family(void **state)
{
    static const int32_t ccs[][2] = {{8, 0}, {8, 6}, {8, 9}, {9, 0}, {10, 0}, {12, 0}};
    int fwd90 = 0, bwd90 = 0;
    (void)state;
    for (size_t ci = 0; ci < sizeof ccs / sizeof ccs[0]; ci++) {
        fa2_device_info_t d = device(232448);
        int hopper = ccs[ci][0] == 9 && ccs[ci][1] == 0;
        d.cc_major = ccs[ci][0];
        d.cc_minor = ccs[ci][1];
        for (size_t i = 0; i < sizeof buckets / sizeof buckets[0]; i++) {
            int in_fwd90 = 0, in_bwd90 = 0;
            for (size_t j = 0; j < NSM90; j++)
                in_fwd90 |= sm90_tiles[j].bucket == buckets[i];
            for (size_t j = 0; j < NBWD90; j++)
                in_bwd90 |= bwd_sm90_tiles[j].bucket == buckets[i];
#if !defined(FA2_WITH_SM90A)
            in_fwd90 = in_bwd90 = 0; /* no sm_90a code: mma.sync everywhere */
#endif
            for (int det = 0; det < 2; det++) {
                fa2_problem_t p;
                fa2_plan_t pl;
                fa2_problem_init(&p, FA2_DTYPE_BF16, 2, 1000, 1000, 4, 2, buckets[i]);
                p.deterministic = det;
                assert_int_equal(fa2_plan(&p, &d, &pl), FA2_SUCCESS);
                assert_int_equal(pl.fwd_arch, hopper && in_fwd90 ? 90 : 80);
                assert_int_equal(pl.bwd_arch, hopper && in_bwd90 ? 90 : 80);
                if (pl.bwd_arch == 80) {
                    const bwd_tile_t *t = bwd_tile_of(buckets[i]);
                    assert_int_equal(pl.bwd_block_n, t->block_n);
                    assert_int_equal(pl.bwd_block_m, t->block_m);
                    assert_int_equal(pl.bwd_smem_bytes, bwd_smem_of(t, det));
                } else {
                    assert_int_equal(pl.bwd_block_n % 64, 0);
                    assert_int_equal(pl.bwd_block_m % 64, 0);
                    assert_true(pl.bwd_smem_bytes <= d.smem_per_block_optin);
                }
                if (pl.fwd_arch == 90) {
                    assert_int_equal(pl.block_m % 64, 0);
                    /* 16 rows per math warp, and a producer warpgroup in the producer
                     * layout (check_plan pins which) */
                    assert_true(pl.warps == pl.block_m / 16 || pl.warps == pl.block_m / 16 + 4);
                    const int producer = pl.warps == pl.block_m / 16 + 4;
                    assert_int_equal(pl.smem_bytes,
                                     producer ? fa2_fwd_sm90_producer_smem_bytes(
                                                    buckets[i], pl.block_m, pl.block_n)
                                              : fa2_fwd_sm90_smem_bytes(buckets[i], pl.block_m,
                                                                        pl.block_n));
                }
                check_plan(&p, &d, &pl);
                fwd90 += pl.fwd_arch == 90;
                bwd90 += pl.bwd_arch == 90;
            }
        }
    }
#if defined(FA2_WITH_SM90A)
    /* The H200 runs the Hopper kernels for every bucket of their tables, both modes:
     * the checks above are not vacuous. */
    assert_int_equal(fwd90, 2 * (int)NSM90);
    assert_int_equal(bwd90, 2 * (int)NBWD90);
    assert_true(NSM90 > 0 && NBWD90 > 0);
#else
    assert_int_equal(fwd90, 0);
    assert_int_equal(bwd90, 0);
#endif
}

/* Each rule value is reachable, with a device sized to make it so. */
static void test_rules(void **state)
{
    fa2_problem_t p;
    fa2_plan_t pl;
    const tile_t *t = tile_of(128);
    fa2_device_info_t d;
    (void)state;
    /* An sm_80 device throughout: the mma.sync table, on every build. */
    fa2_problem_init(&p, FA2_DTYPE_FP16, 1, 64, 64, 1, 1, 128);

    /* seed_br == Br exactly: M = 4 d Br elements. */
    d = device80(4 * 128 * t->br * 2);
    assert_int_equal(fa2_plan(&p, &d, &pl), FA2_SUCCESS);
    assert_int_equal(pl.seed_br, t->br);
    assert_int_equal(pl.block_m_rule, FA2_RULE_SEED_SRAM);

    /* seed_br one above Br: rounding down to 16 gives Br. */
    d = device80((4 * 128 * t->br + 1) * 2);
    assert_int_equal(fa2_plan(&p, &d, &pl), FA2_SUCCESS);
    assert_int_equal(pl.seed_br, t->br + 1);
    assert_int_equal(pl.block_m_rule, FA2_RULE_MMA_MULTIPLE);

    /* Plenty of memory: the compiled tile caps both sides. */
    d = device80(232448);
    assert_int_equal(fa2_plan(&p, &d, &pl), FA2_SUCCESS);
    assert_int_equal(pl.block_m_rule, FA2_RULE_KERNEL_TILE);
    assert_int_equal(pl.block_n_rule, FA2_RULE_KERNEL_TILE);

    /* Bc = min(seed, d) = d: at d = 64 with a 64-row compiled Bc. */
    if (tile_of(64)->bc == 64) {
        fa2_problem_init(&p, FA2_DTYPE_FP16, 1, 64, 64, 1, 1, 64);
        assert_int_equal(fa2_plan(&p, &d, &pl), FA2_SUCCESS);
        assert_int_equal(pl.seed_bc, 64);
        assert_int_equal(pl.block_n_rule, FA2_RULE_HEAD_DIM);
    }
}

/* Head dims between buckets run in the next one up; the scale uses the real d. */
static void test_bucket_mapping_and_scale(void **state)
{
    static const int64_t d_in[] = {8, 32, 40, 64, 72, 96, 104, 128, 136, 192, 200, 256};
    static const int64_t d_out[] = {32, 32, 64, 64, 96, 96, 128, 128, 192, 192, 256, 256};
    fa2_device_info_t d = device(232448);
    (void)state;
    for (size_t i = 0; i < sizeof d_in / sizeof d_in[0]; i++) {
        fa2_problem_t p;
        fa2_plan_t pl;
        fa2_problem_init(&p, FA2_DTYPE_FP16, 1, 1, 1, 1, 1, d_in[i]);
        assert_int_equal(fa2_plan(&p, &d, &pl), FA2_SUCCESS);
        assert_int_equal(pl.head_dim_bucket, d_out[i]);
        assert_int_equal(pl.problem.head_dim, d_in[i]);
        assert_true(pl.problem.softmax_scale == 1.0f / sqrtf((float)d_in[i]));
        p.softmax_scale = 0.25f;
        assert_int_equal(fa2_plan(&p, &d, &pl), FA2_SUCCESS);
        assert_true(pl.problem.softmax_scale == 0.25f);
    }
}

/* The decode kernel's split count, worked by hand for an H200 (132 multiprocessors,
 * 228 KiB each: one 132 KiB decode block per multiprocessor at d = 128): batch 1, GQA
 * 32:8, one query token, 8192 keys: 8 (sequence, kv head) pairs, so ceil(132 / 8) = 17
 * splits fill one wave; the workspace then holds 17 x 32 LSEs (2176 bytes, padded to
 * 2304) and 17 x 32 x 128 fp32 values of O. Without max_splits: no split, no workspace.
 * Five query tokens of GQA 4 (20 rows) are past the decode kernel's 16. */
static void test_splits(void **state)
{
    (void)state;
    const fa2_device_info_t d = device(232448);
    fa2_problem_t p;
    fa2_plan_t pl;
    fa2_problem_init(&p, FA2_DTYPE_BF16, 1, 1, 8192, 32, 8, 128);
    p.max_splits = 64;
    assert_int_equal(fa2_plan(&p, &d, &pl), FA2_SUCCESS);
    /* 8 kv heads; 132 multiprocessors holding one block each. 16 splits fill 128/132 of
     * one wave, 33 all of two (the best), 15 only 120/132: 16 is the smallest within 5 %
     * of the best. */
    assert_int_equal(pl.splits, 16);
    assert_int_equal(pl.grid_blocks, 8 * 16);
    assert_int_equal(pl.workspace_bytes, 16 * 32 * 4 + 16 * 32 * 128 * 4);
    assert_int_equal(pl.fwd_kernel, FA2_FWD_KERNEL_DECODE);
    assert_int_equal(pl.decode_stages, 3);
    assert_int_equal(pl.split_rows, 1);
    assert_int_equal(pl.split_lse_offset, 0);
    assert_int_equal(pl.split_o_offset, 16 * 32 * 4);
    /* A100 (163 KiB a block, 108 multiprocessors): two stages, 132 KiB, one block a
     * multiprocessor; 13 splits fill 104/108 (best within 5 %: 27 fill 216/216). */
    fa2_device_info_t other = device80(166912);
    other.sm_count = 108;
    other.smem_per_sm = 167936;
    assert_int_equal(fa2_plan(&p, &other, &pl), FA2_SUCCESS);
    assert_int_equal(pl.smem_bytes, 16 * 256 + 4 * 2 * 2 * 32 * 256);
    assert_int_equal(pl.decode_stages, 2);
    assert_int_equal(pl.splits, 13);
    other = device80(101376); /* 99 KiB: no depth fits, the prefill kernels */
    assert_int_equal(fa2_plan(&p, &other, &pl), FA2_SUCCESS);
    assert_int_equal(pl.splits, 0);
    assert_int_equal(pl.decode_stages, 0);
    assert_int_equal(pl.fwd_kernel, FA2_FWD_KERNEL_MMA);
    p.max_splits = 8; /* capped */
    assert_int_equal(fa2_plan(&p, &d, &pl), FA2_SUCCESS);
    assert_int_equal(pl.splits, 8);
    p.max_splits = 0;
    assert_int_equal(fa2_plan(&p, &d, &pl), FA2_SUCCESS);
    assert_int_equal(pl.splits, 1);
    assert_int_equal(pl.workspace_bytes, 0);
    p.seqlen_k = 64; /* 2 tiles: fewer than one per warp, no split */
    p.max_splits = 64;
    assert_int_equal(fa2_plan(&p, &d, &pl), FA2_SUCCESS);
    assert_int_equal(pl.splits, 1);
    fa2_problem_init(&p, FA2_DTYPE_BF16, 1, 17, 8192, 32, 8, 128); /* 17 tokens */
    assert_int_equal(fa2_plan(&p, &d, &pl), FA2_SUCCESS);
    assert_int_equal(pl.splits, 0);
    /* Batch-invariant: 256 key tiles of 32, 32 tiles per split (64 splits could hold
     * them 4 a split: the floor of 32 wins), 8 splits whatever the batch. */
    for (int64_t batch = 1; batch <= 64; batch *= 4) {
        fa2_problem_init(&p, FA2_DTYPE_BF16, batch, 1, 8192, 32, 8, 128);
        p.max_splits = 64;
        p.batch_invariant = 1;
        assert_int_equal(fa2_plan(&p, &d, &pl), FA2_SUCCESS);
        assert_int_equal(pl.splits, 8);
        assert_int_equal(pl.split_tiles, 32);
    }
    p.seqlen_k = 1 << 20; /* 32768 tiles: 64 splits of 512 */
    assert_int_equal(fa2_plan(&p, &d, &pl), FA2_SUCCESS);
    assert_int_equal(pl.splits, 64);
    assert_int_equal(pl.split_tiles, 512);
    p.batch_invariant = 2;
    assert_int_equal(fa2_plan(&p, &d, &pl), FA2_ERROR_INVALID_SIZE);
    p.max_splits = FA2_MAX_SPLITS + 1;
    assert_int_equal(fa2_plan(&p, &d, &pl), FA2_ERROR_INVALID_SIZE);
}

/* Grid size for lengths around the tile edge, and a big batch x heads product. */
static void test_grid(void **state)
{
    static const int64_t lens[] = {1, 127, 128, 129, 255, 256, 1000, FA2_MAX_SEQLEN};
    fa2_device_info_t d = device(232448);
    (void)state;
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        fa2_problem_t p;
        fa2_plan_t pl;
        int64_t br;
        fa2_problem_init(&p, FA2_DTYPE_BF16, 5, lens[i], 3, 6, 3, 64);
        assert_int_equal(fa2_plan(&p, &d, &pl), FA2_SUCCESS);
        br = pl.block_m;
        if (!pl.splits) /* else: one block per (sequence, kv head, split) */
            assert_int_equal(pl.grid_blocks, 5 * 6 * ((lens[i] + br - 1) / br));
        check_plan(&p, &d, &pl);
    }
}

/* Plan options are copied unchanged (causal, windows, strides, dtype). */
static void test_problem_copied(void **state)
{
    fa2_device_info_t d = device(232448);
    fa2_problem_t p;
    fa2_plan_t pl;
    (void)state;
    fa2_problem_init(&p, FA2_DTYPE_BF16, 2, 33, 65, 8, 4, 96);
    p.causal = 1;
    p.window_left = 16;
    p.window_right = 0;
    p.softmax_scale = 0.125f;
    p.k_batch_stride = 0;
    assert_int_equal(fa2_plan(&p, &d, &pl), FA2_SUCCESS);
    assert_memory_equal(&pl.problem, &p, sizeof p);
}

/* The Hopper forward reads dense and packed K/V through TMA, whose tensor
 * maps need a positive stride on every dimension that has more than one index: a
 * layout that repeats K or V along one (stride 0) gets the mma.sync kernels, on an
 * H200 too; strides of extent-1 dimensions and paged caches do not matter. */
static void test_tma_layouts(void **state)
{
    fa2_device_info_t d = device(232448);
    fa2_problem_t p;
    fa2_plan_t pl;
    (void)state;
#if defined(FA2_WITH_SM90A)
    const int want_hopper = 90;
#else
    const int want_hopper = 80;
#endif
    fa2_problem_init(&p, FA2_DTYPE_BF16, 2, 300, 500, 8, 4, 128);
    assert_true(fa2_kv_tma_ready(&p));
    assert_int_equal(fa2_plan(&p, &d, &pl), FA2_SUCCESS);
    assert_int_equal(pl.fwd_arch, want_hopper);

    fa2_problem_t rep = p; /* every kv head reads the same K */
    rep.k_head_stride = 0;
    assert_false(fa2_kv_tma_ready(&rep));
    assert_int_equal(fa2_plan(&rep, &d, &pl), FA2_SUCCESS);
    assert_int_equal(pl.fwd_arch, 80);
    assert_int_equal(pl.block_m, tile_of(128)->br);
    assert_int_equal(pl.block_n, tile_of(128)->bc);
    rep = p; /* one V row for every key */
    rep.v_seq_stride = 0;
    assert_false(fa2_kv_tma_ready(&rep));
    rep = p; /* the batch's sequences share K */
    rep.k_batch_stride = 0;
    assert_false(fa2_kv_tma_ready(&rep));

    fa2_problem_t one = p; /* extent-1 dimensions: any stride */
    one.batch = 1;
    one.heads_q = one.heads_kv = 1;
    one.k_batch_stride = one.v_batch_stride = one.k_head_stride = one.v_head_stride = 0;
    assert_true(fa2_kv_tma_ready(&one));
    assert_int_equal(fa2_plan(&one, &d, &pl), FA2_SUCCESS);
    assert_int_equal(pl.fwd_arch, want_hopper);

    fa2_problem_t packed = p; /* a packed batch: its batch strides are 0 */
    packed.total_q = 1000;
    packed.total_k = 1500;
    packed.q_batch_stride = packed.k_batch_stride = packed.v_batch_stride = 0;
    packed.o_batch_stride = 0;
    assert_true(fa2_kv_tma_ready(&packed));
    assert_int_equal(fa2_plan(&packed, &d, &pl), FA2_SUCCESS);
    assert_int_equal(pl.fwd_arch, want_hopper);
    fa2_problem_t overlap = packed; /* rows 8 elements apart (overlapping), 2^31 - 1 of
                                       them: test_varlen_gpu's Hopper limit case */
    overlap.total_k = INT32_MAX;
    overlap.heads_kv = 1;
    overlap.k_seq_stride = overlap.v_seq_stride = 8;
    assert_true(fa2_kv_tma_ready(&overlap));
    assert_int_equal(fa2_plan(&overlap, &d, &pl), FA2_SUCCESS);
    assert_int_equal(pl.fwd_arch, want_hopper);
    packed.k_seq_stride = 0;
    assert_false(fa2_kv_tma_ready(&packed));

    fa2_problem_t paged = packed; /* pages are not read through tensor maps */
    paged.total_k = 0;
    paged.page_size = 16;
    paged.num_pages = 100;
    paged.pages_per_seq = 32;
    paged.k_seq_stride = 0;
    assert_true(fa2_kv_tma_ready(&paged));
}

/* A paged cache at d = 128 on the Hopper forward runs the producer layout where
 * src/plan_forward.c says so (softcap off, or bf16 with a softcap of at most
 * FA2_MAX_BOUNDED_SOFTCAP and no ALiBi), at every page size: the plan reports its tile
 * (two math warpgroups and the producer's, 128 rows), its grid and shared memory; a
 * dense batch as the tuning switch says. */
static void test_paged_producer_tile(void **state)
{
    fa2_device_info_t d = device(232448);
    fa2_problem_t p;
    fa2_plan_t pl;
    (void)state;
    fa2_problem_init(&p, FA2_DTYPE_BF16, 3, 300, 0, 8, 2, 128);
    p.total_q = 500;
    p.q_batch_stride = p.o_batch_stride = 0;
    p.causal = 1;
    p.num_pages = 200;
    p.pages_per_seq = 40;
    const struct {
        int32_t dtype;
        int64_t page_size, head_dim;
        float softcap;
        int alibi, producer;
    } cases[] = {
        {FA2_DTYPE_BF16, 16, 128, 0.0f, 0, 1},  {FA2_DTYPE_BF16, 64, 128, 0.0f, 0, 1},
        {FA2_DTYPE_FP16, 128, 128, 0.0f, 1, 1}, {FA2_DTYPE_BF16, 17, 128, 30.0f, 0, 1},
        {FA2_DTYPE_BF16, 16, 128, FA2_MAX_BOUNDED_SOFTCAP, 0, 1},
        {FA2_DTYPE_BF16, 16, 128, FA2_MAX_BOUNDED_SOFTCAP + 0.5f, 0, 0},
        {FA2_DTYPE_FP16, 16, 128, 30.0f, 0, 0},
        {FA2_DTYPE_BF16, 64, 128, 30.0f, 1, 0}, {FA2_DTYPE_BF16, 16, 64, 0.0f, 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        fa2_problem_t c = p;
        c.dtype = cases[i].dtype;
        c.head_dim = cases[i].head_dim;
        c.page_size = cases[i].page_size;
        c.softcap = cases[i].softcap;
        c.alibi = cases[i].alibi;
        c.q_seq_stride = c.o_seq_stride = c.heads_q * c.head_dim;
        c.q_head_stride = c.o_head_stride = c.head_dim;
        c.k_seq_stride = c.v_seq_stride = c.heads_kv * c.head_dim;
        c.k_head_stride = c.v_head_stride = c.head_dim;
        c.k_batch_stride = c.v_batch_stride = c.page_size * c.heads_kv * c.head_dim;
        assert_int_equal(fa2_plan(&c, &d, &pl), FA2_SUCCESS);
#if defined(FA2_WITH_SM90A)
        const int producer = cases[i].producer;
        assert_int_equal(pl.fwd_arch, 90);
        assert_int_equal(pl.block_m, producer ? 64 * FA2_WGMMA_PRODUCER_WARPGROUPS : 64);
        assert_int_equal(pl.warps, producer ? 4 * (FA2_WGMMA_PRODUCER_WARPGROUPS + 1) : 4);
        assert_int_equal(pl.smem_bytes,
                         producer ? fa2_fwd_sm90_producer_smem_bytes(c.head_dim, pl.block_m,
                                                                     pl.block_n)
                                  : fa2_fwd_sm90_smem_bytes(c.head_dim, pl.block_m, pl.block_n));
        assert_int_equal(pl.grid_blocks,
                         c.batch * c.heads_q * ((300 + pl.block_m - 1) / pl.block_m));
        assert_int_equal(pl.block_n, 128);
        if (producer)
            assert_int_equal(pl.fwd_kernel, FA2_FWD_KERNEL_WGMMA_PRODUCER);
        else
            assert_true(pl.fwd_kernel == FA2_FWD_KERNEL_WGMMA_PAGED_TMA ||
                        pl.fwd_kernel == FA2_FWD_KERNEL_WGMMA_PAGED_COPY);
#endif
    }
    /* A dense batch takes it when its rows reach the
     * second math warpgroup's: 65 rows and more; 64 keep the one-warpgroup tile. */
    static const struct {
        int64_t seqlen_q;
        int producer;
    } dense_cases[] = {{1000, 1}, {65, 1}, {64, 0}, {17, 0}};
    for (size_t i = 0; i < sizeof dense_cases / sizeof dense_cases[0]; ++i) {
        fa2_problem_t dense;
        fa2_problem_init(&dense, FA2_DTYPE_BF16, 2, dense_cases[i].seqlen_q, 1000, 8, 2, 128);
        assert_int_equal(fa2_plan(&dense, &d, &pl), FA2_SUCCESS);
#if defined(FA2_WITH_SM90A)
        const int producer = dense_cases[i].producer;
        assert_int_equal(pl.block_m, producer ? 64 * FA2_WGMMA_PRODUCER_WARPGROUPS : 64);
        assert_int_equal(pl.warps, producer ? 4 * (FA2_WGMMA_PRODUCER_WARPGROUPS + 1) : 4);
#endif
    }
}

/* A paged cache's loader on the Hopper forward, outside the producer layout: TMA boxes
 * of min(page_size, Bc) rows where pages and tiles nest, a box is whole 8-row swizzle
 * atoms and at least 32 rows; else cp.async. Bc is 128 at d = 64 and 64 at d = 256; at
 * d = 128 an fp16 softcap keeps the one-warpgroup tile. */
static void test_paged_loaders(void **state)
{
    (void)state;
#if !defined(FA2_WITH_SM90A)
    skip(); /* a build without the Hopper kernels plans none of them */
#else
    const fa2_device_info_t d = device(232448);
    static const struct {
        int64_t head_dim, page_size;
        float softcap;
        int32_t kernel, box;
    } cases[] = {
        {64, 256, 0.0f, FA2_FWD_KERNEL_WGMMA_PAGED_TMA, 128},
        {64, 128, 0.0f, FA2_FWD_KERNEL_WGMMA_PAGED_TMA, 128},
        {64, 64, 0.0f, FA2_FWD_KERNEL_WGMMA_PAGED_TMA, 64},
        {64, 32, 0.0f, FA2_FWD_KERNEL_WGMMA_PAGED_TMA, 32},
        {64, 16, 0.0f, FA2_FWD_KERNEL_WGMMA_PAGED_COPY, 0},
        {64, 48, 0.0f, FA2_FWD_KERNEL_WGMMA_PAGED_COPY, 0},
        {64, 320, 0.0f, FA2_FWD_KERNEL_WGMMA_PAGED_COPY, 0},
        {256, 128, 0.0f, FA2_FWD_KERNEL_WGMMA_PAGED_TMA, 64},
        {256, 1, 0.0f, FA2_FWD_KERNEL_WGMMA_PAGED_COPY, 0},
        {128, 256, 0.0f, FA2_FWD_KERNEL_WGMMA_PRODUCER, 0},
        {128, 256, 30.0f, FA2_FWD_KERNEL_WGMMA_PAGED_TMA, 128},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        fa2_problem_t p;
        fa2_plan_t pl;
        fa2_problem_init_paged(&p, FA2_DTYPE_FP16, 2, 300, 4096, 600, 8, 2, cases[i].head_dim,
                               cases[i].page_size, 4096 / cases[i].page_size * 2 + 3,
                               4096 / cases[i].page_size + 1);
        p.softcap = cases[i].softcap;
        assert_int_equal(fa2_plan(&p, &d, &pl), FA2_SUCCESS);
        assert_int_equal(pl.fwd_kernel, cases[i].kernel);
        assert_int_equal(pl.page_box_rows, cases[i].box);
        assert_int_equal(pl.fwd_scores, cases[i].softcap ? FA2_SCORES_GENERAL : FA2_SCORES_PLAIN);
    }
#endif
}

/* Which devices run a plan's kernels (fa2_forward / fa2_backward refuse the others with
 * FA2_ERROR_DEVICE_MISMATCH before queuing anything). */
static void test_device_runs_plan(void **state)
{
    fa2_device_info_t h200 = device(232448), a100 = device(166912);
    fa2_problem_t p;
    fa2_plan_t on_h200, on_a100;
    (void)state;
    a100.cc_major = 8;
    fa2_problem_init(&p, FA2_DTYPE_BF16, 1, 512, 512, 4, 4, 128);
    assert_int_equal(fa2_plan(&p, &h200, &on_h200), FA2_SUCCESS);
    assert_int_equal(fa2_plan(&p, &a100, &on_a100), FA2_SUCCESS);
    for (int bwd = 0; bwd < 2; ++bwd) {
        /* a plan runs where it was made */
        assert_true(fa2_device_runs_plan(&on_h200, bwd, 9, 0, 232448));
        assert_true(fa2_device_runs_plan(&on_a100, bwd, 8, 0, 166912));
        /* mma.sync kernels of an A100 plan fit an H200 too */
        assert_true(fa2_device_runs_plan(&on_a100, bwd, 9, 0, 232448));
        /* below sm_80 nothing runs */
        assert_false(fa2_device_runs_plan(&on_a100, bwd, 7, 5, 232448));
        /* too little shared memory: one byte short of what the kernels ask */
        const int64_t need = bwd ? on_a100.bwd_smem_bytes : on_a100.smem_bytes;
        assert_false(fa2_device_runs_plan(&on_a100, bwd, 8, 0, need - 1));
        assert_true(fa2_device_runs_plan(&on_a100, bwd, 8, 0, need));
    }
#if defined(FA2_WITH_SM90A)
    /* Hopper kernels run on sm_90 alone, not on sm_80 nor on a later sm_100 */
    assert_int_equal(on_h200.fwd_arch, 90);
    assert_false(fa2_device_runs_plan(&on_h200, 0, 8, 0, 232448));
    assert_false(fa2_device_runs_plan(&on_h200, 0, 10, 0, 232448));
    assert_int_equal(on_h200.bwd_arch, 90);
    assert_false(fa2_device_runs_plan(&on_h200, 1, 12, 0, 232448));
#endif
}

/* The plan's description: the line's reasons follow the planner's choices, the text
 * is cut to the buffer with its whole length reported, and bad input leaves every
 * output untouched. */
static char describe_text[1024];

static const char *describe(const fa2_plan_t *plan)
{
    size_t length = 0;
    assert_int_equal(fa2_plan_describe(plan, describe_text, sizeof describe_text, &length),
                     FA2_SUCCESS);
    assert_int_equal(length, strlen(describe_text));
    assert_true(length < sizeof describe_text - 1);
    return describe_text;
}

static void test_plan_describe(void **state)
{
    (void)state;
    const fa2_device_info_t h200 = device(232448), a100 = device80(166912),
                            rtx = device80(101376);
    fa2_problem_t p;
    fa2_plan_t plan;

    /* GQA 32:8, one token: the decode kernel, 4 rows of its 16 */
    fa2_problem_init(&p, FA2_DTYPE_BF16, 1, 1, 8192, 32, 8, 128);
    p.causal = 1;
    assert_int_equal(fa2_plan(&p, &h200, &plan), FA2_SUCCESS);
    assert_int_equal(plan.fwd_kernel, FA2_FWD_KERNEL_DECODE);
    assert_non_null(strstr(describe(&plan), "forward: the decode kernel"));
    assert_non_null(strstr(describe_text, "4 query rows per kv head (4 heads x 1 tokens) in 1 row "
                                          "tile of 16"));
    assert_non_null(strstr(describe_text, "backward: "));

    /* MQA 64:1, one token: 64 rows in 4 row tiles of the decode kernel */
    fa2_problem_init(&p, FA2_DTYPE_BF16, 1, 1, 8192, 64, 1, 128);
    assert_int_equal(fa2_plan(&p, &h200, &plan), FA2_SUCCESS);
    assert_int_equal(plan.fwd_kernel, FA2_FWD_KERNEL_DECODE);
    assert_non_null(strstr(describe(&plan), "64 query rows per kv head (64 heads x 1 tokens) "
                                            "in 4 row tiles of 16"));

    /* 17 query tokens: more than the decode kernel takes */
    fa2_problem_init(&p, FA2_DTYPE_BF16, 1, 17, 8192, 64, 1, 128);
    assert_int_equal(fa2_plan(&p, &h200, &plan), FA2_SUCCESS);
    assert_int_not_equal(plan.fwd_kernel, FA2_FWD_KERNEL_DECODE);
    assert_non_null(strstr(describe(&plan), "not the decode kernel: 17 query tokens exceed "
                                            "its 16"));
#if defined(FA2_WITH_SM90A)
    assert_non_null(strstr(describe_text, "the Hopper wgmma kernel"));
    assert_non_null(strstr(describe_text, "K and V suit TMA"));
#endif

    /* d = 96: no Hopper kernel, no decode kernel for the bucket */
    fa2_problem_init(&p, FA2_DTYPE_FP16, 2, 300, 300, 8, 8, 96);
    assert_int_equal(fa2_plan(&p, &h200, &plan), FA2_SUCCESS);
    assert_non_null(strstr(describe(&plan), "forward: the mma.sync kernel (Br "));
#if defined(FA2_WITH_SM90A)
    assert_non_null(strstr(describe_text, "no Hopper kernel for head-dim bucket 96"));
#endif
    assert_non_null(strstr(describe_text, "none for head-dim bucket 96"));

    /* an A100: not sm_90; the 2-stage decode kernel */
    fa2_problem_init(&p, FA2_DTYPE_BF16, 4, 2, 4096, 32, 8, 128);
    assert_int_equal(fa2_plan(&p, &a100, &plan), FA2_SUCCESS);
    assert_int_equal(plan.fwd_kernel, FA2_FWD_KERNEL_DECODE);
    assert_non_null(strstr(describe(&plan), "(2 K/V stages a warp"));
    fa2_problem_init(&p, FA2_DTYPE_BF16, 4, 512, 512, 32, 8, 128);
    assert_int_equal(fa2_plan(&p, &a100, &plan), FA2_SUCCESS);
#if defined(FA2_WITH_SM90A)
    assert_non_null(strstr(describe(&plan), "the device is sm_80, the Hopper kernels need "
                                            "sm_90"));
#else
    assert_non_null(strstr(describe(&plan), "this build has no Hopper (sm_90a) code"));
#endif

    /* 99 KiB: no decode kernel fits; d = 256 takes the compact tile */
    fa2_problem_init(&p, FA2_DTYPE_BF16, 1, 1, 4096, 8, 8, 256);
    assert_int_equal(fa2_plan(&p, &rtx, &plan), FA2_SUCCESS);
    assert_int_equal(plan.fwd_kernel, FA2_FWD_KERNEL_MMA_COMPACT);
    assert_non_null(strstr(describe(&plan), "the mma.sync kernel, compact tile"));
    assert_non_null(strstr(describe_text, "the main tile's "));
    assert_non_null(strstr(describe_text, "exceed the device's 99 KiB"));
    assert_non_null(strstr(describe_text, "not the decode kernel: its "));

    /* Cut to fit, NUL-terminated, the whole length reported; size 0 only sizes */
    size_t whole = 0, cut_length = 0;
    assert_int_equal(fa2_plan_describe(&plan, NULL, 0, &whole), FA2_SUCCESS);
    assert_int_equal(whole, strlen(describe(&plan)));
    char small[17];
    memset(small, 'x', sizeof small);
    assert_int_equal(fa2_plan_describe(&plan, small, 16, &cut_length), FA2_SUCCESS);
    assert_int_equal(cut_length, whole);
    assert_int_equal(strlen(small), 15);
    assert_memory_equal(small, describe_text, 15);
    assert_int_equal(small[16], 'x');

    /* Bad input: a status, nothing written */
    size_t untouched = 12345;
    memset(small, 'x', sizeof small);
    assert_int_equal(fa2_plan_describe(NULL, small, sizeof small, &untouched),
                     FA2_ERROR_NULL_POINTER);
    assert_int_equal(fa2_plan_describe(&plan, NULL, 8, &untouched), FA2_ERROR_NULL_POINTER);
    fa2_plan_t edited = plan;
    edited.struct_size = 8;
    assert_int_equal(fa2_plan_describe(&edited, small, sizeof small, &untouched),
                     FA2_ERROR_STRUCT_SIZE);
    edited = plan;
    edited.block_m = 7;
    assert_int_equal(fa2_plan_describe(&edited, small, sizeof small, &untouched),
                     FA2_ERROR_BAD_PLAN);
    assert_non_null(strstr(fa2_last_error(), "changed after fa2_plan"));
    assert_int_equal(untouched, 12345);
    assert_int_equal(small[0], 'x');
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tile_table),
        cmocka_unit_test(test_properties_sweep),
        cmocka_unit_test(test_h200_every_bucket),
        cmocka_unit_test(test_99k_every_head_dim),
        cmocka_unit_test(test_h200_worked_example),
        cmocka_unit_test(test_kernel_family),
        cmocka_unit_test(test_rules),
        cmocka_unit_test(test_bucket_mapping_and_scale),
        cmocka_unit_test(test_grid),
        cmocka_unit_test(test_splits),
        cmocka_unit_test(test_paged_loaders),
        cmocka_unit_test(test_device_runs_plan),
        cmocka_unit_test(test_tma_layouts),
        cmocka_unit_test(test_paged_producer_tile),
        cmocka_unit_test(test_problem_copied),
        cmocka_unit_test(test_plan_describe),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
