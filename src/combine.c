/* fa2_combine: validate a merge of partial attention results, then launch it. */
#include <inttypes.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "common/params.h"
#include "internal.h"

void fa2_combine_problem_init(fa2_combine_problem_t *p, fa2_dtype_t parts_dtype,
                              fa2_dtype_t dtype, int64_t parts, int64_t rows, int64_t heads,
                              int64_t head_dim)
{
    if (!p)
        return;
    memset(p, 0, sizeof(*p));
    p->struct_size = sizeof(*p);
    p->parts_dtype = (int32_t)parts_dtype;
    p->dtype = (int32_t)dtype;
    p->parts = parts;
    p->rows = rows;
    p->heads = heads;
    p->head_dim = head_dim;
    p->o_parts_head_stride = head_dim;
    p->o_parts_row_stride = heads * head_dim;
    p->o_parts_part_stride = rows * heads * head_dim;
    p->lse_parts_row_stride = 1;
    p->lse_parts_head_stride = rows;
    p->lse_parts_part_stride = heads * rows;
    p->o_head_stride = head_dim;
    p->o_row_stride = heads * head_dim;
    p->lse_row_stride = 1;
    p->lse_head_stride = rows;
}

static int64_t dtype_bytes(int32_t dtype)
{
    return dtype == FA2_DTYPE_FP32 ? 4 : 2;
}

static fa2_status_t check_dtype(const char *name, int32_t dtype)
{
    if (dtype != FA2_DTYPE_FP32 && dtype != FA2_DTYPE_FP16 && dtype != FA2_DTYPE_BF16)
        return fa2_fail(FA2_ERROR_UNSUPPORTED_DTYPE,
                        "%s=%d is not FA2_DTYPE_FP32, FP16 or BF16", name, (int)dtype);
    return FA2_SUCCESS;
}

static fa2_status_t check_problem(const fa2_combine_problem_t *p, int64_t bytes[4])
{
    fa2_status_t s;
    if (p->struct_size != sizeof(*p))
        return fa2_fail(FA2_ERROR_STRUCT_SIZE,
                        "problem->struct_size=%zu, this library's fa2_combine_problem_t is %zu "
                        "bytes: set it with fa2_combine_problem_init",
                        p->struct_size, sizeof(*p));
    if ((s = check_dtype("parts_dtype", p->parts_dtype)) || (s = check_dtype("dtype", p->dtype)))
        return s;
    if ((s = fa2_check_range("parts", p->parts, 1, FA2_MAX_COMBINE_PARTS)) ||
        (s = fa2_check_range("rows", p->rows, 1, INT32_MAX)) ||
        (s = fa2_check_range("heads", p->heads, 1, INT32_MAX)))
        return s;
    if (p->head_dim < 8 || p->head_dim > 256 || p->head_dim % 8 != 0)
        return fa2_fail(FA2_ERROR_UNSUPPORTED_HEAD_DIM,
                        "head_dim=%" PRId64 " is not a multiple of 8 in [8, 256]", p->head_dim);
    if ((s = fa2_check_grid("rows", p->rows, "heads", p->heads, p->head_dim / 8,
                            FA2_COMBINE_THREADS)))
        return s;
    if ((s = fa2_check_stride("o_parts_part_stride", p->o_parts_part_stride, 8)) ||
        (s = fa2_check_stride("o_parts_row_stride", p->o_parts_row_stride, 8)) ||
        (s = fa2_check_stride("o_parts_head_stride", p->o_parts_head_stride, 8)) ||
        (s = fa2_check_stride("lse_parts_part_stride", p->lse_parts_part_stride, 1)) ||
        (s = fa2_check_stride("lse_parts_row_stride", p->lse_parts_row_stride, 1)) ||
        (s = fa2_check_stride("lse_parts_head_stride", p->lse_parts_head_stride, 1)) ||
        (s = fa2_check_stride("o_row_stride", p->o_row_stride, 8)) ||
        (s = fa2_check_stride("o_head_stride", p->o_head_stride, 8)) ||
        (s = fa2_check_stride("lse_row_stride", p->lse_row_stride, 1)) ||
        (s = fa2_check_stride("lse_head_stride", p->lse_head_stride, 1)))
        return s;
    if ((s = fa2_check_extent("o_parts", p->parts, p->rows, p->heads, p->head_dim,
                              p->o_parts_part_stride, p->o_parts_row_stride,
                              p->o_parts_head_stride, dtype_bytes(p->parts_dtype), &bytes[0])) ||
        (s = fa2_check_extent("lse_parts", p->parts, p->rows, p->heads, 1,
                              p->lse_parts_part_stride, p->lse_parts_row_stride,
                              p->lse_parts_head_stride, 4, &bytes[1])) ||
        (s = fa2_check_extent("o", 1, p->rows, p->heads, p->head_dim, 0, p->o_row_stride,
                              p->o_head_stride, dtype_bytes(p->dtype), &bytes[2])) ||
        (s = fa2_check_extent("lse", 1, p->rows, p->heads, 1, 0, p->lse_row_stride,
                              p->lse_head_stride, 4, &bytes[3])))
        return s;
    if (!fa2_layout_is_distinct(1, p->rows, p->heads, p->head_dim, 0, p->o_row_stride,
                                p->o_head_stride))
        return fa2_fail(FA2_ERROR_OVERLAP,
                        "o's strides (row %" PRId64 ", head %" PRId64 ") repeat an address",
                        p->o_row_stride, p->o_head_stride);
    if (!fa2_layout_is_distinct(1, p->rows, p->heads, 1, 0, p->lse_row_stride,
                                p->lse_head_stride))
        return fa2_fail(FA2_ERROR_OVERLAP,
                        "lse's strides (row %" PRId64 ", head %" PRId64 ") repeat an address",
                        p->lse_row_stride, p->lse_head_stride);
    return FA2_SUCCESS;
}

