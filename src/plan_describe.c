/* fa2_plan_describe: what a plan runs, and why, in words for an engine's log. The
 * reasons come from the planner's own functions (fa2_fwd_tile_for_device,
 * fa2_decode_splits) on the plan's copies of the problem and the device. */
#include <stdarg.h>
#include <stdio.h>

#include "decode/decode_tiles.h"
#include "internal.h"

/* A line written into text[0..size), cut to fit; `length` counts all of it. */
typedef struct line_t {
    char *text;
    size_t size, length;
} line_t;

static void add(line_t *line, const char *format, ...)
{
    char *at = line->length < line->size ? line->text + line->length : NULL;
    const size_t room = at ? line->size - line->length : 0;
    va_list args;
    va_start(args, format);
    const int n = vsnprintf(at, room, format, args);
    va_end(args);
    if (n > 0)
        line->length += (size_t)n;
}

static long long kib(int64_t bytes)
{
    return (long long)((bytes + 1023) / 1024);
}

static const char *fwd_kernel_words(int32_t kernel)
{
    switch (kernel) {
    case FA2_FWD_KERNEL_MMA: return "the mma.sync kernel";
    case FA2_FWD_KERNEL_MMA_COMPACT: return "the mma.sync kernel, compact tile";
    case FA2_FWD_KERNEL_WGMMA: return "the Hopper wgmma kernel, K and V by TMA";
    case FA2_FWD_KERNEL_WGMMA_PAGED_TMA: return "the Hopper wgmma kernel, pages by TMA boxes";
    case FA2_FWD_KERNEL_WGMMA_PAGED_COPY: return "the Hopper wgmma kernel, pages by cp.async";
    case FA2_FWD_KERNEL_WGMMA_PRODUCER:
        return "the Hopper wgmma kernel, a producer warpgroup loading K and V for two math "
               "warpgroups";
    default: return "the decode kernel";
    }
}

static const char *scores_words(int32_t scores)
{
    return scores == FA2_SCORES_BOUNDED_SOFTCAP ? "bounded softcap"
           : scores == FA2_SCORES_GENERAL       ? "softcap or ALiBi"
                                                : "plain";
}

/* Why the prefill family: the Hopper kernel or the mma.sync one (and its tile). */
static void add_family_reason(line_t *line, const fa2_plan_t *plan, const fa2_fwd_tile_t *tile)
{
    const fa2_device_info_t *dev = &plan->device;
    switch (tile->why) {
    case FA2_FWD_WHY_HOPPER:
        add(line, "an sm_90 device, a Hopper kernel for head-dim bucket %d, K and V suit TMA",
            (int)plan->head_dim_bucket);
        break;
    case FA2_FWD_WHY_NO_HOPPER_TILE:
        add(line, "no Hopper kernel for head-dim bucket %d", (int)plan->head_dim_bucket);
        break;
    case FA2_FWD_WHY_KV_NOT_TMA:
        add(line, "K's or V's strides do not suit the Hopper kernel's TMA");
        break;
    default:
#if defined(FA2_WITH_SM90A)
        add(line, "the device is sm_%d%d, the Hopper kernels need sm_90", (int)dev->cc_major,
            (int)dev->cc_minor);
#else
        add(line, "this build has no Hopper (sm_90a) code");
#endif
        break;
    }
    if (tile->kernel == FA2_FWD_KERNEL_MMA_COMPACT) {
        fa2_fwd_tile_t main_tile;
        if (fa2_fwd_tile(plan->head_dim_bucket, &main_tile))
            add(line, "; the main tile's %lld KiB of shared memory exceed the device's %lld KiB",
                kib(main_tile.smem_bytes), kib(dev->smem_per_block_optin));
    }
}

