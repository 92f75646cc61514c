/* The tests' fault-injection hook (common/fault_hook.h), defined beside the launchers that
 * call it; NULL in every real use. */
#include "common/fault_hook.h"

fa2_fault_hook_t fa2_fault_hook = 0;
