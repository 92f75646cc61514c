/* The compute-sanitizer subset (ctest label sanitizer runs it under memcheck,
 * racecheck, synccheck and initcheck; label gpu runs it plainly). One forward +
 * backward per head-dim bucket and dtype, with causal, sliding windows, GQA/MQA, odd
 * lengths, deterministic on and off, an empty-row case and blocks of several query
 * steps; small enough that racecheck finishes in seconds. Outputs and workspace are
 * left uninitialised (not poisoned) so that initcheck sees any read before a write.
 * Every output is checked against the double reference (gpu_rows.h). One line per
 * case; exit 77 without a device; `--probe` only checks for one. */
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "fa2.h"
#include "gpu_rows.h"

typedef struct scase_t {
    fa2_dtype_t dtype;
    int64_t batch, sq, sk, hq, hkv, d;
    int32_t causal;
    int64_t wl, wr;
    int32_t deterministic;
} scase_t;

#define BF FA2_DTYPE_BF16
#define FP FA2_DTYPE_FP16
static const scase_t cases[] = {
    {FP, 1, 37, 45, 2, 2, 32, 1, -1, -1, 0},   {BF, 2, 70, 33, 2, 1, 32, 0, 9, 4, 1},
    {BF, 1, 65, 65, 4, 2, 64, 1, -1, -1, 1},   {FP, 1, 100, 17, 2, 2, 64, 1, -1, -1, 0},
    {FP, 1, 33, 130, 3, 1, 96, 0, -1, -1, 0},  {BF, 1, 81, 81, 2, 2, 80, 0, 20, -1, 1},
    {BF, 2, 50, 77, 4, 4, 128, 1, 16, -1, 0},  {FP, 1, 129, 64, 2, 1, 128, 0, -1, -1, 1},
    {FP, 1, 40, 71, 2, 2, 192, 0, 8, 8, 1},    {BF, 1, 66, 66, 3, 3, 160, 1, -1, -1, 0},
    {BF, 1, 45, 45, 2, 1, 256, 1, -1, -1, 0},  {FP, 1, 31, 90, 2, 2, 256, 0, -1, 5, 1},
    /* Several query steps per dK/dV block in default mode, so that the Hopper kernels
     * pass their dQ staging buffer and Q/dO buffers back and forth more than once:
     * d = 64 (128-row steps), 128 and 256 (64-row steps), GQA and a causal q > k. */
    {BF, 1, 300, 150, 4, 2, 64, 0, -1, -1, 0}, {FP, 1, 200, 140, 2, 1, 128, 1, -1, -1, 0},
    {BF, 1, 170, 100, 2, 2, 256, 0, -1, -1, 0},
};

static fa2_device_info_t g_info;


/* worst |got - want| / tol over a tensor slice; NaN counts as infinite */
static double excess(const uint16_t *bits, const float *lut, const double *want, int64_t n,
                     double tol)
{
    double w = 0.0;
    for (int64_t t = 0; t < n; ++t) {
        const double e = fabs((double)lut[bits[t]] - want[t]) / tol;
        w = e <= w ? w : (isnan(e) ? INFINITY : e);
    }
    return w;
}

