/* fa2_plan: validate, then size the tiles from the FlashAttention seed rule and the
 * compiled kernel table. The rule and its units: docs/planning.md. */
#include <math.h>
#include <string.h>

#include "common/bwd_rows.h"
#include "sm90/bwd_sm90_tiles.h"
#include "sm80/bwd_tiles.h"
#include "sm80/fwd_tiles.h"
#include "decode/decode_tiles.h"
#include "internal.h"

static int64_t ceil_div(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

/* One tile side. `seed` is the seed's SRAM bound, `uncapped` the value before the
 * min(., d) of Bc (== seed for Br), `kernel` the compiled side. The kernel only runs
 * its compiled side, so that is the value; the rule says what fixed it:
 *  - rounded seed above the kernel's side: the kernel capped it;
 *  - rounded seed equal to it: the seed (or d, or the rounding) fixed it;
 *  - rounded seed below it: the seed's model (Q, K, V, O all Bxd in SRAM) is more
 *    conservative than the kernel, whose exact shared memory fa2_validate_problem
 *    has already checked against the device; the kernel's side stands. */
static int32_t pick_rule(int64_t seed, int64_t uncapped, int64_t kernel)
{
    int64_t rounded = seed / 16 * 16;
    if (rounded != kernel)
        return FA2_RULE_KERNEL_TILE;
    if (rounded != seed)
        return FA2_RULE_MMA_MULTIPLE;
    if (seed < uncapped)
        return FA2_RULE_HEAD_DIM;
    return FA2_RULE_SEED_SRAM;
}

int fa2_bwd_workspace_layout(const fa2_problem_t *pr, int dq_by_atomics,
                             fa2_bwd_workspace_t *ws)
{
    int64_t d_bytes, padded, accum = 0, total;
    /* one float per LSE row: validation bounded the LSE, the same size */
    d_bytes = fa2_lse_rows(pr) * 4;
    if (!fa2_add_i64(d_bytes, (256 - d_bytes % 256) % 256, &padded))
        return 0;
    total = padded;
    if (dq_by_atomics &&
        (!fa2_mul_i64(d_bytes, pr->head_dim, &accum) || !fa2_add_i64(padded, accum, &total)))
        return 0;
    ws->accum_offset = dq_by_atomics ? padded : 0;
    ws->total_bytes = total;
    return 1;
}

int fa2_bwd_dq_by_atomics(int deterministic, int bwd_arch, int64_t bucket)
{
    if (deterministic)
        return 0;
#if defined(FA2_WITH_SM90A)
    if (bwd_arch == 90 && fa2_bwd_sm90_split(bucket))
        return 0;
#else
    (void)bwd_arch;
    (void)bucket;
#endif
    return 1;
}

/* The backward's tiles for `bucket`, its shared memory and workspace. When the
 * backward cannot run, bwd_supported = 0 and bwd_status says why (fa2_backward
 * returns it). */
static void plan_backward(const fa2_problem_t *pr, const fa2_device_info_t *device,
                          int64_t bucket, fa2_plan_t *out)
{
    int64_t grid, row_grid, slices = 1;
    fa2_bwd_workspace_t ws;
    int atomics;
    /* The bucket's main mma.sync tiles, or its compact ones where the main ones do not
     * fit the device in this mode. Every bucket fa2_plan accepts has a main row.
     * Default mode: the dK/dV kernel also adds dQ with atomics (dS through shared
     * memory, an fp32 dQ accumulator in the workspace); deterministic mode: a dQ
     * kernel of its own instead. */
#define FA2_BWD_ROW(d, bn, bm, w, sl, qbm, qbn, qw)                                   \
    if (bucket == d) {                                                                \
        const int64_t cols = fa2_fwd_smem_cols(d);                                    \
        const int64_t dkdv = fa2_bwd_dkdv_smem_bytes(cols, bn, bm);                   \
        const int64_t other = pr->deterministic ? fa2_bwd_dq_smem_bytes(cols, qbm, qbn) \
                                                : dkdv + fa2_bwd_ds_smem_bytes(bn, bm);  \
        out->bwd_block_n = bn;                                                        \
        out->bwd_block_m = bm;                                                        \
        out->bwd_dq_block_m = qbm;                                                    \
        out->bwd_dq_block_n = qbn;                                                    \
        out->bwd_smem_bytes = dkdv > other ? dkdv : other;                            \
        out->bwd_kernel = kind;                                                       \
        slices = sl;                                                                  \
    }
    int32_t kind = FA2_BWD_KERNEL_MMA;
    FA2_BWD_TILES(FA2_BWD_ROW)
    if (out->bwd_smem_bytes > device->smem_per_block_optin) {
        kind = FA2_BWD_KERNEL_MMA_COMPACT;
        FA2_BWD_COMPACT_TILES(FA2_BWD_ROW)
    }
#undef FA2_BWD_ROW
    out->bwd_arch = 80;
#if defined(FA2_WITH_SM90A)
    /* sm_90: the Hopper kernels where they have a row, both modes: dQ by atomics in
     * default mode, or by the Hopper dQ kernel (deterministic mode, and split rows). */
    if (fa2_cc_runs_sm90a(device->cc_major, device->cc_minor)) {
#define FA2_BWD_SM90_ROW(d, wg, bm, split)                                      \
        if (bucket == d) {                                                      \
            out->bwd_block_n = (int32_t)fa2_bwd_sm90_block_n(wg, split);        \
            out->bwd_block_m = bm;                                              \
            out->bwd_smem_bytes =                                               \
                fa2_bwd_sm90_smem_bytes(d, out->bwd_block_n, bm, split);        \
            if (split || pr->deterministic) {                                   \
                out->bwd_dq_block_m = FA2_BWD_SM90_DQ_BLOCK_M;                  \
                out->bwd_dq_block_n = FA2_BWD_SM90_DQ_BLOCK_N;                  \
                if (fa2_bwd_sm90_dq_smem_bytes(d) > out->bwd_smem_bytes)        \
                    out->bwd_smem_bytes = fa2_bwd_sm90_dq_smem_bytes(d);        \
            }                                                                   \
            out->bwd_arch = 90;                                                 \
            out->bwd_kernel = FA2_BWD_KERNEL_WGMMA;                             \
            slices = 1;                                                         \
        }
        FA2_BWD_SM90_TILES(FA2_BWD_SM90_ROW)
#undef FA2_BWD_SM90_ROW
    }
#endif
    out->bwd_status = FA2_SUCCESS;
    atomics = fa2_bwd_dq_by_atomics(pr->deterministic, out->bwd_arch, bucket);

    /* the backward kernels have plain and general score code */
    out->bwd_scores = pr->softcap == 0.0f && !pr->alibi ? FA2_SCORES_PLAIN : FA2_SCORES_GENERAL;
    if (fa2_bwd_workspace_layout(pr, atomics, &ws)) {
        out->bwd_workspace_bytes = ws.total_bytes;
        out->bwd_accum_offset = ws.accum_offset;
    } else {
        out->bwd_workspace_bytes = 0;
        out->bwd_status = FA2_ERROR_SIZE_OVERFLOW;
    }
    /* Grids: int64 products of int32-bounded sizes over block sizes >= 16. */
    grid = ceil_div(pr->seqlen_k, out->bwd_block_n) * slices * pr->heads_kv * pr->batch;
    if (!atomics && ceil_div(pr->seqlen_q, out->bwd_dq_block_m) * pr->heads_q * pr->batch > grid)
        grid = ceil_div(pr->seqlen_q, out->bwd_dq_block_m) * pr->heads_q * pr->batch;
    row_grid = fa2_bwd_row_kernel_blocks(fa2_lse_rows(pr), pr->head_dim);
    if (row_grid > grid)
        grid = row_grid;
    if (grid > INT32_MAX)
        out->bwd_status = FA2_ERROR_INVALID_SIZE;
    /* dQ, dK and dV are written with Q's, K's and V's strides: those must not repeat an
     * address (a broadcast input's gradient is a sum the caller makes). */
    const fa2_layout_dims_t qd = fa2_layout_dims(pr, 1), kd = fa2_layout_dims(pr, 0);
    if (!fa2_layout_is_distinct(qd.batch, qd.rows, pr->heads_q, pr->head_dim,
                                pr->q_batch_stride, pr->q_seq_stride, pr->q_head_stride) ||
        !fa2_layout_is_distinct(kd.batch, kd.rows, pr->heads_kv, pr->head_dim,
                                pr->k_batch_stride, pr->k_seq_stride, pr->k_head_stride) ||
        !fa2_layout_is_distinct(kd.batch, kd.rows, pr->heads_kv, pr->head_dim,
                                pr->v_batch_stride, pr->v_seq_stride, pr->v_head_stride))
        out->bwd_status = FA2_ERROR_OVERLAP;
    if (out->bwd_smem_bytes > device->smem_per_block_optin)
        out->bwd_status = FA2_ERROR_SHARED_MEMORY;
    if (pr->page_size)
        out->bwd_status = FA2_ERROR_UNSUPPORTED; /* a paged K/V cache: inference, forward */
    out->bwd_supported = out->bwd_status == FA2_SUCCESS;
}

fa2_status_t fa2_plan(const fa2_problem_t *problem, const fa2_device_info_t *device,
                      fa2_plan_t *plan)
{
    fa2_plan_t out = {0};
    fa2_fwd_tile_t tile;
    fa2_status_t s;
    int64_t d, sram, seed;

    fa2_clear_error();
    if (!plan)
        return fa2_fail(FA2_ERROR_NULL_POINTER, "plan is NULL");
    if ((s = fa2_validate_problem(problem, device)) != FA2_SUCCESS)
        return s;

    d = fa2_head_dim_bucket(problem->head_dim);
    if (!fa2_fwd_tile_for_device(d, problem, device, &tile))
        return fa2_fail(FA2_ERROR_UNSUPPORTED_HEAD_DIM, "head_dim=%lld has no kernel",
                        (long long)problem->head_dim);

    out.struct_size = sizeof(fa2_plan_t);
    /* Copy the caller's version; fields it predates keep their zero default. */
    memcpy(&out.problem, problem, problem->struct_size);
    out.problem.struct_size = sizeof(fa2_problem_t);
    if (out.problem.softmax_scale == 0.0f)
        out.problem.softmax_scale = 1.0f / sqrtf((float)problem->head_dim);

    /* M in 2-byte elements (fp16 and bf16 alike). */
    sram = device->smem_per_block_optin / 2;
    seed = ceil_div(sram, 4 * d);
    out.sram_elements = sram;
    out.seed_br = seed;
    out.seed_bc = seed < d ? seed : d;

    out.block_m = tile.block_m;
    out.block_n = tile.block_n;
    out.block_m_rule = pick_rule(out.seed_br, seed, tile.block_m);
    out.block_n_rule = pick_rule(out.seed_bc, seed, tile.block_n);
    out.head_dim_bucket = tile.head_dim_bucket;
    out.warps = tile.warps;
    /* Fits in int64: batch * heads_q * seqlen_q was checked by validation. The kernel
     * runs a 1-D grid, whose x dimension holds at most 2^31 - 1 blocks. */
    out.grid_blocks = problem->batch * problem->heads_q *
                      ceil_div(problem->seqlen_q, tile.block_m);
    if (out.grid_blocks > INT32_MAX)
        return fa2_fail(FA2_ERROR_INVALID_SIZE,
                        "batch=%lld * heads_q=%lld * ceil(seqlen_q=%lld / %d) = %lld thread "
                        "blocks exceed the CUDA grid limit 2147483647",
                        (long long)problem->batch, (long long)problem->heads_q,
                        (long long)problem->seqlen_q, (int)tile.block_m,
                        (long long)out.grid_blocks);
    out.smem_bytes = tile.smem_bytes;
    out.fwd_arch = tile.arch;
    out.fwd_kernel = tile.kernel;
    out.page_box_rows = tile.page_box_rows;
    out.splits = fa2_decode_splits(problem, device, tile.head_dim_bucket, NULL);
    if (out.splits) { /* one block per (sequence, kv head, split, row tile) */
        out.fwd_kernel = FA2_FWD_KERNEL_DECODE;
        out.page_box_rows = 0;
        out.grid_blocks =
            problem->batch * problem->heads_kv * out.splits * fa2_decode_row_tiles(problem);
        out.decode_stages = fa2_decode_stages(tile.head_dim_bucket, device->smem_per_block_optin);
        out.split_tiles = fa2_decode_split_tiles(problem, tile.head_dim_bucket);
        out.smem_bytes = FA2_DECODE_SMEM_BYTES(tile.head_dim_bucket, out.decode_stages);
    }
    out.fwd_scores = fa2_fwd_scores(problem, out.fwd_kernel);
    fa2_fwd_workspace_t fws;
    if (!fa2_fwd_workspace_layout(problem, out.splits, &fws))
        return fa2_fail(FA2_ERROR_SIZE_OVERFLOW, "the forward's workspace overflows int64");
    out.workspace_bytes = fws.total_bytes;
    if (out.splits > 1) {
        out.split_rows = fws.rows;
        out.split_lse_offset = fws.lse_offset;
        out.split_o_offset = fws.o_offset;
    }
    plan_backward(problem, device, tile.head_dim_bucket, &out);
    out.device = *device;
    out.device.struct_size = sizeof(fa2_device_info_t);

    *plan = out;
    return FA2_SUCCESS;
}
