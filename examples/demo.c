/*
 * fa2_demo: the first thing to run. Plans and runs libfa2's forward on GPU 0, checks
 * O and the LSE against the double-precision CPU oracle (tests/oracle.h), then times a
 * larger problem. Exit status: 0 every check passed, 1 a check failed, 77 no usable GPU
 * (nothing checked).
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fa2.h"
#include "oracle.h"

/* bf16 output vs the double oracle: rounding O alone costs ~2e-3 (bf16 results
 * land between 1e-3 and 1e-2). The LSE is fp32 math on exact inputs. */
#define MAX_REL_L2_O 1e-2
#define MAX_ABS_ERR_LSE 1e-3
#define EXIT_NO_GPU 77

static int cuda_ok(cudaError_t err, const char *what)
{
    if (err == cudaSuccess) return 1;
    printf("fa2_demo: %s: %s\n", what, cudaGetErrorString(err));
    return 0;
}

static int fa2_ok(fa2_status_t st, const char *what)
{
    if (st == FA2_SUCCESS) return 1;
    printf("fa2_demo: %s: %s\n  %s\n", what, fa2_status_string(st), fa2_last_error());
    return 0;
}

static const char *rule_name(int32_t rule)
{
    switch (rule) {
    case FA2_RULE_SEED_SRAM: return "seed SRAM bound ceil(M/4d)";
    case FA2_RULE_HEAD_DIM: return "Bc <= d";
    case FA2_RULE_MMA_MULTIPLE: return "multiple of 16";
    case FA2_RULE_KERNEL_TILE: return "compiled kernel tile";
    }
    return "?";
}

/* Random bf16 tensor of n elements: device copy in *dev, the same values as floats in
 * host[] (what the oracle reads). */
static int random_tensor(oracle_rng_t *rng, size_t n, float *host, uint16_t *bits,
                         void **dev)
{
    for (size_t i = 0; i < n; ++i) {
        bits[i] = oracle_bf16_from_float(oracle_rng_normal(rng));
        if (host) host[i] = oracle_float_from_bf16(bits[i]);
    }
    return cuda_ok(cudaMalloc(dev, n * sizeof(uint16_t)), "cudaMalloc") &&
           cuda_ok(cudaMemcpy(*dev, bits, n * sizeof(uint16_t), cudaMemcpyHostToDevice),
                   "cudaMemcpy");
}

