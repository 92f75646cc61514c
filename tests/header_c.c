/* The public header compiles as pedantic C99 and C11 without any CUDA header. */
#include <fa2.h>

int fa2_header_c_check(void);

int fa2_header_c_check(void)
{
    fa2_problem_t p;
    fa2_device_info_t d = {0};
    fa2_plan_t plan;
    fa2_status_t s;
    fa2_problem_init(&p, FA2_DTYPE_BF16, 1, 128, 128, 8, 8, 64);
    d.struct_size = sizeof d;
    s = fa2_plan(&p, &d, &plan);
    (void)fa2_status_string(s);
    (void)fa2_last_error();
    s = fa2_forward(&plan, 0, 0, 0, 0, 0, 0, 0, 0);
    return (int)s + (int)(fa2_version() == FA2_VERSION_NUMBER) + FA2_RULE_SEED_SRAM;
}
