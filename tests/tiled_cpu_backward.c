/* FlashAttention-2 backward, tiled, on the CPU, in fp32. See tiled_cpu_backward.h.
 * Loops K/V blocks outside and query blocks inside, as the paper's Algorithm 2 and the
 * GPU's dK/dV kernel do; dQ is accumulated across K/V blocks in an fp32 buffer. The
 * mask is applied element by element, written out here (not taken from the oracle). */
#include "tiled_cpu_backward.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* Is key j visible from query i? The rule of include/fa2.h. */
static int visible(const fa2_problem_t *p, int64_t i, int64_t j)
{
    const int64_t diag = i + p->seqlen_k - p->seqlen_q;
    const int64_t right = p->causal ? 0 : p->window_right;
    if (p->window_left >= 0 && j < diag - p->window_left)
        return 0;
    if (right >= 0 && j > diag + right)
        return 0;
    return 1;
}

/* Query rows [*lo, *hi] that can see some key of [j0, j1]; *lo > *hi when none.
 * Key j is visible from i when j - off - right <= i <= j - off + left. */
static void query_rows(const fa2_problem_t *p, int64_t j0, int64_t j1, int64_t *lo,
                       int64_t *hi)
{
    const int64_t off = p->seqlen_k - p->seqlen_q;
    const int64_t right = p->causal ? 0 : p->window_right;
    *lo = right >= 0 ? max64(0, j0 - off - right) : 0;
    *hi = p->window_left >= 0 ? min64(p->seqlen_q - 1, j1 - off + p->window_left)
                              : p->seqlen_q - 1;
}

static float dotf(const float *x, const float *y, int64_t n)
{
    float s = 0.0f;
    for (int64_t t = 0; t < n; ++t)
        s += x[t] * y[t];
    return s;
}

int tiled_cpu_backward(const fa2_problem_t *p, int64_t block_n, int64_t block_m,
                       const float *q, const float *k, const float *v, const float *o,
                       const float *d_o, const float *lse, float *dq, float *dk, float *dv)
{
    if (block_n < 1 || block_m < 1)
        return -1;
    const int64_t d = p->head_dim, sq = p->seqlen_q, sk = p->seqlen_k;
    const int64_t hq = p->heads_q, hkv = p->heads_kv, group = hq / hkv;
    const float scale =
        p->softmax_scale != 0.0f ? p->softmax_scale : 1.0f / sqrtf((float)d);
    float *dsum = malloc(sizeof(float) * (size_t)(p->batch * hq * sq));
    float *pt = malloc(sizeof(float) * (size_t)(block_m * block_n));
    float *ds = malloc(sizeof(float) * (size_t)(block_m * block_n));
    float *dk_acc = malloc(sizeof(float) * (size_t)(block_n * d));
    float *dv_acc = malloc(sizeof(float) * (size_t)(block_n * d));
    const int ok = dsum && pt && ds && dk_acc && dv_acc;
    if (!ok)
        goto done;

    /* pre-pass: D = rowsum(dO ∘ O) */
    for (int64_t b = 0; b < p->batch; ++b)
        for (int64_t h = 0; h < hq; ++h)
            for (int64_t i = 0; i < sq; ++i) {
                const int64_t at = b * p->o_batch_stride + i * p->o_seq_stride +
                                   h * p->o_head_stride;
                dsum[(b * hq + h) * sq + i] = dotf(d_o + at, o + at, d);
            }
    memset(dq, 0, sizeof(float) * (size_t)(p->batch * sq * hq * d));

    for (int64_t b = 0; b < p->batch; ++b)
        for (int64_t hk = 0; hk < hkv; ++hk)
            for (int64_t j0 = 0; j0 < sk; j0 += block_n) {
                const int64_t cols = min64(block_n, sk - j0);
                const float *kb = k + b * p->k_batch_stride + hk * p->k_head_stride +
                                  j0 * p->k_seq_stride;
                const float *vb = v + b * p->v_batch_stride + hk * p->v_head_stride +
                                  j0 * p->v_seq_stride;
                memset(dk_acc, 0, sizeof(float) * (size_t)(block_n * d));
                memset(dv_acc, 0, sizeof(float) * (size_t)(block_n * d));
                int64_t r_lo, r_hi;
                query_rows(p, j0, j0 + cols - 1, &r_lo, &r_hi);
                for (int64_t h = hk * group; r_lo <= r_hi && h < (hk + 1) * group; ++h)
                    for (int64_t i0 = r_lo / block_m * block_m; i0 <= r_hi; i0 += block_m) {
                        const int64_t rows = min64(block_m, sq - i0);
                        const float *qb = q + b * p->q_batch_stride + h * p->q_head_stride +
                                          i0 * p->q_seq_stride;
                        const float *dob = d_o + b * p->o_batch_stride +
                                           h * p->o_head_stride + i0 * p->o_seq_stride;
                        const float *lseb = lse + (b * hq + h) * sq + i0;
                        const float *dsb = dsum + (b * hq + h) * sq + i0;
                        float *dqb = dq + ((b * sq + i0) * hq + h) * d;
                        /* P = exp(scale S − LSE), dS = P ∘ (dO Vᵀ − D) */
                        for (int64_t r = 0; r < rows; ++r)
                            for (int64_t c = 0; c < cols; ++c) {
                                float pv = 0.0f;
                                if (visible(p, i0 + r, j0 + c))
                                    pv = expf(scale * dotf(qb + r * p->q_seq_stride,
                                                           kb + c * p->k_seq_stride, d) -
                                              lseb[r]);
                                const float dp = dotf(dob + r * p->o_seq_stride,
                                                      vb + c * p->v_seq_stride, d);
                                pt[r * block_n + c] = pv;
                                ds[r * block_n + c] = pv * (dp - dsb[r]);
                            }
                        /* dV += Pᵀ dO, dK += dSᵀ Q, dQ += scale dS K */
                        for (int64_t r = 0; r < rows; ++r) {
                            const float *qr = qb + r * p->q_seq_stride;
                            const float *dor = dob + r * p->o_seq_stride;
                            float *dqr = dqb + r * hq * d;
                            for (int64_t c = 0; c < cols; ++c) {
                                const float pv = pt[r * block_n + c], dsv = ds[r * block_n + c];
                                const float *kc = kb + c * p->k_seq_stride;
                                for (int64_t x = 0; x < d; ++x) {
                                    dv_acc[c * d + x] += pv * dor[x];
                                    dk_acc[c * d + x] += dsv * qr[x];
                                    dqr[x] += scale * dsv * kc[x];
                                }
                            }
                        }
                    }
                for (int64_t c = 0; c < cols; ++c)
                    for (int64_t x = 0; x < d; ++x) {
                        const int64_t at = ((b * sk + j0 + c) * hkv + hk) * d + x;
                        dk[at] = scale * dk_acc[c * d + x];
                        dv[at] = dv_acc[c * d + x];
                    }
            }

done:
    free(dsum);
    free(pt);
    free(ds);
    free(dk_acc);
    free(dv_acc);
    return ok ? 0 : -1;
}