/* Runs one small problem on the GPU and checks it against the oracle. 1 = PASS. */
static int check_against_oracle(const fa2_device_info_t *dev, int causal)
{
    const int64_t batch = 2, heads = 8, seqlen = 1024, head_dim = 128;
    fa2_problem_t problem;
    fa2_problem_init(&problem, FA2_DTYPE_BF16, batch, seqlen, seqlen, heads, heads,
                     head_dim);
    problem.causal = causal;
    fa2_plan_t plan;
    if (!fa2_ok(fa2_plan(&problem, dev, &plan), "fa2_plan")) return 0;
    printf("\n[check] bf16, batch %lld, heads %lld, seqlen %lld, head_dim %lld, causal %s\n",
           (long long)batch, (long long)heads, (long long)seqlen, (long long)head_dim,
           causal ? "on" : "off");
    printf("  plan: Br=%d (%s), Bc=%d (%s), %d warps, %lld blocks, %lld B shared memory\n",
           plan.block_m, rule_name(plan.block_m_rule), plan.block_n,
           rule_name(plan.block_n_rule), plan.warps, (long long)plan.grid_blocks,
           (long long)plan.smem_bytes);

    const size_t n = (size_t)(batch * seqlen * heads * head_dim);
    const size_t n_lse = (size_t)(batch * heads * seqlen);
    float *q = malloc(n * sizeof(float)), *k = malloc(n * sizeof(float)),
          *v = malloc(n * sizeof(float)), *lse = malloc(n_lse * sizeof(float));
    uint16_t *bits = malloc(n * sizeof(uint16_t));
    double *o_ref = malloc(n * sizeof(double)), *o_gpu = malloc(n * sizeof(double));
    double *lse_ref = malloc(n_lse * sizeof(double));
    void *dq = NULL, *dk = NULL, *dv = NULL, *dout = NULL;
    float *dlse = NULL;
    int pass = 0;
    if (!q || !k || !v || !lse || !bits || !o_ref || !o_gpu || !lse_ref) {
        printf("fa2_demo: out of host memory\n");
        goto done;
    }

    oracle_rng_t rng = oracle_rng(2026u + (uint64_t)causal);
    if (!random_tensor(&rng, n, q, bits, &dq) || !random_tensor(&rng, n, k, bits, &dk) ||
        !random_tensor(&rng, n, v, bits, &dv))
        goto done;
    /* Poison the outputs (0xFF.. is NaN in bf16 and fp32): unwritten elements fail. */
    if (!cuda_ok(cudaMalloc(&dout, n * sizeof(uint16_t)), "cudaMalloc") ||
        !cuda_ok(cudaMalloc((void **)&dlse, n_lse * sizeof(float)), "cudaMalloc") ||
        !cuda_ok(cudaMemset(dout, 0xFF, n * sizeof(uint16_t)), "cudaMemset") ||
        !cuda_ok(cudaMemset(dlse, 0xFF, n_lse * sizeof(float)), "cudaMemset"))
        goto done;

    if (!fa2_ok(fa2_forward(&plan, dq, dk, dv, dout, dlse, NULL, 0, NULL), "fa2_forward") ||
        !cuda_ok(cudaDeviceSynchronize(), "fa2_forward (kernel)") ||
        !cuda_ok(cudaMemcpy(bits, dout, n * sizeof(uint16_t), cudaMemcpyDeviceToHost),
                 "cudaMemcpy O") ||
        !cuda_ok(cudaMemcpy(lse, dlse, n_lse * sizeof(float), cudaMemcpyDeviceToHost),
                 "cudaMemcpy LSE"))
        goto done;
    for (size_t i = 0; i < n; ++i) o_gpu[i] = oracle_float_from_bf16(bits[i]);

    printf("  computing the double-precision oracle on the CPU...\n");
    fflush(stdout);
    if (oracle_forward(&problem, q, k, v, o_ref, lse_ref)) {
        printf("fa2_demo: oracle out of memory\n");
        goto done;
    }
    const double rel = oracle_rel_l2(o_gpu, o_ref, n);
    double lse_err = 0.0;
    for (size_t i = 0; i < n_lse; ++i) {
        double e = fabs((double)lse[i] - lse_ref[i]);
        if (!(e <= lse_err)) lse_err = e; /* NaN sticks */
    }
    pass = rel <= MAX_REL_L2_O && lse_err <= MAX_ABS_ERR_LSE; /* false for NaN */
    printf("  O:   rel L2 error vs oracle %.3e (limit %.0e)\n", rel, MAX_REL_L2_O);
    printf("  LSE: max abs error vs oracle %.3e (limit %.0e)\n", lse_err, MAX_ABS_ERR_LSE);
    printf("  %s\n", pass ? "PASS" : "FAIL");

done:
    cudaFree(dq);
    cudaFree(dk);
    cudaFree(dv);
    cudaFree(dout);
    cudaFree(dlse);
    free(q);
    free(k);
    free(v);
    free(lse);
    free(bits);
    free(o_ref);
    free(o_gpu);
    free(lse_ref);
    return pass;
}

