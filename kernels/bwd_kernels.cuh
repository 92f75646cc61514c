// The backward pass (FlashAttention-2 Algorithm 2) as three kernels, none with
// atomics, so results are bit-identical run to run:
//   dot_do_o:  D = rowsum(dO ∘ O), fp32, row_lanes(d) lanes per query row;
//   dkdv:      one block per (batch, kv head, key tile, column slice); loops over the
//              query heads of the GQA group and the query tiles that see the keys,
//              recomputes Sᵀ = K Qᵀ and Pᵀ = exp(scale·Sᵀ − LSE), dPᵀ = V dOᵀ,
//              dSᵀ = Pᵀ ∘ (dPᵀ − D), and accumulates dV += Pᵀ dO, dK += dSᵀ Q in
//              registers (keys as rows, so Pᵀ and dSᵀ are the A operand as computed);
//   dq:        one block per (batch, head, query tile); recomputes S, P, dP, dS over
//              the visible key tiles and accumulates dQ += dS K in registers.
// Costs 7 GEMMs against the 5 of an atomic dQ; see docs/performance.md.
#pragma once

#include <stdint.h>

#include "bwd_block.cuh"
#include "bwd_params.h"
#include "bwd_tiles.h"
#include "bwd_traits.cuh"
#include "exp_scores.cuh"
#include "fwd_mask.cuh"
#include "ptx.cuh"
#include "warp_gemm.cuh"

namespace fa2 {

// Dot product of two vectors of 8 packed 16-bit values, in fp32.
template <typename Elem>
__device__ __forceinline__ float dot8(uint4 a, uint4 b)
{
    const uint32_t *x = reinterpret_cast<const uint32_t *>(&a);
    const uint32_t *y = reinterpret_cast<const uint32_t *>(&b);
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const float2 fx = unpack2<Elem>(x[i]), fy = unpack2<Elem>(y[i]);
        s = fmaf(fx.x, fy.x, fmaf(fx.y, fy.y, s));
    }
    return s;
}

constexpr int kDotWarps = FA2_BWD_ROW_WARPS;

// The row kernels (dot_do_o, dq_convert): lanes per query row (bwd_tiles.h), so every
// lane moves 16 bytes of each 16-bit tensor.
__host__ __device__ constexpr int row_lanes(int head_dim)
{
    return FA2_BWD_ROW_LANES(head_dim);
}

// Thread blocks (of 32 * kDotWarps threads) of a row kernel over `rows` rows.
inline int64_t row_kernel_blocks(int64_t rows, int head_dim)
{
    return fa2_bwd_row_kernel_blocks(rows, head_dim);
}

// This thread's row of a row kernel (possibly past the last) and its first column.
struct RowLane {
    int64_t row;
    int col;
};

__device__ __forceinline__ RowLane row_lane(int head_dim)
{
    const int lanes = row_lanes(head_dim);
    const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    return RowLane{t / lanes, static_cast<int>(t % lanes) * 8};
}

// D[b, h, i] = sum_c dO[b, i, h, c] * O[b, i, h, c] in fp32, row_lanes(d) lanes per
// row. In atomic mode also zeroes the row's dQ accumulator.
template <typename Elem>
__global__ void __launch_bounds__(32 * kDotWarps) dot_do_o_kernel(const fa2_bwd_params_t p)
{
    const fa2_fwd_params_t &f = p.fwd;
    const int lanes = row_lanes(f.head_dim);
    const RowLane rl = row_lane(f.head_dim);
    const int64_t rows = static_cast<int64_t>(f.batch) * f.heads_q * f.seqlen_q;
    const int64_t warp_row0 = rl.row - (threadIdx.x % 32) / lanes;
    if (warp_row0 >= rows) return;  // whole warps only: the sum below shuffles
    const bool live = rl.row < rows && rl.col < f.head_dim;
    float s = 0.f;
    if (live) {
        const int i = static_cast<int>(rl.row % f.seqlen_q);
        const int head = static_cast<int>((rl.row / f.seqlen_q) % f.heads_q);
        const int batch = static_cast<int>(rl.row / (static_cast<int64_t>(f.seqlen_q) * f.heads_q));
        const int64_t offset = batch * f.o_batch_stride + head * f.o_head_stride +
                               i * f.o_seq_stride + rl.col;
        const uint4 o = *reinterpret_cast<const uint4 *>(static_cast<const Elem *>(f.o) + offset);
        const uint4 d_o = *reinterpret_cast<const uint4 *>(static_cast<const Elem *>(p.d_o) + offset);
        if (p.dq_accum) {
            float4 *acc = reinterpret_cast<float4 *>(p.dq_accum + rl.row * f.head_dim + rl.col);
            acc[0] = make_float4(0.f, 0.f, 0.f, 0.f);
            acc[1] = make_float4(0.f, 0.f, 0.f, 0.f);
        }
        s = dot8<Elem>(o, d_o);
    }
    for (int m = lanes / 2; m >= 1; m /= 2) s += __shfl_xor_sync(0xffffffffu, s, m);
    if (live && rl.col == 0) p.d_sum[rl.row] = s;
}

