/* Fault injection for the tests: every CUDA runtime call that fa2_forward and
 * fa2_backward make goes through fa2_fault() first. fa2_fault_hook is NULL outside
 * the tests (one load and a branch per call); a test linking the static library sets
 * it, and a non-zero return is taken as that call's cudaError_t, the call not made.
 * Not exported from the shared library. Set it only while no libfa2 call runs. */
#ifndef FA2_FAULT_HOOK_H
#define FA2_FAULT_HOOK_H

#ifdef __cplusplus
extern "C" {
#endif

/* `call` names the CUDA function about to run ("cudaLaunchKernelEx", ...). */
typedef int (*fa2_fault_hook_t)(const char *call);
extern fa2_fault_hook_t fa2_fault_hook;

static inline int fa2_fault(const char *call)
{
    const fa2_fault_hook_t hook = fa2_fault_hook;
    return hook ? hook(call) : 0;
}

#ifdef __cplusplus
}
#endif

#endif