static int run_case(int index, const scase_t *c)
{
    fa2_problem_t p;
    fa2_plan_t plan;
    fa2_problem_init(&p, c->dtype, c->batch, c->sq, c->sk, c->hq, c->hkv, c->d);
    p.causal = c->causal;
    p.window_left = c->wl;
    p.window_right = c->wr;
    p.deterministic = c->deterministic;
    printf("case %2d: %s b=%" PRId64 " q=%" PRId64 " k=%" PRId64 " hq=%" PRId64 " hkv=%" PRId64
           " d=%" PRId64 "%s wl=%" PRId64 " wr=%" PRId64 " det=%d", index,
           c->dtype == BF ? "bf16" : "fp16", c->batch, c->sq, c->sk, c->hq, c->hkv, c->d,
           c->causal ? " causal" : "", c->wl, c->wr, (int)c->deterministic);
    fflush(stdout);
    fa2_status_t s = fa2_plan(&p, &g_info, &plan);
    if (s != FA2_SUCCESS) {
        printf(" : fa2_plan: %s FAIL\n", fa2_last_error());
        return 0;
    }
    const int64_t d = c->d, nq = c->batch * c->sq * c->hq * d, nk = c->batch * c->sk * c->hkv * d,
                  nl = c->batch * c->hq * c->sq;
    const size_t bq = 2 * (size_t)nq, bk = 2 * (size_t)nk;
    int pass = 0;
    uint16_t *hq = malloc(bq), *hk = malloc(bk), *hv = malloc(bk), *hdo = malloc(bq),
             *ho = malloc(bq), *hdq = malloc(bq), *hdk = malloc(bk), *hdv = malloc(bk);
    float *hl = malloc(sizeof(float) * (size_t)nl), *lut = gpu_rows_lut(c->dtype);
    double *ro = malloc(sizeof(double) * (size_t)nq), *rdq = malloc(sizeof(double) * (size_t)nq),
           *rdk = calloc((size_t)nk, sizeof(double)), *rdv = calloc((size_t)nk, sizeof(double)),
           *rl = malloc(sizeof(double) * (size_t)nl);
    void *gq = NULL, *gk = NULL, *gv = NULL, *go = NULL, *gdo = NULL, *gdq = NULL, *gdk = NULL,
         *gdv = NULL, *ws = NULL;
    float *gl = NULL;
    if (!hq || !hk || !hv || !hdo || !ho || !hdq || !hdk || !hdv || !hl || !lut || !ro || !rdq ||
        !rdk || !rdv || !rl) {
        printf(" : host out of memory FAIL\n");
        goto cleanup;
    }
    const gpu_rows_table_t tab = gpu_rows_table(c->dtype, 1.0f);
    gpu_rows_fill(hq, nq, 1000 + (uint64_t)index, &tab);
    gpu_rows_fill(hk, nk, 2000 + (uint64_t)index, &tab);
    gpu_rows_fill(hv, nk, 3000 + (uint64_t)index, &tab);
    gpu_rows_fill(hdo, nq, 4000 + (uint64_t)index, &tab);
    CK(cudaMalloc(&gq, bq));
    CK(cudaMalloc(&gk, bk));
    CK(cudaMalloc(&gv, bk));
    CK(cudaMalloc(&go, bq));
    CK(cudaMalloc(&gdo, bq));
    CK(cudaMalloc(&gdq, bq));
    CK(cudaMalloc(&gdk, bk));
    CK(cudaMalloc(&gdv, bk));
    CK(cudaMalloc((void **)&gl, sizeof(float) * (size_t)nl));
    CK(cudaMalloc(&ws, (size_t)plan.bwd_workspace_bytes));
    CK(cudaMemcpy(gq, hq, bq, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(gk, hk, bk, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(gv, hv, bk, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(gdo, hdo, bq, cudaMemcpyHostToDevice));
    s = fa2_forward(&plan, gq, gk, gv, go, gl, NULL, 0, NULL);
    if (s == FA2_SUCCESS)
        s = fa2_backward(&plan, gq, gk, gv, go, gdo, gl, gdq, gdk, gdv, ws,
                         (size_t)plan.bwd_workspace_bytes, NULL);
    if (s != FA2_SUCCESS) {
        printf(" : %s (%s) FAIL\n", fa2_status_string(s), fa2_last_error());
        goto cleanup;
    }
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(ho, go, bq, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hdq, gdq, bq, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hdk, gdk, bk, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hdv, gdv, bk, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hl, gl, sizeof(float) * (size_t)nl, cudaMemcpyDeviceToHost));

    const gpu_rows_inputs_t in = {&p, hq, hk, hv, hdo, lut};
    const int64_t group = c->hq / c->hkv;
    for (int64_t b = 0; b < c->batch; ++b)
        for (int64_t i = 0; i < c->sq; ++i)
            for (int64_t h = 0; h < c->hq; ++h) {
                const int64_t at = gpu_rows_q_at(&p, b, i, h);
                double *dk_at = rdk + gpu_rows_k_at(&p, b, 0, h / group);
                double *dv_at = rdv + gpu_rows_k_at(&p, b, 0, h / group);
                /* dk/dv of kv head h/group are strided by heads_kv * d in BSHD: use a
                 * per-row scratch and scatter */
                double *sk = calloc((size_t)(c->sk * d) + 1, sizeof(double));
                double *sv = calloc((size_t)(c->sk * d) + 1, sizeof(double));
                if (!sk || !sv ||
                    gpu_rows_reference(&in, b, i, h, ro + at, &rl[(b * c->hq + h) * c->sq + i],
                                       rdq + at, sk, sv, 0, c->sk)) {
                    free(sk), free(sv);
                    printf(" : reference out of memory FAIL\n");
                    goto cleanup;
                }
                for (int64_t j = 0; j < c->sk; ++j)
                    for (int64_t x = 0; x < d; ++x) {
                        dk_at[j * c->hkv * d + x] += sk[j * d + x];
                        dv_at[j * c->hkv * d + x] += sv[j * d + x];
                    }
                free(sk), free(sv);
            }
    const double eps = c->dtype == BF ? 0x1p-8 : 0x1p-11;
    double mo = 0.25, mdq = 1e-3, mdk = 1e-3, mdv = 1e-3, lse_err = 0.0;
    for (int64_t t = 0; t < nq; ++t)
        mo = fmax(mo, fabs(ro[t])), mdq = fmax(mdq, fabs(rdq[t]));
    for (int64_t t = 0; t < nk; ++t)
        mdk = fmax(mdk, fabs(rdk[t])), mdv = fmax(mdv, fabs(rdv[t]));
    for (int64_t t = 0; t < nl; ++t) {
        const double e = isinf(rl[t]) ? (hl[t] == rl[t] ? 0.0 : INFINITY)
                                      : fabs(hl[t] - rl[t]) / fmax(1.0, fabs(rl[t]));
        lse_err = e <= lse_err ? lse_err : (isnan(e) ? INFINITY : e);
    }
    /* elementwise, relative to each tensor's largest value: 8 ulp of the dtype */
    const double xo = excess(ho, lut, ro, nq, 8 * eps * mo),
                 xdq = excess(hdq, lut, rdq, nq, 8 * eps * mdq),
                 xdk = excess(hdk, lut, rdk, nk, 8 * eps * mdk),
                 xdv = excess(hdv, lut, rdv, nk, 8 * eps * mdv);
    pass = xo <= 1 && xdq <= 1 && xdk <= 1 && xdv <= 1 && lse_err <= 1e-3;
    printf(" : error/tolerance O %.2f dQ %.2f dK %.2f dV %.2f (<= 1), LSE rel %.1e %s\n", xo, xdq,
           xdk, xdv, lse_err, pass ? "PASS" : "FAIL");

cleanup:
    fflush(stdout);
    cudaFree(gq), cudaFree(gk), cudaFree(gv), cudaFree(go), cudaFree(gdo), cudaFree(gdq);
    cudaFree(gdk), cudaFree(gdv), cudaFree(gl), cudaFree(ws);
    free(hq), free(hk), free(hv), free(hdo), free(ho), free(hdq), free(hdk), free(hdv), free(hl);
    free(lut), free(ro), free(rdq), free(rdk), free(rdv), free(rl);
    return pass;
}

int main(int argc, char **argv)
{
    const int probe = gpu_rows_probe("test_sanitizer_subset", &g_info);
    if (probe || (argc > 1 && strcmp(argv[1], "--probe") == 0))
        return probe;
    int failed = 0, n = (int)(sizeof cases / sizeof cases[0]);
    for (int t = 0; t < n; ++t)
        failed += !run_case(t, &cases[t]);
    printf("test_sanitizer_subset: %d of %d cases failed\n", failed, n);
    return failed ? 1 : 0;
}