// dQ = scale · dq_accum, to the element type and Q's strides; row_lanes(d) lanes per
// row.
template <typename Elem>
__global__ void __launch_bounds__(32 * kDotWarps) dq_convert_kernel(const fa2_bwd_params_t p)
{
    const fa2_fwd_params_t &f = p.fwd;
    const RowLane rl = row_lane(f.head_dim);
    if (rl.row >= static_cast<int64_t>(f.batch) * f.heads_q * f.seqlen_q || rl.col >= f.head_dim)
        return;
    const int i = static_cast<int>(rl.row % f.seqlen_q);
    const int head = static_cast<int>((rl.row / f.seqlen_q) % f.heads_q);
    const int batch = static_cast<int>(rl.row / (static_cast<int64_t>(f.seqlen_q) * f.heads_q));
    const float4 *acc = reinterpret_cast<const float4 *>(p.dq_accum + rl.row * f.head_dim + rl.col);
    const float4 a = acc[0], b = acc[1];
    const float s = f.softmax_scale;
    uint4 out;
    out.x = pack2<Elem>(a.x * s, a.y * s);
    out.y = pack2<Elem>(a.z * s, a.w * s);
    out.z = pack2<Elem>(b.x * s, b.y * s);
    out.w = pack2<Elem>(b.z * s, b.w * s);
    *reinterpret_cast<uint4 *>(static_cast<Elem *>(p.dq) + batch * f.q_batch_stride +
                               head * f.q_head_stride + i * f.q_seq_stride + rl.col) = out;
}

