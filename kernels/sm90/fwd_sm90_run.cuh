// Definition of fa2::fwd_sm90_run: grid, shared memory, launch of the Hopper forward.
#pragma once

#include <stdint.h>

#include "fwd_run.h"
#include "common/launch.cuh"
#include "sm90/fwd_sm90_kernel.cuh"
#include "sm90/tensor_map.h"

namespace fa2 {

// K's or V's layout for TMA: a dense batch's (head_dim, heads_kv, seqlen_k,
// batch), a packed batch's rows as one sequence (head_dim, heads_kv, total_k, 1).
inline KvLayout kv_layout(const fa2_params_t &p, int64_t seq_stride, int64_t head_stride,
                          int64_t batch_stride)
{
    const bool packed = p.cu_seqlens_q != nullptr;
    return {{p.head_dim, p.heads_kv, packed ? p.total_k : p.seqlen_k, packed ? 1 : p.batch},
            {1, head_stride, seq_stride, packed ? 0 : batch_stride}};
}

// Whether Elem has kBoundedSoftcap instances: bf16 only (FA2_SCORES_BOUNDED_SOFTCAP).
template <typename Elem>
constexpr bool kBoundedSoftcapFor = false;
template <>
constexpr bool kBoundedSoftcapFor<__nv_bfloat16> = true;

// The kernel of one ScoreKind for the plan's fa2_fwd_kernel_t: K and V by TMA (dense or
// packed), pages by TMA or cp.async, or the producer layout (TrProducer's tiles, dense
// or paged by kProducerKv: the producer where the bucket has one, else cp.async).
template <typename Tr, typename TrProducer, int kScores, int kProducerKv>
inline auto fwd_sm90_kernel_for(const fa2_params_t &p)
{
    switch (p.fwd_kernel) {
    case FA2_FWD_KERNEL_WGMMA:
        return !p.cu_seqlens_q ? fwd_sm90_kernel<Tr, kDenseSeq, kScores, kKvByTma>
                               : fwd_sm90_kernel<Tr, kPackedSeq, kScores, kKvByTma>;
    case FA2_FWD_KERNEL_WGMMA_PAGED_TMA: return fwd_sm90_kernel<Tr, kPagedSeq, kScores, kKvByTma>;
    case FA2_FWD_KERNEL_WGMMA_PAGED_COPY:
        return fwd_sm90_kernel<Tr, kPagedSeq, kScores, kKvByCpAsync>;
    default:  // FA2_FWD_KERNEL_WGMMA_PRODUCER
        if (p.page_table) return fwd_sm90_kernel<TrProducer, kPagedSeq, kScores, kProducerKv>;
        if constexpr (kProducerKv == kKvByProducer)
            return fwd_sm90_kernel<TrProducer, kDenseSeq, kScores, kKvByProducer>;
        else
            return fwd_sm90_kernel<Tr, kDenseSeq, kScores, kKvByTma>;
    }
}

template <typename Elem, int kHeadDim>
cudaError_t fwd_sm90_run(const fa2_params_t &p, cudaStream_t stream)
{
    using Tr = FwdSm90Traits<Elem, kHeadDim>;
    // The producer layout's tiles where the bucket has one (FA2_WGMMA_HAS_PRODUCER).
    constexpr bool kProducer = FA2_WGMMA_HAS_PRODUCER(Tr::kHeadDim, Tr::kWarpgroups);
    constexpr int kProducerKv = kProducer ? kKvByProducer : kKvByCpAsync;
    using TrProducer = FwdSm90Traits<Elem, kHeadDim,
                                  kProducer ? FA2_WGMMA_PRODUCER_WARPGROUPS : Tr::kWarpgroups>;
    const bool producer = p.fwd_kernel == FA2_FWD_KERNEL_WGMMA_PRODUCER;

    FwdSm90Args args = {};
    args.p = p;
    const bool bf16 = p.dtype == FA2_DTYPE_BF16;
    cudaError_t e = cudaSuccess;
    if (!p.page_table) {
        // The dense and packed kernels read K and V by TMA. Without keys (the
        // driver refuses a map of 0 rows) no tile is read and the maps stay empty.
        const KvLayout k = kv_layout(p, p.k_seq_stride, p.k_head_stride, p.k_batch_stride);
        const KvLayout v = kv_layout(p, p.v_seq_stride, p.v_head_stride, p.v_batch_stride);
        if (k.extent[2] > 0) {
            e = encode_kv_map(&args.k_map, p.k, bf16, k, Tr::kBlockN);
            if (e == cudaSuccess) e = encode_kv_map(&args.v_map, p.v, bf16, v, Tr::kBlockN);
        }
    } else if (p.fwd_kernel == FA2_FWD_KERNEL_WGMMA_PAGED_TMA) {
        // (head_dim, heads_kv, page rows, pages)
        const KvLayout k = {{p.head_dim, p.heads_kv, p.page_size, p.num_pages},
                            {1, p.k_head_stride, p.k_seq_stride, p.k_batch_stride}};
        const KvLayout v = {{p.head_dim, p.heads_kv, p.page_size, p.num_pages},
                            {1, p.v_head_stride, p.v_seq_stride, p.v_batch_stride}};
        e = encode_kv_map(&args.k_map, p.k, bf16, k, p.page_box_rows);
        if (e == cudaSuccess) e = encode_kv_map(&args.v_map, p.v, bf16, v, p.page_box_rows);
        args.page_box_rows = p.page_box_rows;
    }
    if (e != cudaSuccess) return e;
    auto kernel = p.scores == kPlainScores
                      ? fwd_sm90_kernel_for<Tr, TrProducer, kPlainScores, kProducerKv>(p)
                      : fwd_sm90_kernel_for<Tr, TrProducer, kGeneralScores, kProducerKv>(p);
    if constexpr (kBoundedSoftcapFor<Elem>)
        if (p.scores == kBoundedSoftcap)
            kernel = fwd_sm90_kernel_for<Tr, TrProducer, kBoundedSoftcap, kProducerKv>(p);
    const int64_t block_m = producer ? TrProducer::kBlockM : Tr::kBlockM;
    const int64_t grid = (p.seqlen_q + block_m - 1) / block_m * p.heads_q * p.batch;
    using ProducerLaunch = FwdSm90Launch<TrProducer, kProducerKv>;
    static_assert(!kProducer || ProducerLaunch::kSmemBytes ==
                                    fa2_fwd_sm90_producer_smem_bytes(
                                        Tr::kHeadDim, TrProducer::kBlockM, TrProducer::kBlockN),
                  "the planner's producer shared memory");
    e = launch_one(kernel, grid, producer ? ProducerLaunch::kThreads : Tr::kThreads,
                   producer ? ProducerLaunch::kSmemBytes : Tr::kSmemBytes, stream, args);
    return e;
}

}  // namespace fa2