static int compare_floats(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Times a larger problem: median of 20 runs after 3 warm-ups, CUDA events. */
static int time_large(const fa2_device_info_t *dev)
{
    enum { WARMUP = 3, RUNS = 20 };
    const int64_t batch = 2, heads = 16, seqlen = 8192, head_dim = 128;
    const size_t n = (size_t)(batch * seqlen * heads * head_dim);
    uint16_t *bits = malloc(n * sizeof(uint16_t));
    void *dq = NULL, *dk = NULL, *dv = NULL, *dout = NULL;
    cudaEvent_t start[RUNS], stop[RUNS];
    int ok = 0, events = 0;
    printf("\n[speed] bf16, batch %lld, heads %lld, seqlen %lld, head_dim %lld\n",
           (long long)batch, (long long)heads, (long long)seqlen, (long long)head_dim);
    if (!bits) goto done;
    oracle_rng_t rng = oracle_rng(7);
    if (!random_tensor(&rng, n, NULL, bits, &dq) || !random_tensor(&rng, n, NULL, bits, &dk) ||
        !random_tensor(&rng, n, NULL, bits, &dv) ||
        !cuda_ok(cudaMalloc(&dout, n * sizeof(uint16_t)), "cudaMalloc"))
        goto done;
    for (events = 0; events < RUNS; ++events) {
        if (!cuda_ok(cudaEventCreate(&start[events]), "cudaEventCreate")) goto done;
        if (!cuda_ok(cudaEventCreate(&stop[events]), "cudaEventCreate")) {
            cudaEventDestroy(start[events]);
            goto done;
        }
    }

    for (int causal = 0; causal <= 1; ++causal) {
        fa2_problem_t problem;
        fa2_problem_init(&problem, FA2_DTYPE_BF16, batch, seqlen, seqlen, heads, heads,
                         head_dim);
        problem.causal = causal;
        fa2_plan_t plan;
        if (!fa2_ok(fa2_plan(&problem, dev, &plan), "fa2_plan")) goto done;
        for (int i = 0; i < WARMUP; ++i)
            if (!fa2_ok(fa2_forward(&plan, dq, dk, dv, dout, NULL, NULL, 0, NULL),
                        "fa2_forward"))
                goto done;
        for (int i = 0; i < RUNS; ++i) {
            cudaEventRecord(start[i], NULL);
            if (!fa2_ok(fa2_forward(&plan, dq, dk, dv, dout, NULL, NULL, 0, NULL),
                        "fa2_forward"))
                goto done;
            cudaEventRecord(stop[i], NULL);
        }
        if (!cuda_ok(cudaDeviceSynchronize(), "timed runs")) goto done;
        float ms[RUNS];
        for (int i = 0; i < RUNS; ++i) cudaEventElapsedTime(&ms[i], start[i], stop[i]);
        qsort(ms, RUNS, sizeof(float), compare_floats);
        const double median_ms = 0.5 * ((double)ms[RUNS / 2 - 1] + ms[RUNS / 2]);
        /* FLOPs: 4*B*H*N*N*d, halved when causal (docs/performance.md). */
        double flops = 4.0 * batch * heads * (double)seqlen * seqlen * head_dim;
        if (causal) flops /= 2.0;
        printf("  causal %-3s  %8.3f ms  %7.1f TFLOP/s  (median of %d)\n",
               causal ? "on" : "off", median_ms, flops / (median_ms * 1e-3) / 1e12, RUNS);
    }
    ok = 1;
done:
    for (int i = 0; i < events; ++i) {
        cudaEventDestroy(start[i]);
        cudaEventDestroy(stop[i]);
    }
    cudaFree(dq);
    cudaFree(dk);
    cudaFree(dv);
    cudaFree(dout);
    free(bits);
    return ok;
}

int main(void)
{
    fa2_device_info_t dev;
    fa2_status_t st = fa2_device_info_query(0, &dev);
    if (st != FA2_SUCCESS) {
        printf("fa2_demo: no usable CUDA GPU here (%s).\n"
               "fa2_demo: nothing was checked; exit status %d means exactly this.\n",
               fa2_last_error(), EXIT_NO_GPU);
        return EXIT_NO_GPU;
    }
    struct cudaDeviceProp prop;
    const char *name = cudaGetDeviceProperties(&prop, 0) == cudaSuccess ? prop.name : "?";
    unsigned version = fa2_version();
    printf("libfa2 %u.%u.%u, GPU 0: %s (sm_%d%d, %d SMs, %lld KiB shared memory per block)\n",
           version / 10000, version / 100 % 100, version % 100, name, dev.cc_major,
           dev.cc_minor, dev.sm_count, (long long)(dev.smem_per_block_optin / 1024));

    int pass = check_against_oracle(&dev, 0);
    pass = check_against_oracle(&dev, 1) && pass;
    int timed = time_large(&dev);
    printf("\nfa2_demo: %s\n", pass && timed ? "PASS" : "FAIL");
    return pass && timed ? 0 : 1;
}