// kAtomicDq: also adds dS K into p.dq_accum with fp32 atomics (the dq kernel is then
// not needed); else the dQ kernel computes dQ without atomics.
template <typename Tr, bool kAtomicDq>
__global__ void __launch_bounds__(Tr::kThreads, 1) dkdv_kernel(const fa2_bwd_params_t p)
{
    using Elem = typename Tr::Elem;
    constexpr int kM = Tr::kMTiles;
    constexpr int kN = Tr::kBlockM / 8;      // n8 tiles of Sᵀ (queries)
    constexpr int kD = Tr::kSliceDim / 8;    // n8 tiles of the dK/dV slice
    extern __shared__ __align__(128) uint8_t smem[];
    const fa2_fwd_params_t &f = p.fwd;

    const int tid = threadIdx.x;
    const int warp = tid / 32;
    const int lane = tid % 32;

    const KeyBlock b = key_block<Tr::kBlockN, Tr::kBlockM, Tr::kSlices>(f);
    const int batch = b.batch, kv_head = b.kv_head, slice = b.slice;
    const int key_first = b.key_first;
    const KeyWindow &win = b.win;

    const uint32_t k_smem = smem_addr(smem);
    const uint32_t v_smem = k_smem + Tr::kKVBytes;
    const uint32_t q_smem[2] = {v_smem + Tr::kKVBytes, v_smem + Tr::kKVBytes + Tr::kQBytes};
    const uint32_t do_smem[2] = {q_smem[1] + Tr::kQBytes, q_smem[1] + 2 * Tr::kQBytes};
    float *stats = reinterpret_cast<float *>(smem + 2 * Tr::kKVBytes + 4 * Tr::kQBytes);
    // stats[buf * 2 * kBlockM + {0: lse, kBlockM: D} + column]
    constexpr int ds_offset = Tr::kDkdvSmemBytes;  // atomic mode: dS [query][key]

    const Elem *q_base = static_cast<const Elem *>(f.q) + batch * f.q_batch_stride;
    const Elem *do_base = static_cast<const Elem *>(p.d_o) + batch * f.o_batch_stride;

    // Loads the Q, dO, LSE and D tiles of step `step` into buffer `buf`.
    auto load_step = [&](int step, int buf) {
        const int head = b.head(step);
        const int row0 = b.tile(step) * Tr::kBlockM;
        const int rows = f.seqlen_q - row0;
        load_tile<Elem, Tr::kBlockM, Tr::kLoadChunks, Tr::kRowBytes, Tr::kThreads>(
            q_smem[buf], q_base + head * f.q_head_stride + row0 * f.q_seq_stride, f.q_seq_stride,
            rows, f.head_dim, tid);
        load_tile<Elem, Tr::kBlockM, Tr::kLoadChunks, Tr::kRowBytes, Tr::kThreads>(
            do_smem[buf], do_base + head * f.o_head_stride + row0 * f.o_seq_stride,
            f.o_seq_stride, rows, f.head_dim, tid);
        const int64_t stat0 = (static_cast<int64_t>(batch) * f.heads_q + head) * f.seqlen_q + row0;
        for (int c = tid; c < 2 * Tr::kBlockM; c += Tr::kThreads) {
            const int col = c % Tr::kBlockM;
            const float *src = c < Tr::kBlockM ? f.lse + stat0 + col : p.d_sum + stat0 + col;
            cp_async_4(smem_addr(stats + buf * 2 * Tr::kBlockM + c), col < rows ? src : f.lse,
                       col < rows);
        }
    };

    float dv[kM][kD][4], dk[kM][kD][4];
    zero(dv);
    zero(dk);

    if (b.steps > 0) {
        const Elem *k = static_cast<const Elem *>(f.k) + batch * f.k_batch_stride +
                        kv_head * f.k_head_stride + key_first * f.k_seq_stride;
        const Elem *v = static_cast<const Elem *>(f.v) + batch * f.v_batch_stride +
                        kv_head * f.v_head_stride + key_first * f.v_seq_stride;
        const int keys = f.seqlen_k - key_first;
        load_tile<Elem, Tr::kBlockN, Tr::kLoadChunks, Tr::kRowBytes, Tr::kThreads>(
            k_smem, k, f.k_seq_stride, keys, f.head_dim, tid);
        load_tile<Elem, Tr::kBlockN, Tr::kLoadChunks, Tr::kRowBytes, Tr::kThreads>(
            v_smem, v, f.v_seq_stride, keys, f.head_dim, tid);
        load_step(0, 0);
        cp_async_commit();

        const uint32_t warp_rows = warp * kM * 16 * Tr::kRowBytes;
        const uint32_t slice_bytes = slice * Tr::kSliceDim * 2;
        for (int step = 0; step < b.steps; ++step) {
            const int buf = step & 1;
            cp_async_wait<0>();
            __syncthreads();  // tiles of `step` visible; everyone is done with buf ^ 1
            if (step + 1 < b.steps) {
                load_step(step + 1, buf ^ 1);
                cp_async_commit();
            }
            const int row0 = b.tile(step) * Tr::kBlockM;
            const float *lse = stats + buf * 2 * Tr::kBlockM;
            const float *dsum = lse + Tr::kBlockM;

            // Pᵀ = exp(scale·Sᵀ − LSE): rows are keys, columns queries.
            float pt[kM][kN][4];
            zero(pt);
            gemm_abt<Elem, Tr::kRowBytes, kM, kN, Tr::kHeadDim / 16>(pt, k_smem + warp_rows,
                                                                    q_smem[buf], lane);
            const bool masked = row0 + Tr::kBlockM > f.seqlen_q ||
                                win.block_needs_mask(row0, row0 + Tr::kBlockM - 1, key_first,
                                                     key_first + Tr::kBlockN - 1);
#pragma unroll
            for (int m = 0; m < kM; ++m) {
                const int key_row = key_first + warp * kM * 16 + m * 16 + (lane >> 2);
                exp_scores_keys_as_rows(pt[m], f, win, lse, masked, row0, key_row, lane);
            }

            // dSᵀ = Pᵀ ∘ (dPᵀ − D), dPᵀ = V dOᵀ.
            float ds[kM][kN][4];
            zero(ds);
            gemm_abt<Elem, Tr::kRowBytes, kM, kN, Tr::kHeadDim / 16>(ds, v_smem + warp_rows,
                                                                    do_smem[buf], lane);
#pragma unroll
            for (int m = 0; m < kM; ++m)
#pragma unroll
                for (int n = 0; n < kN; ++n)
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const int col = n * 8 + 2 * (lane & 3) + (e & 1);
                        ds[m][n][e] = pt[m][n][e] * (ds[m][n][e] - dsum[col]);
                    }

            if constexpr (kAtomicDq) {
                // dS to shared memory as [query][key], rounded as the GEMMs see it.
#pragma unroll
                for (int m = 0; m < kM; ++m)
#pragma unroll
                    for (int n = 0; n < kN; ++n)
#pragma unroll
                        for (int e = 0; e < 4; ++e) {
                            const int key = warp * kM * 16 + m * 16 + (lane >> 2) + 8 * (e >> 1);
                            const int query = n * 8 + 2 * (lane & 3) + (e & 1);
                            *reinterpret_cast<Elem *>(smem + ds_offset +
                                                      swizzled<Tr::kDsRowBytes>(query, key / 8) +
                                                      (key % 8) * 2) = to_elem<Elem>(ds[m][n][e]);
                        }
            }
            gemm_pb<Elem, Tr::kRowBytes, kM, kD, Tr::kBlockM / 16>(dv, pt, do_smem[buf] + slice_bytes,
                                                                   lane);
            gemm_pb<Elem, Tr::kRowBytes, kM, kD, Tr::kBlockM / 16>(dk, ds, q_smem[buf] + slice_bytes,
                                                                   lane);
            if constexpr (kAtomicDq) {
                __syncthreads();  // dS complete
                constexpr int kWM = Tr::kAtomicMTiles, kWN = Tr::kAtomicNTiles;
                const int warp_m = warp % Tr::kAtomicWarpsM, warp_n = warp / Tr::kAtomicWarpsM;
                float dq[kWM][kWN][4];
                zero(dq);
                gemm_ab<Elem, Tr::kDsRowBytes, Tr::kRowBytes, kWM, kWN, Tr::kBlockN / 16>(
                    dq, smem_addr(smem + ds_offset) + warp_m * kWM * 16 * Tr::kDsRowBytes,
                    k_smem, (slice * Tr::kSliceDim) / 8 + warp_n * kWN, lane);
                add_dq(p, batch, b.head(step), row0 + warp_m * kWM * 16,
                       slice * Tr::kSliceDim + warp_n * kWN * 8, dq, lane);
            }
        }
    }

    store_dkdv<Elem>(p, b, dk, dv, key_first + warp * kM * 16, slice * Tr::kSliceDim, lane);
}

