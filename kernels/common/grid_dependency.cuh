// Programmatic dependent launch (sm_90 and newer): a kernel launched with
// launch(..., after_previous = true) (common/launch.cuh) may start while the kernel
// before it in the stream still runs, and calls wait_for_previous_grid() before it
// reads anything that kernel writes; the earlier kernel calls allow_dependent_launch()
// to let it start early. Both compile to nothing before sm_90.
#pragma once

namespace fa2 {

// The next kernel (if launched with after_previous) may start once every block of this
// grid has called this or exited.
__device__ __forceinline__ void allow_dependent_launch()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// Waits until the previous grid has completed and its memory writes are visible.
__device__ __forceinline__ void wait_for_previous_grid()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

}  // namespace fa2