fa2_status_t fa2_combine(const fa2_combine_problem_t *problem, const void *o_parts,
                         const float *lse_parts, void *o, float *lse, void *stream)
{
    fa2_status_t s;
    int64_t bytes[4] = {0, 0, 0, 0};
    int device = 0, e;

    fa2_clear_error();
    if (!problem || !o_parts || !lse_parts || !o)
        return fa2_fail(FA2_ERROR_NULL_POINTER, "%s is NULL",
                        !problem ? "problem" : !o_parts ? "o_parts" : !lse_parts ? "lse_parts"
                                                                                 : "o");
    if ((s = check_problem(problem, bytes)))
        return s;
    if ((s = fa2_check_align("o_parts", o_parts, 16)) || (s = fa2_check_align("o", o, 16)) ||
        (s = fa2_check_align("lse_parts", lse_parts, 4)) || (s = fa2_check_align("lse", lse, 4)))
        return s;
    const fa2_span_t inputs[2] = {fa2_bytes_span("o_parts", o_parts, bytes[0]),
                                  fa2_bytes_span("lse_parts", lse_parts, bytes[1])};
    const fa2_span_t outputs[2] = {fa2_bytes_span("o", o, bytes[2]),
                                   fa2_bytes_span("lse", lse, lse ? bytes[3] : 0)};
    if ((s = fa2_check_disjoint(outputs, 2, inputs, 2)))
        return s;
    e = cudaGetDevice(&device);
    if (e != cudaSuccess)
        return fa2_fail(e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver
                            ? FA2_ERROR_NO_DEVICE
                            : FA2_ERROR_CUDA,
                        "fa2_combine: cudaGetDevice: %s", cudaGetErrorString((cudaError_t)e));

    const fa2_combine_problem_t *pr = problem;
    fa2_combine_params_t p = {o_parts, lse_parts, o, lse,
                              pr->o_parts_part_stride, pr->o_parts_row_stride,
                              pr->o_parts_head_stride, pr->lse_parts_part_stride,
                              pr->lse_parts_row_stride, pr->lse_parts_head_stride,
                              pr->o_row_stride, pr->o_head_stride, pr->lse_row_stride,
                              pr->lse_head_stride, pr->rows, (int32_t)pr->parts,
                              (int32_t)pr->heads, (int32_t)pr->head_dim, pr->parts_dtype,
                              pr->dtype, 0};
    e = fa2_combine_launch(&p, stream);
    if (e != 0)
        return fa2_fail(FA2_ERROR_CUDA, "combine kernel launch: %s",
                        cudaGetErrorString((cudaError_t)e));
    return FA2_SUCCESS;
}
