"""The C API's mirror: pinned constants, limits and the ctypes structs of include/fa2.h.

The one place the binding restates the header; tests/test_python_ffi.py checks every
struct against the C compiler's layout and every constant against the header.
"""
import ctypes

DTYPE_FP16 = 1
DTYPE_BF16 = 2
DTYPE_FP32 = 3  # fa2_combine only

STATUS_NAMES = {
    0: "FA2_SUCCESS",
    1: "FA2_ERROR_NULL_POINTER",
    2: "FA2_ERROR_STRUCT_SIZE",
    3: "FA2_ERROR_INVALID_SIZE",
    4: "FA2_ERROR_SIZE_OVERFLOW",
    5: "FA2_ERROR_UNSUPPORTED_DTYPE",
    6: "FA2_ERROR_UNSUPPORTED_HEAD_DIM",
    7: "FA2_ERROR_HEADS_MISMATCH",
    8: "FA2_ERROR_BAD_STRIDE",
    9: "FA2_ERROR_MISALIGNED",
    10: "FA2_ERROR_BAD_WINDOW",
    11: "FA2_ERROR_BAD_SCALE",
    12: "FA2_ERROR_UNSUPPORTED_DEVICE",
    13: "FA2_ERROR_SHARED_MEMORY",
    14: "FA2_ERROR_WORKSPACE",
    15: "FA2_ERROR_NO_DEVICE",
    16: "FA2_ERROR_CUDA",
    17: "FA2_ERROR_OVERLAP",
    18: "FA2_ERROR_BAD_PLAN",
    19: "FA2_ERROR_DEVICE_MISMATCH",
    20: "FA2_ERROR_RESERVED",
    21: "FA2_ERROR_UNSUPPORTED",
    22: "FA2_ERROR_BAD_METADATA",
}

# fa2_varlen_check_t: the device metadata checks of a packed batch (fa2_varlen_check).
VARLEN_CHECK_NAMES = {
    0: "FA2_VARLEN_OK",
    1: "FA2_VARLEN_CU_SEQLENS_Q",
    2: "FA2_VARLEN_SEQLEN_Q",
    3: "FA2_VARLEN_CU_SEQLENS_K",
    4: "FA2_VARLEN_SEQLEN_K",
    5: "FA2_VARLEN_SEQUSED_K",
    6: "FA2_VARLEN_PAGE_ID",
}
globals().update({name: code for code, name in VARLEN_CHECK_NAMES.items()})
globals().update({name: code for code, name in STATUS_NAMES.items()})

# Limits fa2_plan enforces (FA2_MAX_* in include/fa2.h).
MAX_SEQLEN = 1 << 22         # seqlen_q, seqlen_k
MAX_WINDOW = 2147483647      # window_left, window_right
MAX_SOFTMAX_SCALE = 65536.0  # softmax_scale
MAX_COMBINE_PARTS = 65536    # fa2_combine_problem_t.parts
MAX_SPLITS = 128             # fa2_problem_t.max_splits
MAX_SOFTCAP = 65536.0        # fa2_problem_t.softcap
MIN_SOFTCAP = 1e-30          # fa2_problem_t.softcap > 0

# ---------------------------------------------------------------------------------
# Struct mirrors of include/fa2.h. Checked against the library at load time: the
# library writes struct_size, which must equal ctypes.sizeof of the mirror.
# ---------------------------------------------------------------------------------
_i32, _i64 = ctypes.c_int32, ctypes.c_int64


class Problem(ctypes.Structure):
    """fa2_problem_t. Make it with make_problem() (or Library.problem_init)."""
    _fields_ = ([("struct_size", ctypes.c_size_t), ("dtype", ctypes.c_int), ("causal", _i32)]
                + [(n, _i64) for n in ("batch", "seqlen_q", "seqlen_k", "heads_q", "heads_kv",
                                       "head_dim", "window_left", "window_right")]
                + [("softmax_scale", ctypes.c_float), ("reserved0", _i32)]
                + [(f"{t}_{s}_stride", _i64) for t in "qkvo" for s in ("batch", "seq", "head")]
                + [("deterministic", _i32), ("reserved1", _i32)]
                + [("total_q", _i64), ("total_k", _i64)]
                + [(n, _i64) for n in ("page_size", "num_pages", "pages_per_seq",
                                       "max_splits")]
                + [("batch_invariant", _i32), ("reserved2", _i32)]
                + [("softcap", ctypes.c_float), ("alibi", _i32), ("sinks", _i32),
                   ("reserved3", _i32), ("alibi_batch_stride", _i64)])


class DeviceInfo(ctypes.Structure):
    """fa2_device_info_t. From device_info(index), or make_device_info(...) by hand."""
    _fields_ = [("struct_size", ctypes.c_size_t), ("cc_major", _i32), ("cc_minor", _i32),
                ("sm_count", _i32), ("reserved0", _i32), ("smem_per_block_optin", _i64),
                ("smem_per_sm", _i64)]