/* Why the decode kernel runs or not. */
static void add_decode_reason(line_t *line, const fa2_plan_t *plan, int32_t why)
{
    const fa2_problem_t *pr = &plan->problem;
    const long long group = (long long)(pr->heads_q / pr->heads_kv);
    const long long tokens = (long long)pr->seqlen_q;
    switch (why) {
    case FA2_DECODE_WHY_FITS: {
        const long long tiles = (long long)fa2_decode_row_tiles(pr);
        add(line, "%lld query rows per kv head (%lld heads x %lld tokens) in %lld row "
                  "tile%s of %d, each reading the keys once",
            group * tokens, group, tokens, tiles, tiles == 1 ? "" : "s", FA2_DECODE_ROWS);
        break;
    }
    case FA2_DECODE_WHY_TOKENS:
        add(line, "not the decode kernel: %lld query tokens exceed its %d", tokens,
            FA2_DECODE_MAX_TOKENS);
        break;
    case FA2_DECODE_WHY_NO_KERNEL:
        add(line, "not the decode kernel: none for head-dim bucket %d",
            (int)plan->head_dim_bucket);
        break;
    case FA2_DECODE_WHY_SMEM: {
        int64_t least = 0;
#define FA2_DECODE_LEAST(n) least = FA2_DECODE_SMEM_BYTES(plan->head_dim_bucket, n);
        FA2_DECODE_STAGE_COUNTS(FA2_DECODE_LEAST) /* deepest first: the last is the least */
#undef FA2_DECODE_LEAST
        add(line, "not the decode kernel: its %lld KiB of shared memory exceed the device's "
                  "%lld KiB",
            kib(least), kib(plan->device.smem_per_block_optin));
        break;
    }
    default:
        add(line, "not the decode kernel: batch-invariant splits of this length exceed the "
                  "grid or workspace limits");
        break;
    }
}

static void add_forward(line_t *line, const fa2_plan_t *plan)
{
    int32_t decode_why = FA2_DECODE_WHY_FITS;
    fa2_decode_splits(&plan->problem, &plan->device, plan->head_dim_bucket, &decode_why);
    add(line, "forward: %s", fwd_kernel_words(plan->fwd_kernel));
    if (plan->fwd_kernel == FA2_FWD_KERNEL_DECODE)
        add(line, " (%d K/V stages a warp, %d key split%s; ", (int)plan->decode_stages,
            (int)plan->splits, plan->splits == 1 ? "" : "s");
    else if (plan->fwd_kernel == FA2_FWD_KERNEL_WGMMA_PAGED_TMA)
        add(line, " of %d rows (Br %d x Bc %d, ", (int)plan->page_box_rows, (int)plan->block_m,
            (int)plan->block_n);
    else
        add(line, " (Br %d x Bc %d, ", (int)plan->block_m, (int)plan->block_n);
    add(line, "%lld KiB shared memory, %lld blocks, %s scores): ", kib(plan->smem_bytes),
        (long long)plan->grid_blocks, scores_words(plan->fwd_scores));
    if (plan->fwd_kernel == FA2_FWD_KERNEL_DECODE) {
        add_decode_reason(line, plan, decode_why);
    } else {
        fa2_fwd_tile_t tile = {0};
        fa2_fwd_tile_for_device(plan->head_dim_bucket, &plan->problem, &plan->device, &tile);
        add_family_reason(line, plan, &tile);
        add(line, "; ");
        add_decode_reason(line, plan, decode_why);
    }
}

static void add_backward(line_t *line, const fa2_plan_t *plan)
{
    if (!plan->bwd_supported) {
        add(line, "backward: not available (%s)", fa2_status_string(plan->bwd_status));
        return;
    }
    add(line, "backward: %s (dK/dV %d keys a block, %d queries a step; dQ %s, %s scores)",
        plan->bwd_kernel == FA2_BWD_KERNEL_WGMMA         ? "the Hopper wgmma kernels"
        : plan->bwd_kernel == FA2_BWD_KERNEL_MMA_COMPACT ? "the mma.sync kernels, compact tiles"
                                                         : "the mma.sync kernels",
        (int)plan->bwd_block_n, (int)plan->bwd_block_m,
        plan->bwd_accum_offset ? "by fp32 atomics" : "by its own kernel",
        scores_words(plan->bwd_scores));
}

fa2_status_t fa2_plan_describe(const fa2_plan_t *plan, char *text, size_t size, size_t *length)
{
    fa2_clear_error();
    if (!plan)
        return fa2_fail(FA2_ERROR_NULL_POINTER, "plan is NULL");
    if (!text && size > 0)
        return fa2_fail(FA2_ERROR_NULL_POINTER, "text is NULL with size=%zu", size);
    fa2_status_t s = fa2_check_plan(plan); /* then every field is fa2_plan's own */
    if (s != FA2_SUCCESS)
        return s;
    line_t line = {text, size, 0};
    add_forward(&line, plan);
    add(&line, ". ");
    add_backward(&line, plan);
    add(&line, ".");
    if (length)
        *length = line.length;
    return FA2_SUCCESS;
}
