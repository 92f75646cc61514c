// A tuning aid, off in every shipped build (FA2_PHASE_TRACE 0): clock64 stamps at the
// Hopper forward's overlapped-loop phase boundaries, for lane 0 of the first warp of each
// math warpgroup of one thread block (the first to start with enough tiles), kept in a
// buffer of the translation unit. With 1, every forward launch is followed by a one-thread
// kernel that prints the stamps (device printf: the printing stays out of the forward
// kernel, where a call would make ptxas serialize its wgmma) and re-arms the trace. With
// 0 every call below is empty and the kernels compile as without it. A stamp is an issue
// time, and ptxas keeps work on its side of each clock read, so the traced build's
// schedule can differ from the shipped one (it keeps the wait for P V(j - 1) after the
// exponentials, where the plain loop's shipped SASS has it ahead of them): read the
// figures next to the SASS of both.
#pragma once

#include <stdio.h>

#ifndef FA2_PHASE_TRACE
#define FA2_PHASE_TRACE 0
#endif

namespace fa2 {

// The stamps of one tile j of the loop, in program order.
enum TracePoint {
    kTraceTop,      // the iteration starts
    kTraceKReady,   // K(j) is in shared memory
    kTraceTurn,     // pingpong: this warpgroup's turn to issue
    kTraceIssued,   // S(j) and P V(j - 1) issued, the turn passed on
    kTraceSReady,   // S(j) is in registers
    kTraceSoftmax,  // P(j) and the row state are formed
    kTracePvDone,   // P V(j - 1) is done
    kTracePoints
};

constexpr int kTraceFirstTile = 8;  // past the start-up tiles
constexpr int kTraceTiles = 16;
constexpr int kTraceWarps = 2;  // the first warp of each math warpgroup

#if FA2_PHASE_TRACE
static __device__ long long g_trace_stamps[kTraceWarps][kTraceTiles][kTracePoints];
static __device__ int g_trace_info[2];  // ScoreKind, tiles
static __device__ unsigned g_trace_claimed;

struct PhaseTrace {
    bool on;

    // Before the math warpgroups' first barrier: thread 0 claims the trace for this block
    // if it has tiles enough and no block has claimed it since the last print.
    __device__ __forceinline__ void claim(int *block_flag, int tid, int tiles, int scores)
    {
        if (tid != 0) return;
        *block_flag = tiles >= kTraceFirstTile + kTraceTiles &&
                      atomicCAS(&g_trace_claimed, 0u, 1u) == 0u;
        if (*block_flag) g_trace_info[0] = scores, g_trace_info[1] = tiles;
    }
    // After it: the warps that stamp.
    __device__ __forceinline__ void start(const int *block_flag, int warp, int lane)
    {
        on = *block_flag && lane == 0 && warp % 4 == 0 && warp < 4 * kTraceWarps;
        wg = warp / 4;
    }
    __device__ __forceinline__ void mark(int j, TracePoint point)
    {
        const int i = j - kTraceFirstTile;
        if (on && i >= 0 && i < kTraceTiles) g_trace_stamps[wg][i][point] = clock64();
    }
    int wg;
};

// After each forward launch: the claimed block's stamps, relative to each tile's top and
// to the first tile's, then the trace re-armed.
static __global__ void print_phase_trace()
{
    if (g_trace_claimed == 0u) return;
    for (int w = 0; w < kTraceWarps; ++w)
        for (int i = 0; i < kTraceTiles; ++i) {
            const long long *s = g_trace_stamps[w][i];
            printf("trace scores %d tiles %d warpgroup %d j %d: top %lld k %lld turn %lld "
                   "issued %lld s %lld softmax %lld pv %lld\n",
                   g_trace_info[0], g_trace_info[1], w, kTraceFirstTile + i,
                   s[kTraceTop] - g_trace_stamps[0][0][kTraceTop],
                   s[kTraceKReady] - s[kTraceTop], s[kTraceTurn] - s[kTraceTop],
                   s[kTraceIssued] - s[kTraceTop], s[kTraceSReady] - s[kTraceTop],
                   s[kTraceSoftmax] - s[kTraceTop], s[kTracePvDone] - s[kTraceTop]);
        }
    g_trace_claimed = 0u;
}
#else
struct PhaseTrace {  // claim() and start() are called under #if FA2_PHASE_TRACE only
    __device__ __forceinline__ void mark(int, TracePoint) {}
};
#endif

}  // namespace fa2
