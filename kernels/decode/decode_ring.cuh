// The decode kernel's K/V pipeline: a key stream's ring of slots in shared memory,
// shared by the stream's row warps (decode_traits.cuh: DecodeBlockShape).
//
// The stream's key tiles are numbered i = 0, 1, ...; tile i sits in slot i % depth
// (depth = stages * row_warps) and is loaded, with cp.async, by row warp i % row_warps,
// so each warp loads every row_warps-th tile and keeps `stages` of its own in flight.
// Each slot has two mbarriers:
//   full:  its 32 loading lanes arrive when their copies have landed
//          (cp.async.mbarrier.arrive.noinc); the computing warps wait on it;
//   empty: each row warp of the stream arrives once it is done with the tile; the
//          loader waits on it before it refills the slot (a stream of one warp skips
//          it: the warp's own order suffices).
// A slot's n-th tile (i / depth = n) completes phase n of both.
#pragma once

#include <stdint.h>

#include "common/ptx.cuh"
#include "decode/decode_tiles.h"

namespace fa2 {

// A position in the ring: tile i's slot (i % depth) and phase ((i / depth) & 1),
// stepped tile by tile without a division.
struct RingPos {
    int slot;
    uint32_t phase;

    __device__ __forceinline__ void advance(int depth)
    {
        if (++slot == depth) slot = 0, phase ^= 1;
    }
};

template <typename Tr>
struct DecodeRing {
    uint32_t slots;    // shared address of the stream's first slot
    uint32_t fulls;    // the full mbarrier of the stream's first slot
    uint32_t empties;  // its empty mbarrier

    __device__ __forceinline__ uint32_t k_buf(RingPos at) const
    {
        return slots + at.slot * Tr::kSlotBytes;
    }
    __device__ __forceinline__ uint32_t v_buf(RingPos at) const
    {
        return k_buf(at) + Tr::kTileBytes;
    }
    __device__ __forceinline__ uint32_t full(RingPos at) const { return fulls + at.slot * 8; }
    __device__ __forceinline__ uint32_t empty(RingPos at) const
    {
        return empties + at.slot * 8;
    }

    // After this lane issued its copies of the tile at `at`: full(at) counts them.
    __device__ __forceinline__ void loaded(RingPos at) const
    {
        cp_async_arrive_noinc(full(at));
        cp_async_commit();
    }

    // The tile at `at` has landed (every lane of the warp that loaded it).
    __device__ __forceinline__ void wait_full(RingPos at) const
    {
        mbarrier_wait(full(at), at.phase);
    }

    // This warp is done with the tile at `at` (after its last read of the slot).
    __device__ __forceinline__ void release(RingPos at, int lane) const
    {
        __syncwarp();
        if (lane == 0) mbarrier_arrive(empty(at));
    }

    // Every row warp of the stream is done with the tile at `at`: the slot is free.
    __device__ __forceinline__ void wait_empty(RingPos at) const
    {
        mbarrier_wait(empty(at), at.phase);
    }
};

// The block's shared memory (decode_tiles.h: FA2_DECODE_SMEM_BYTES): Q's rows, the
// slots of every stream, their full mbarriers, their empty ones, and Q's.
template <typename Tr>
struct DecodeSmem {
    uint32_t q, slots, fulls, empties, q_loaded;
    int slot_count;

    __device__ __forceinline__ DecodeSmem(uint32_t base, int stages, int row_warps)
        : q(base),
          slots(base + Tr::q_bytes(row_warps)),
          fulls(slots + FA2_DECODE_SLOTS(stages) * Tr::kSlotBytes),
          empties(fulls + FA2_DECODE_SLOTS(stages) * 8),
          q_loaded(empties + FA2_DECODE_SLOTS(stages) * 8),
          slot_count(FA2_DECODE_SLOTS(stages))
    {
    }

    // Stream `stream`'s ring of `depth` slots.
    __device__ __forceinline__ DecodeRing<Tr> ring(int stream, int depth) const
    {
        return {slots + stream * depth * Tr::kSlotBytes, fulls + stream * depth * 8,
                empties + stream * depth * 8};
    }

    // The mbarriers, by the block's first threads; a __syncthreads publishes them. Full:
    // a loading warp's 32 lanes; empty: the stream's row warps; Q: every thread.
    __device__ __forceinline__ void init(int row_warps, int tid) const
    {
        for (int i = tid; i < slot_count; i += Tr::kThreads) {
            mbarrier_init(fulls + i * 8, 32);
            mbarrier_init(empties + i * 8, row_warps);
        }
        if (tid == 0) mbarrier_init(q_loaded, Tr::kThreads);
    }
};

}  // namespace fa2
