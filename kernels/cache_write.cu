// fa2_cache_write's kernel: one thread per 16-byte chunk of a new row (keys and values
// both), copied to its slot's page; slots out of range skipped.
#include <stdint.h>

#include "common/launch.cuh"
#include "common/params.h"

namespace {

__global__ void cache_write_kernel(const fa2_cache_write_params_t p)
{
    const int chunks = p.head_dim / 8;  // 16-byte chunks per head row
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    const int64_t per_token = static_cast<int64_t>(p.heads_kv) * chunks;
    if (i >= p.n_tokens * per_token) return;
    const int64_t t = i / per_token;
    const int head = static_cast<int>(i % per_token / chunks);
    const int chunk = static_cast<int>(i % chunks);
    const int64_t slot = p.slot_mapping[t];
    if (slot < 0 || slot >= p.slots) return;  // padding token, or a slot past the cache
    const int64_t page = slot / p.page_size, row = slot % p.page_size;
    const int64_t src = t * p.new_row_stride + head * p.head_dim + chunk * 8;
    const int64_t dst_k = page * p.page_stride_k + row * p.row_stride_k +
                          head * p.head_stride_k + chunk * 8;
    const int64_t dst_v = page * p.page_stride_v + row * p.row_stride_v +
                          head * p.head_stride_v + chunk * 8;
    // 2-byte elements: offsets in elements, 16-byte copies
    *reinterpret_cast<uint4 *>(static_cast<uint16_t *>(p.k_cache) + dst_k) =
        *reinterpret_cast<const uint4 *>(static_cast<const uint16_t *>(p.k_new) + src);
    *reinterpret_cast<uint4 *>(static_cast<uint16_t *>(p.v_cache) + dst_v) =
        *reinterpret_cast<const uint4 *>(static_cast<const uint16_t *>(p.v_new) + src);
}

}  // namespace

extern "C" int fa2_cache_write_launch(const fa2_cache_write_params_t *p, void *stream)
{
    constexpr int kThreads = FA2_CACHE_WRITE_THREADS;
    const int64_t work = p->n_tokens * p->heads_kv * (p->head_dim / 8);
    return fa2::launch(cache_write_kernel, (work + kThreads - 1) / kThreads, kThreads, 0,
                       static_cast<cudaStream_t>(stream), *p);
}
