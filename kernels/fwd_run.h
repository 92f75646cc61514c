// Host launchers of the compiled forward kernels, per (element type, head-dim
// bucket). Defined in fwd_run.cuh / fwd_sm90_run.cuh and instantiated in one
// generated translation unit each (kernels/fwd_instance.cu.in,
// fwd_sm90_instance.cu.in); fwd_launch.cu dispatches to them.
#pragma once

#include <cuda_runtime.h>

#include "common/params.h"

namespace fa2 {

// kCompact: 0 runs the bucket's main mma.sync tile, 1 its compact tile (sm80/fwd_tiles.h).
template <typename Elem, int kHeadDim, int kCompact>
cudaError_t fwd_run(const fa2_params_t &p, cudaStream_t stream);

template <typename Elem, int kHeadDim>
cudaError_t fwd_sm90_run(const fa2_params_t &p, cudaStream_t stream);

// The decode kernel (kernels/decode/), buckets FA2_DECODE_HEAD_DIMS, pipeline depths
// FA2_DECODE_STAGE_COUNTS (decode/decode_tiles.h).
template <typename Elem, int kHeadDim, int kStages>
cudaError_t decode_run(const fa2_params_t &p, cudaStream_t stream);

}  // namespace fa2
