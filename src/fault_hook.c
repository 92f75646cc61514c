/* The tests' fault-injection hook (kernels/fault_hook.h); NULL in every real use. */
#include "fault_hook.h"

fa2_fault_hook_t fa2_fault_hook = 0;
