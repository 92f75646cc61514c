/* The tests' fault-injection hook (kernels/common/fault_hook.h); NULL in every real use. */
#include "common/fault_hook.h"

fa2_fault_hook_t fa2_fault_hook = 0;