template <typename Tr>
__global__ void __launch_bounds__(Tr::kDqThreads, 1) dq_kernel(const fa2_bwd_params_t p)
{
    using Elem = typename Tr::Elem;
    constexpr int kM = Tr::kDqMTiles;
    constexpr int kN = Tr::kDqBlockN / 8;
    constexpr int kD = Tr::kHeadDim / 8;
    extern __shared__ __align__(128) uint8_t smem[];
    const fa2_fwd_params_t &f = p.fwd;

    const int tid = threadIdx.x;
    const int warp = tid / 32;
    const int lane = tid % 32;

    const auto [batch, head, kv_head, row_first, row_last, n_first, n_end, win] =
        query_tile<Tr::kDqBlockM, Tr::kDqBlockN, false>(f);

    const uint32_t q_smem = smem_addr(smem);
    const uint32_t do_smem = q_smem + Tr::kDqQBytes;
    const uint32_t k_smem[2] = {do_smem + Tr::kDqQBytes, do_smem + Tr::kDqQBytes + Tr::kDqKVBytes};
    const uint32_t v_smem[2] = {k_smem[1] + Tr::kDqKVBytes, k_smem[1] + 2 * Tr::kDqKVBytes};

    const Elem *k = static_cast<const Elem *>(f.k) + batch * f.k_batch_stride + kv_head * f.k_head_stride;
    const Elem *v = static_cast<const Elem *>(f.v) + batch * f.v_batch_stride + kv_head * f.v_head_stride;
    auto load_kv = [&](int n_block, int buf) {
        const int key0 = n_block * Tr::kDqBlockN;
        load_tile<Elem, Tr::kDqBlockN, Tr::kLoadChunks, Tr::kRowBytes, Tr::kDqThreads>(
            k_smem[buf], k + key0 * f.k_seq_stride, f.k_seq_stride, f.seqlen_k - key0, f.head_dim, tid);
        load_tile<Elem, Tr::kDqBlockN, Tr::kLoadChunks, Tr::kRowBytes, Tr::kDqThreads>(
            v_smem[buf], v + key0 * f.v_seq_stride, f.v_seq_stride, f.seqlen_k - key0, f.head_dim, tid);
    };

    // This thread's rows: LSE (as an exp2 offset) and D.
    const int warp_row0 = row_first + warp * kM * 16;
    const int64_t stat0 = (static_cast<int64_t>(batch) * f.heads_q + head) * f.seqlen_q;
    float lse_log2[kM][2], dsum[kM][2];
#pragma unroll
    for (int m = 0; m < kM; ++m)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = warp_row0 + m * 16 + (lane >> 2) + 8 * h;
            const bool valid = row < f.seqlen_q;
            lse_log2[m][h] = valid ? f.lse[stat0 + row] * kLog2e : 0.f;
            dsum[m][h] = valid ? p.d_sum[stat0 + row] : 0.f;
        }

    float dq[kM][kD][4];
    zero(dq);
    if (n_end > n_first) {
        const Elem *q = static_cast<const Elem *>(f.q) + batch * f.q_batch_stride +
                        head * f.q_head_stride + row_first * f.q_seq_stride;
        const Elem *d_o = static_cast<const Elem *>(p.d_o) + batch * f.o_batch_stride +
                          head * f.o_head_stride + row_first * f.o_seq_stride;
        load_tile<Elem, Tr::kDqBlockM, Tr::kLoadChunks, Tr::kRowBytes, Tr::kDqThreads>(
            q_smem, q, f.q_seq_stride, f.seqlen_q - row_first, f.head_dim, tid);
        load_tile<Elem, Tr::kDqBlockM, Tr::kLoadChunks, Tr::kRowBytes, Tr::kDqThreads>(
            do_smem, d_o, f.o_seq_stride, f.seqlen_q - row_first, f.head_dim, tid);
        load_kv(n_first, 0);
        cp_async_commit();

        const uint32_t warp_rows = warp * kM * 16 * Tr::kRowBytes;
        for (int n_block = n_first; n_block < n_end; ++n_block) {
            const int buf = (n_block - n_first) & 1;
            cp_async_wait<0>();
            __syncthreads();
            if (n_block + 1 < n_end) {
                load_kv(n_block + 1, buf ^ 1);
                cp_async_commit();
            }
            const int key0 = n_block * Tr::kDqBlockN;

            float pr[kM][kN][4];
            zero(pr);
            gemm_abt<Elem, Tr::kRowBytes, kM, kN, Tr::kHeadDim / 16>(pr, q_smem + warp_rows,
                                                                    k_smem[buf], lane);
            const bool masked = win.block_needs_mask(row_first, row_last, key0, key0 + Tr::kDqBlockN - 1);
#pragma unroll
            for (int m = 0; m < kM; ++m)
                exp_scores_queries_as_rows(pr[m], f.scale_log2, win, lse_log2[m], masked,
                                           warp_row0 + m * 16 + (lane >> 2), key0, lane);

            float ds[kM][kN][4];
            zero(ds);
            gemm_abt<Elem, Tr::kRowBytes, kM, kN, Tr::kHeadDim / 16>(ds, do_smem + warp_rows,
                                                                    v_smem[buf], lane);
#pragma unroll
            for (int m = 0; m < kM; ++m)
#pragma unroll
                for (int n = 0; n < kN; ++n)
#pragma unroll
                    for (int e = 0; e < 4; ++e)
                        ds[m][n][e] = pr[m][n][e] * (ds[m][n][e] - dsum[m][e >> 1]);

            gemm_pb<Elem, Tr::kRowBytes, kM, kD, Tr::kDqBlockN / 16>(dq, ds, k_smem[buf], lane);
        }
    }

    float scale[kM][2];
    fill_scale(scale, f.softmax_scale);
    store_acc<Elem>(dq, scale,
                    static_cast<Elem *>(p.dq) + batch * f.q_batch_stride + head * f.q_head_stride,
                    f.q_seq_stride, warp_row0, f.seqlen_q, 0, f.head_dim, lane);
}

}  // namespace fa2