class PlanStruct(ctypes.Structure):
    """fa2_plan_t. Wrapped by Plan. fwd_arch / bwd_arch: the kernel family that runs
    the forward / the backward, 90 (Hopper wgmma) or 80 (mma.sync)."""
    _fields_ = ([("struct_size", ctypes.c_size_t), ("problem", Problem),
                 ("sram_elements", _i64), ("seed_br", _i64), ("seed_bc", _i64)]
                + [(n, _i32) for n in ("block_m", "block_n", "block_m_rule", "block_n_rule",
                                       "head_dim_bucket", "warps")]
                + [(n, _i64) for n in ("grid_blocks", "smem_bytes", "workspace_bytes")]
                + [(n, _i32) for n in ("bwd_block_n", "bwd_block_m", "bwd_dq_block_m",
                                       "bwd_dq_block_n")]
                + [("bwd_smem_bytes", _i64), ("bwd_workspace_bytes", _i64),
                   ("bwd_supported", _i32), ("bwd_status", _i32),
                   ("fwd_arch", _i32), ("bwd_arch", _i32), ("splits", _i32)]
                + [(n, _i32) for n in ("fwd_kernel", "fwd_scores", "page_box_rows",
                                       "decode_stages", "split_tiles", "bwd_kernel",
                                       "bwd_scores")]
                + [(n, _i64) for n in ("bwd_accum_offset", "split_rows", "split_lse_offset",
                                       "split_o_offset")]
                + [("device", DeviceInfo)])


class CombineProblem(ctypes.Structure):
    """fa2_combine_problem_t. Made by combine() from tensors (or Library.combine_problem_init)."""
    _fields_ = ([("struct_size", ctypes.c_size_t), ("parts_dtype", _i32), ("dtype", _i32)]
                + [(n, _i64) for n in ("parts", "rows", "heads", "head_dim")]
                + [(f"{t}_{s}_stride", _i64) for t in ("o_parts", "lse_parts")
                   for s in ("part", "row", "head")]
                + [(f"{t}_{s}_stride", _i64) for t in ("o", "lse") for s in ("row", "head")])


# Every struct mirror of this module, by its C name: tests/test_python_ffi.py checks each
# one's size and field offsets against the C compiler's.
class ForwardArgs(ctypes.Structure):
    """fa2_forward_args_t: one forward call's tensors (device pointers as ints)."""
    _fields_ = ([("struct_size", ctypes.c_size_t)]
                + [(n, ctypes.c_void_p) for n in ("q", "k", "v", "o", "lse", "cu_seqlens_q",
                                                  "cu_seqlens_k", "seqused_k", "page_table",
                                                  "alibi_slopes", "sinks", "workspace")]
                + [("workspace_bytes", ctypes.c_size_t), ("stream", ctypes.c_void_p)])


class BackwardArgs(ctypes.Structure):
    """fa2_backward_args_t: one backward call's tensors (device pointers as ints)."""
    _fields_ = ([("struct_size", ctypes.c_size_t)]
                + [(n, ctypes.c_void_p) for n in ("q", "k", "v", "o", "d_o", "lse", "dq", "dk",
                                                  "dv", "cu_seqlens_q", "cu_seqlens_k",
                                                  "seqused_k", "alibi_slopes", "sinks",
                                                  "dsinks", "workspace")]
                + [("workspace_bytes", ctypes.c_size_t), ("stream", ctypes.c_void_p)])


STRUCT_MIRRORS = {"fa2_problem_t": Problem, "fa2_device_info_t": DeviceInfo,
                  "fa2_plan_t": PlanStruct, "fa2_combine_problem_t": CombineProblem,
                  "fa2_forward_args_t": ForwardArgs, "fa2_backward_args_t": BackwardArgs}


def _struct_repr(s):
    # Nested structs (plan.problem, plan.device) have their own repr.
    fields = ", ".join(f"{n}={getattr(s, n)!r}" for n, t in s._fields_
                       if not n.startswith("reserved") and not issubclass(t, ctypes.Structure))
    return f"{type(s).__name__}({fields})"


Problem.__repr__ = DeviceInfo.__repr__ = PlanStruct.__repr__ = _struct_repr



_DTYPE_NAMES = {"fp16": DTYPE_FP16, "float16": DTYPE_FP16, "half": DTYPE_FP16,
                "bf16": DTYPE_BF16, "bfloat16": DTYPE_BF16}

__all__ = (["DTYPE_FP16", "DTYPE_BF16", "DTYPE_FP32", "STATUS_NAMES", "VARLEN_CHECK_NAMES",
            "MAX_SEQLEN", "MAX_WINDOW", "MAX_SOFTMAX_SCALE", "MAX_COMBINE_PARTS", "MAX_SPLITS",
            "MAX_SOFTCAP", "MIN_SOFTCAP", "Problem", "DeviceInfo", "PlanStruct",
            "CombineProblem", "ForwardArgs", "BackwardArgs", "STRUCT_MIRRORS"]
           + list(STATUS_NAMES.values()) + list(VARLEN_CHECK_NAMES.values()))
