/* A minimal C consumer of an installed libfa2 (find_package(fa2) -> fa2::fa2).
 *
 * 1. checks the header against the library actually loaded (fa2_version),
 * 2. shows an error path: head_dim=300 -> FA2_ERROR_UNSUPPORTED_HEAD_DIM + message,
 * 3. plans a problem for a hand-described H100/H200 (pure host code, no GPU needed),
 * 4. queries GPU 0: without one it says so and exits 0; with one it runs a small
 *    forward whose V is all ones, so every output element must be 1.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <fa2.h>

#define B 2
#define S 200
#define H 4
#define D 64

static uint16_t to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); /* round to nearest even */
}

static float from_bf16(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static int run_forward(const fa2_device_info_t *device)
{
    const size_t n = (size_t)B * S * H * D;
    uint16_t *host = malloc(n * sizeof *host);
    void *q = NULL, *k = NULL, *v = NULL, *o = NULL;
    fa2_problem_t problem;
    fa2_plan_t plan;
    fa2_status_t st;
    int bad = 0;

    fa2_problem_init(&problem, FA2_DTYPE_BF16, B, S, S, H, H, D);
    problem.causal = 1;
    if ((st = fa2_plan(&problem, device, &plan)) != FA2_SUCCESS) {
        fprintf(stderr, "fa2_plan: %s: %s\n", fa2_status_string(st), fa2_last_error());
        return 1;
    }
    if (!host || cudaMalloc(&q, n * 2) || cudaMalloc(&k, n * 2) || cudaMalloc(&v, n * 2) ||
        cudaMalloc(&o, n * 2)) {
        fprintf(stderr, "allocation failed\n");
        return 1;
    }
    srand(1);
    for (size_t i = 0; i < n; i++)
        host[i] = to_bf16((float)rand() / RAND_MAX - 0.5f);
    cudaMemcpy(q, host, n * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(k, host, n * 2, cudaMemcpyHostToDevice);
    for (size_t i = 0; i < n; i++)
        host[i] = to_bf16(1.0f);
    cudaMemcpy(v, host, n * 2, cudaMemcpyHostToDevice);

    st = fa2_forward(&plan, q, k, v, o, NULL, NULL, 0, /*stream*/ NULL);
    if (st != FA2_SUCCESS) {
        fprintf(stderr, "fa2_forward: %s: %s\n", fa2_status_string(st), fa2_last_error());
        return 1;
    }
    if (cudaMemcpy(host, o, n * 2, cudaMemcpyDeviceToHost) != cudaSuccess) {
        fprintf(stderr, "cudaMemcpy: %s\n", cudaGetErrorString(cudaGetLastError()));
        return 1;
    }
    for (size_t i = 0; i < n; i++)
        bad += !(fabsf(from_bf16(host[i]) - 1.0f) < 1e-2f);
    printf("forward bf16 b=%d s=%d h=%d d=%d causal, V = 1: %s (%d of %zu elements off)\n",
           B, S, H, D, bad ? "FAIL" : "ok", bad, n);
    cudaFree(q);
    cudaFree(k);
    cudaFree(v);
    cudaFree(o);
    free(host);
    return bad != 0;
}

int main(void)
{
    /* An H100/H200 described by hand: planning needs no GPU. */
    const fa2_device_info_t h200 = {sizeof(fa2_device_info_t), 9, 0, 132, 0, 232448, 233472};
    fa2_device_info_t device;
    fa2_problem_t problem;
    fa2_plan_t plan;
    fa2_status_t st;

    printf("libfa2 %u, header %d\n", fa2_version(), FA2_VERSION_NUMBER);
    if (fa2_version() / 100 != FA2_VERSION_NUMBER / 100) {
        fprintf(stderr, "header and library versions differ\n");
        return 1;
    }

    fa2_problem_init(&problem, FA2_DTYPE_BF16, 1, 128, 128, 8, 8, 300);
    st = fa2_plan(&problem, &h200, &plan);
    printf("head_dim=300: %s\n  %s\n", fa2_status_string(st), fa2_last_error());
    if (st != FA2_ERROR_UNSUPPORTED_HEAD_DIM)
        return 1;

    fa2_problem_init(&problem, FA2_DTYPE_BF16, 2, 4096, 4096, 16, 4, 128);
    if ((st = fa2_plan(&problem, &h200, &plan)) != FA2_SUCCESS) {
        fprintf(stderr, "fa2_plan: %s: %s\n", fa2_status_string(st), fa2_last_error());
        return 1;
    }
    printf("plan for an H200, b=2 s=4096 h=16/4 d=128: Br=%d Bc=%d, %lld blocks, "
           "%lld B shared memory, backward workspace %lld B\n",
           plan.block_m, plan.block_n, (long long)plan.grid_blocks,
           (long long)plan.smem_bytes, (long long)plan.bwd_workspace_bytes);

    st = fa2_device_info_query(0, &device);
    if (st != FA2_SUCCESS) {
        printf("no usable CUDA device (%s): %s\nskipping the forward pass; exit 0\n",
               fa2_status_string(st), fa2_last_error());
        return 0;
    }
    printf("GPU 0: sm_%d%d, %d SMs\n", device.cc_major, device.cc_minor, device.sm_count);
    return run_forward(&device);
}
