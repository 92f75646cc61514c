/* Planning the decode kernel: when it runs, how many key splits, and the forward's
 * workspace. */
#include "decode/decode_tiles.h"
#include "internal.h"

/* Key tiles per split in batch-invariant mode, unless seqlen_k needs more. */
#define FA2_DECODE_INVARIANT_TILES 32

/* The most workspace the splits may take before the planner gives them up (not in
 * batch-invariant mode, whose splits follow seqlen_k alone). */
#define FA2_DECODE_MAX_WORKSPACE (INT64_C(1) << 30)

static int64_t round_256(int64_t x)
{
    return (x + 255) / 256 * 256;
}

int fa2_fwd_workspace_layout(const fa2_problem_t *pr, int32_t splits, fa2_fwd_workspace_t *ws)
{
    int64_t lse_bytes, o_bytes, t;
    ws->rows = pr->total_q ? pr->total_q : pr->batch * pr->seqlen_q;
    ws->lse_offset = ws->o_offset = 0;
    ws->total_bytes = pr->total_q ? 4 * pr->batch : 0;
    if (splits <= 1)
        return 1;
    if (!fa2_mul_i64(splits * pr->heads_q, ws->rows, &t) || !fa2_mul_i64(t, 4, &lse_bytes) ||
        !fa2_mul_i64(t, pr->head_dim * 4, &o_bytes))
        return 0;
    ws->lse_offset = round_256(ws->total_bytes);
    if (!fa2_add_i64(ws->lse_offset, round_256(lse_bytes), &ws->o_offset) ||
        !fa2_add_i64(ws->o_offset, o_bytes, &ws->total_bytes))
        return 0;
    return 1;
}

/* The share of the slots of the waves `blocks` take that they fill. */
static double wave_efficiency(int64_t blocks, int64_t wave)
{
    const int64_t waves = (blocks + wave - 1) / wave;
    return (double)blocks / (double)(waves * wave);
}

int32_t fa2_decode_stages(int64_t bucket, int64_t smem_per_block_optin)
{
#define FA2_DECODE_FITS(n)                                             \
    if (FA2_DECODE_SMEM_BYTES(bucket, n) <= smem_per_block_optin) \
        return n;
    FA2_DECODE_STAGE_COUNTS(FA2_DECODE_FITS) /* deepest first */
#undef FA2_DECODE_FITS
    return 0;
}

int64_t fa2_decode_row_tiles(const fa2_problem_t *pr)
{
    return FA2_DECODE_ROW_TILES(pr->heads_q / pr->heads_kv * pr->seqlen_q);
}

int32_t fa2_decode_split_tiles(const fa2_problem_t *pr, int64_t bucket)
{
    if (!pr->batch_invariant || pr->max_splits <= 1)
        return 0;
    /* 32 tiles per split (2048 keys at d = 64, 1024 at 128, 512 at 256) unless max_splits
     * of those cannot hold seqlen_k: then the fewest tiles that can. */
    const int64_t tiles = (pr->seqlen_k + FA2_DECODE_KEYS(bucket) - 1) / FA2_DECODE_KEYS(bucket);
    const int64_t fit = (tiles + pr->max_splits - 1) / pr->max_splits;
    return (int32_t)(fit > FA2_DECODE_INVARIANT_TILES ? fit : FA2_DECODE_INVARIANT_TILES);
}

int32_t fa2_decode_splits(const fa2_problem_t *pr, const fa2_device_info_t *device,
                          int64_t bucket, int32_t *why)
{
    int32_t unused;
    if (!why)
        why = &unused;
    int has_kernel = 0;
#define FA2_DECODE_BUCKET(d) has_kernel |= bucket == (d);
    FA2_DECODE_HEAD_DIMS(FA2_DECODE_BUCKET)
#undef FA2_DECODE_BUCKET
    const int32_t stages = fa2_decode_stages(bucket, device->smem_per_block_optin);
    *why = !has_kernel                          ? FA2_DECODE_WHY_NO_KERNEL
           : pr->seqlen_q > FA2_DECODE_MAX_TOKENS ? FA2_DECODE_WHY_TOKENS
           : !stages                             ? FA2_DECODE_WHY_SMEM
                                                 : FA2_DECODE_WHY_FITS;
    if (*why != FA2_DECODE_WHY_FITS)
        return 0;
    if (pr->max_splits <= 1)
        return 1;
    const int64_t tiles = (pr->seqlen_k + FA2_DECODE_KEYS(bucket) - 1) / FA2_DECODE_KEYS(bucket);
    fa2_fwd_workspace_t ws;
    const int64_t base = pr->batch * pr->heads_kv * fa2_decode_row_tiles(pr);
    if (pr->batch_invariant) { /* from seqlen_k and max_splits only */
        const int64_t per = fa2_decode_split_tiles(pr, bucket);
        const int64_t splits = tiles > per ? (tiles + per - 1) / per : 1;
        /* a grid or workspace too large: the prefill kernels (no splits, as invariant) */
        if (base * splits > INT32_MAX || !fa2_fwd_workspace_layout(pr, (int32_t)splits, &ws)) {
            *why = FA2_DECODE_WHY_INVARIANT;
            return 0;
        }
        return (int32_t)splits;
    }
    /* The blocks run in waves of (blocks a multiprocessor holds, from shared memory) x
     * (multiprocessors); a split count leaves the last wave's idle slots idle. Its
     * efficiency: blocks / (waves x wave). The smallest split count within 5 % of the
     * best efficiency wins (fewer splits: less to combine), counting splits of at least
     * one key tile per warp, at most max_splits. */
    const int64_t per_sm = device->smem_per_sm / (FA2_DECODE_SMEM_BYTES(bucket, stages) + 1024);
    /* (a device record can say anything: both factors bounded, so no overflow) */
    const int64_t wave = (per_sm < 1 ? 1 : per_sm > 32 ? 32 : per_sm) *
                         (device->sm_count < 1 ? 1 : device->sm_count > 65536 ? 65536
                                                                              : device->sm_count);
    int64_t limit = tiles / FA2_DECODE_WARPS;
    if (limit > pr->max_splits)
        limit = pr->max_splits;
    double best = 0.0;
    for (int64_t n = 1; n <= limit; n++) {
        const double e = wave_efficiency(base * n, wave);
        best = e > best ? e : best;
    }
    int64_t splits = 1;
    while (splits < limit && wave_efficiency(base * splits, wave) < 0.95 * best)
        splits++;
    while (splits > 1 && (!fa2_fwd_workspace_layout(pr, (int32_t)splits, &ws) ||
                          ws.total_bytes > FA2_DECODE_MAX_WORKSPACE ||
                          base * splits > INT32_MAX))
        splits /= 2;
    return splits > 1 ? (int32_t)splits : 1;
}
