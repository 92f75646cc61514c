// The public header compiles as pedantic C++ with no CUDA header: extern "C",
// no C-only constructs.
#include <fa2.h>

int fa2_header_cxx_check();

int fa2_header_cxx_check()
{
    fa2_problem_t p;
    fa2_problem_init(&p, FA2_DTYPE_FP16, 1, 64, 64, 4, 2, 128);
    fa2_device_info_t d = fa2_device_info_t();
    d.struct_size = sizeof d;
    fa2_plan_t plan;
    fa2_status_t s = fa2_plan(&p, &d, &plan);
    const char *m = fa2_last_error();
    s = fa2_forward(&plan, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0,
                    nullptr);
    return static_cast<int>(s) + (m != nullptr) + static_cast<int>(sizeof(fa2_plan_t)) +
           static_cast<int>(fa2_version() == FA2_VERSION_NUMBER);
}
