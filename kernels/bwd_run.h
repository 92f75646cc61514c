// Host launchers of the backward kernels, per (element type, head-dim bucket).
// Defined in bwd_run.cuh / bwd_sm90_run.cuh, instantiated in one generated
// translation unit each (kernels/bwd_instance.cu.in, bwd_sm90_instance.cu.in);
// bwd_launch.cu dispatches to them.
#pragma once

#include <cuda_runtime.h>

#include "common/params.h"

namespace fa2 {

// outputs_queued becomes true once a kernel that writes dQ, dK or dV is queued: a
// failure after that point can have written them. kCompact: 0 runs the bucket's main
// mma.sync tiles, 1 its compact tiles (sm80/bwd_tiles.h).
template <typename Elem, int kHeadDim, int kCompact>
cudaError_t bwd_run(const fa2_params_t &p, cudaStream_t stream, bool &outputs_queued);

template <typename Elem, int kHeadDim>
cudaError_t bwd_sm90_run(const fa2_params_t &p, cudaStream_t stream, bool &outputs_queued);

}  // namespace fa2
