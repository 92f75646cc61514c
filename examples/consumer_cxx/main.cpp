// A C++ consumer of an installed libfa2, linked statically (fa2::fa2_static, which
// brings CUDA::cudart through its interface). Same flow as the C example, in C++:
// a status-to-exception helper, RAII device buffers, an error path (heads_q not a
// multiple of heads_kv, then a NULL tensor), and, with a GPU, a forward and a backward
// pass. Without a GPU it says so and exits 0.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>
#include <fa2.h>

namespace {

struct Fa2Error : std::runtime_error {
    fa2_status_t status;
    Fa2Error(const char *what, fa2_status_t s)
        : std::runtime_error(std::string(what) + ": " + fa2_status_string(s) + ": " +
                             fa2_last_error()),
          status(s) {}
};

void check(fa2_status_t s, const char *what)
{
    if (s != FA2_SUCCESS)
        throw Fa2Error(what, s);
}

struct DeviceBuffer {
    void *ptr = nullptr;
    explicit DeviceBuffer(size_t bytes)
    {
        if (cudaMalloc(&ptr, bytes) != cudaSuccess)
            throw std::runtime_error("cudaMalloc failed");
    }
    ~DeviceBuffer() { cudaFree(ptr); }
    DeviceBuffer(const DeviceBuffer &) = delete;
    DeviceBuffer &operator=(const DeviceBuffer &) = delete;
};

uint16_t to_bf16(float f)
{
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

float from_bf16(uint16_t h)
{
    uint32_t u = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}

fa2_plan_t make_plan(const fa2_device_info_t &device, int64_t b, int64_t s, int64_t hq,
                     int64_t hkv, int64_t d, bool causal)
{
    fa2_problem_t problem;
    fa2_problem_init(&problem, FA2_DTYPE_BF16, b, s, s, hq, hkv, d);
    problem.causal = causal ? 1 : 0;
    fa2_plan_t plan;
    check(fa2_plan(&problem, &device, &plan), "fa2_plan");
    return plan;
}

int run_gpu(const fa2_device_info_t &device)
{
    const int64_t b = 1, s = 256, hq = 8, hkv = 2, d = 128;
    const fa2_plan_t plan = make_plan(device, b, s, hq, hkv, d, true);
    const size_t nq = b * s * hq * d, nkv = b * s * hkv * d;
    DeviceBuffer q(nq * 2), k(nkv * 2), v(nkv * 2), o(nq * 2), d_o(nq * 2), dq(nq * 2),
        dk(nkv * 2), dv(nkv * 2), lse(b * hq * s * sizeof(float)),
        workspace(static_cast<size_t>(plan.bwd_workspace_bytes));

    std::vector<uint16_t> host(nq);
    uint32_t x = 12345;
    for (auto &e : host) {
        x = x * 1664525u + 1013904223u;
        e = to_bf16(static_cast<float>(x >> 8) / 16777216.0f - 0.5f);
    }
    cudaMemcpy(q.ptr, host.data(), nq * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(d_o.ptr, host.data(), nq * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(k.ptr, host.data(), nkv * 2, cudaMemcpyHostToDevice);
    std::vector<uint16_t> ones(nkv, to_bf16(1.0f));
    cudaMemcpy(v.ptr, ones.data(), nkv * 2, cudaMemcpyHostToDevice);

    check(fa2_forward(&plan, q.ptr, k.ptr, v.ptr, o.ptr, static_cast<float *>(lse.ptr),
                      nullptr, 0, nullptr),
          "fa2_forward");
    check(fa2_backward(&plan, q.ptr, k.ptr, v.ptr, o.ptr, d_o.ptr,
                       static_cast<const float *>(lse.ptr), dq.ptr, dk.ptr, dv.ptr,
                       workspace.ptr, static_cast<size_t>(plan.bwd_workspace_bytes), nullptr),
          "fa2_backward");
    if (cudaDeviceSynchronize() != cudaSuccess)
        throw std::runtime_error(cudaGetErrorString(cudaGetLastError()));

    // V = 1: every output element is 1; the gradients must be finite.
    int off = 0, nonfinite = 0;
    cudaMemcpy(host.data(), o.ptr, nq * 2, cudaMemcpyDeviceToHost);
    for (uint16_t e : host)
        off += !(std::fabs(from_bf16(e) - 1.0f) < 1e-2f);
    for (const DeviceBuffer *g : {&dq, &dk, &dv}) {
        size_t n = g == &dq ? nq : nkv;
        cudaMemcpy(host.data(), g->ptr, n * 2, cudaMemcpyDeviceToHost);
        for (size_t i = 0; i < n; i++)
            nonfinite += !std::isfinite(from_bf16(host[i]));
    }
    std::printf("forward + backward bf16 b=%lld s=%lld hq=%lld hkv=%lld d=%lld causal: "
                "O %s (%d off), gradients %s (%d non-finite)\n",
                (long long)b, (long long)s, (long long)hq, (long long)hkv, (long long)d,
                off ? "FAIL" : "ok", off, nonfinite ? "FAIL" : "ok", nonfinite);
    return off || nonfinite;
}

} // namespace

int main()
{
    const fa2_device_info_t h200 = {sizeof(fa2_device_info_t), 9, 0, 132, 0, 232448, 233472};
    std::printf("libfa2 %u (static), header %d\n", fa2_version(), FA2_VERSION_NUMBER);
    try {
        make_plan(h200, 1, 128, 6, 4, 64, false);
        std::fprintf(stderr, "heads 6/4 was accepted\n");
        return 1;
    } catch (const Fa2Error &e) {
        std::printf("heads_q=6, heads_kv=4 -> %s\n", e.what());
        if (e.status != FA2_ERROR_HEADS_MISMATCH)
            return 1;
    }
    const fa2_plan_t plan = make_plan(h200, 1, 128, 8, 8, 64, false);
    fa2_status_t st = fa2_forward(&plan, nullptr, nullptr, nullptr, nullptr, nullptr,
                                  nullptr, 0, nullptr);
    std::printf("fa2_forward(q=NULL) -> %s: %s\n", fa2_status_string(st), fa2_last_error());
    if (st != FA2_ERROR_NULL_POINTER)
        return 1;

    fa2_device_info_t device;
    st = fa2_device_info_query(0, &device);
    if (st != FA2_SUCCESS) {
        std::printf("no usable CUDA device (%s): %s\nskipping the GPU part; exit 0\n",
                    fa2_status_string(st), fa2_last_error());
        return 0;
    }
    try {
        return run_gpu(device);
    } catch (const std::exception &e) {
        std::fprintf(stderr, "%s\n", e.what());
        return 1;
    }
}
