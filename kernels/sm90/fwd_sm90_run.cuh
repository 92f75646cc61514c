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

// Pages of fewer rows go by cp.async: on the H200 the paged forward by TMA
// (overlapped loop) ran 0.93-0.95x cp.async's speed with 16-row boxes, 1.06x with 32.
constexpr int kMinPagedBoxRows = 32;

// A paged cache's box rows for TMA (FwdSm90Args::page_box_rows), or 0 for
// cp.async: pages and tiles nest (one's rows divide the other's), a box is whole
// 128-byte swizzle atoms (8 rows) and at least kMinPagedBoxRows, and the cache's
// strides suit tensor maps.
inline int paged_box_rows(const fa2_params_t &p, int block_n)
{
    const bool nest = p.page_size >= block_n ? p.page_size % block_n == 0
                                             : block_n % p.page_size == 0;
    const int rows = p.page_size < block_n ? p.page_size : block_n;
    if (!nest || rows % 8 != 0 || rows < kMinPagedBoxRows) return 0;
    return fa2_tma_kv_strides(p.num_pages, p.page_size, p.heads_kv, p.k_batch_stride,
                                      p.k_seq_stride, p.k_head_stride, p.v_batch_stride,
                                      p.v_seq_stride, p.v_head_stride)
               ? rows
               : 0;
}

// Whether Elem has kBoundedSoftcap instances: bf16 only
// (fa2_sm90_softcap_bounds_scores).
template <typename Elem>
constexpr bool kBoundedSoftcapFor = false;
template <>
constexpr bool kBoundedSoftcapFor<__nv_bfloat16> = true;

// The kernel of one ScoreKind for a path: 0 dense, 1 packed, 2 paged by TMA,
// 3 by cp.async, 4 by kProducerKv on TrProducer's tiles (the producer layout where the
// bucket has one, else cp.async again), 5 dense in the producer layout (else as 0).
template <typename Tr, typename TrProducer, int kScores, int kProducerKv>
inline auto fwd_sm90_kernel_for(int path)
{
    switch (path) {
    case 0: return fwd_sm90_kernel<Tr, kDenseSeq, kScores, kKvByTma>;
    case 1: return fwd_sm90_kernel<Tr, kPackedSeq, kScores, kKvByTma>;
    case 2: return fwd_sm90_kernel<Tr, kPagedSeq, kScores, kKvByTma>;
    case 3: return fwd_sm90_kernel<Tr, kPagedSeq, kScores, kKvByCpAsync>;
    case 4: return fwd_sm90_kernel<TrProducer, kPagedSeq, kScores, kProducerKv>;
    default:
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

    // A paged cache, or a dense batch of more than 64 rows, goes to the producer layout
    // where the planner says so (fa2_fwd_sm90_takes_producer, sm90/fwd_sm90_tiles.h:
    // d = 128, softcap off or bounding the scores): paged at every page size (on the
    // H200 0.96-1.01 of contiguous K/V at pages of 16 to 128 rows, TMA's
    // boxes 0.86-0.92), dense 1.05-1.10x faster than the one-warpgroup tile.
    constexpr bool kProducer = FA2_SM90_HAS_PRODUCER(Tr::kHeadDim, Tr::kWarpgroups);
    constexpr int kProducerKv = kProducer ? kKvByProducer : kKvByCpAsync;
    using TrProducer = FwdSm90Traits<Elem, kHeadDim,
                                  kProducer ? FA2_SM90_PRODUCER_WARPGROUPS : Tr::kWarpgroups>;
    const int scores =
        !runs_scored_kernels(p)                                           ? kPlainScores
        : fa2_sm90_softcap_bounds_scores(p.dtype, p.softcap, p.alibi_slopes != nullptr)
            ? kBoundedSoftcap
            : kGeneralScores;
    const bool producer =
        kProducer && fa2_fwd_sm90_takes_producer(Tr::kHeadDim, Tr::kWarpgroups,
                                                 p.page_table != nullptr,
                                                 p.cu_seqlens_q ? 0 : p.seqlen_q,
                                                 p.dtype, p.softcap, p.alibi_slopes != nullptr);

    FwdSm90Args args = {};
    args.p = p;
    const bool bf16 = p.dtype == FA2_DTYPE_BF16;
    if (!p.page_table) {
        // The dense and packed kernels read K and V by TMA. Without keys (the
        // driver refuses a map of 0 rows) no tile is read and the maps stay empty.
        const KvLayout k = kv_layout(p, p.k_seq_stride, p.k_head_stride, p.k_batch_stride);
        const KvLayout v = kv_layout(p, p.v_seq_stride, p.v_head_stride, p.v_batch_stride);
        if (k.extent[2] > 0) {
            cudaError_t e = encode_kv_map(&args.k_map, p.k, bf16, k, Tr::kBlockN);
            if (e == cudaSuccess) e = encode_kv_map(&args.v_map, p.v, bf16, v, Tr::kBlockN);
            if (e != cudaSuccess) return e;
        }
    } else if (const int box_rows = producer ? 0 : paged_box_rows(p, Tr::kBlockN)) {
        // (head_dim, heads_kv, page rows, pages); a layout the driver refuses keeps cp.async
        const KvLayout k = {{p.head_dim, p.heads_kv, p.page_size, p.num_pages},
                            {1, p.k_head_stride, p.k_seq_stride, p.k_batch_stride}};
        const KvLayout v = {{p.head_dim, p.heads_kv, p.page_size, p.num_pages},
                            {1, p.v_head_stride, p.v_seq_stride, p.v_batch_stride}};
        if (encode_kv_map(&args.k_map, p.k, bf16, k, box_rows) == cudaSuccess &&
            encode_kv_map(&args.v_map, p.v, bf16, v, box_rows) == cudaSuccess)
            args.page_box_rows = box_rows;
    }
    const int path = !p.page_table            ? (p.cu_seqlens_q ? 1 : producer ? 5 : 0)
                     : producer               ? 4
                     : args.page_box_rows > 0 ? 2
                                              : 3;
    auto kernel = scores == kPlainScores
                      ? fwd_sm90_kernel_for<Tr, TrProducer, kPlainScores, kProducerKv>(path)
                      : fwd_sm90_kernel_for<Tr, TrProducer, kGeneralScores, kProducerKv>(path);
    if constexpr (kBoundedSoftcapFor<Elem>)
        if (scores == kBoundedSoftcap)
            kernel = fwd_sm90_kernel_for<Tr, TrProducer, kBoundedSoftcap, kProducerKv>(path);
    const int64_t block_m = producer ? TrProducer::kBlockM : Tr::kBlockM;
    const int64_t grid = (p.seqlen_q + block_m - 1) / block_m * p.heads_q * p.batch;
    const int threads =
        producer ? FwdSm90Launch<TrProducer, kProducerKv>::kThreads : Tr::kThreads;
    using ProducerLaunch = FwdSm90Launch<TrProducer, kProducerKv>;
    static_assert(!kProducer || ProducerLaunch::kSmemBytes ==
                                    fa2_fwd_sm90_producer_smem_bytes(
                                        Tr::kHeadDim, TrProducer::kBlockM, TrProducer::kBlockN),
                  "the planner's producer shared memory");
    const cudaError_t e = launch_one(kernel, grid, threads,
                                     producer ? ProducerLaunch::kSmemBytes : Tr::kSmemBytes,
                                     stream, args);
#if FA2_PHASE_TRACE
    if (e == cudaSuccess) print_phase_trace<<<1, 1, 0, stream>>>();
#endif
    return e;
}

}  // namespace fa2
