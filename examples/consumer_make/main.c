/* A Makefile-only consumer of libfa2 found through pkg-config (see Makefile).
 * Plans attention for GPU 0 when there is one, or for a hand-described H100/H200,
 * prints the plan, shows one error path (a NULL problem), and with a GPU runs a
 * forward on zero-filled tensors (output must be zero). Exits 0 without a GPU. */
#include <stdio.h>

#include <cuda_runtime_api.h>
#include <fa2.h>

int main(void)
{
    fa2_device_info_t device = {sizeof(fa2_device_info_t), 9, 0, 132, 0, 232448, 233472};
    fa2_problem_t problem;
    fa2_plan_t plan;
    fa2_status_t st;
    int have_gpu;

    printf("libfa2 %u via pkg-config\n", fa2_version());
    st = fa2_plan(NULL, &device, &plan);
    printf("fa2_plan(NULL problem) -> %s: %s\n", fa2_status_string(st), fa2_last_error());
    if (st != FA2_ERROR_NULL_POINTER)
        return 1;

    st = fa2_device_info_query(0, &device);
    have_gpu = st == FA2_SUCCESS;
    if (!have_gpu)
        printf("no usable CUDA device (%s): %s\nplanning for an H200 described by hand\n",
               fa2_status_string(st), fa2_last_error());

    fa2_problem_init(&problem, FA2_DTYPE_FP16, 1, 1024, 1024, 8, 8, 64);
    if ((st = fa2_plan(&problem, &device, &plan)) != FA2_SUCCESS) {
        fprintf(stderr, "fa2_plan: %s: %s\n", fa2_status_string(st), fa2_last_error());
        return 1;
    }
    printf("fp16 b=1 s=1024 h=8 d=64: Br=%d Bc=%d warps=%d grid=%lld smem=%lld B\n",
           plan.block_m, plan.block_n, plan.warps, (long long)plan.grid_blocks,
           (long long)plan.smem_bytes);
    if (!have_gpu) {
        printf("no GPU: skipping the forward pass; exit 0\n");
        return 0;
    }

    {
        const size_t bytes = (size_t)1 * 1024 * 8 * 64 * 2;
        static unsigned short out[1024 * 8 * 64];
        void *q, *k, *v, *o;
        int nonzero = 0;
        if (cudaMalloc(&q, bytes) || cudaMalloc(&k, bytes) || cudaMalloc(&v, bytes) ||
            cudaMalloc(&o, bytes))
            return 1;
        cudaMemset(q, 0, bytes);
        cudaMemset(k, 0, bytes);
        cudaMemset(v, 0, bytes);
        cudaMemset(o, 0xff, bytes);
        st = fa2_forward(&plan, q, k, v, o, NULL, NULL, 0, NULL);
        if (st != FA2_SUCCESS) {
            fprintf(stderr, "fa2_forward: %s: %s\n", fa2_status_string(st), fa2_last_error());
            return 1;
        }
        cudaMemcpy(out, o, bytes, cudaMemcpyDeviceToHost);
        for (size_t i = 0; i < bytes / 2; i++)
            nonzero += out[i] != 0;
        printf("forward on zeros: %s (%d non-zero outputs)\n", nonzero ? "FAIL" : "ok", nonzero);
        cudaFree(q);
        cudaFree(k);
        cudaFree(v);
        cudaFree(o);
        return nonzero != 0;
    }
}
