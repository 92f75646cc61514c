"""libfa2 from Python: a pure-ctypes binding (the package libfa2, one module).

    pip install .                                    # from a checkout: builds libfa2.so
    import libfa2 as fa2
    o = fa2.attention(q, k, v, causal=True)        # torch tensors, autograd works

or, without torch, on raw device pointers:

    problem = fa2.make_problem("bf16", q_shape=(2, 4096, 16, 128), k_shape=(2, 4096, 4, 128))
    plan = fa2.plan(problem, device=0)               # fa2_plan: validation + tiles
    plan.forward(q_ptr, k_ptr, v_ptr, o_ptr, lse=lse_ptr, stream=stream_handle)

Layout is the C API's: Q, O [batch, seqlen_q, heads_q, head_dim]; K, V [batch,
seqlen_k, heads_kv, head_dim] (BSHD), strides in elements and free except the head_dim
stride, which is 1; LSE float32 [batch, heads_q, seqlen_q], contiguous.

Every non-zero fa2_status_t raises a subclass of Fa2Error carrying the status code and
the library's own message (fa2_last_error()), e.g. Fa2UnsupportedHeadDim("fa2_plan:
head_dim=300 is not supported (multiples of 8 from 8 to 256)"). Problems the binding
itself detects before calling the library (tensor shapes, dtypes or devices that
disagree, a tensor its storage cannot hold) raise Fa2ShapeError, also a ValueError; an
output tensor whose strides repeat an address raises Fa2Overlap, one with strides the
library refuses Fa2BadStride, both naming the argument.

The library is found, in this order: the FA2_LIBRARY environment variable (a file, or
a directory holding libfa2.so), the package's own directory (where a wheel puts it),
the install prefix the package sits in (PREFIX/share/fa2/python/libfa2 ->
PREFIX/lib*/libfa2.so.0), ctypes.util.find_library("fa2") (the loader's paths,
LD_LIBRARY_PATH), then build directories of the source tree the package sits in
(REPO/build*/libfa2.so, newest first). See docs/ffi.md.

torch is optional and imported only when a torch tensor or a torch helper is used.
MIT License, see LICENSE.
"""
import ctypes
import ctypes.util
import glob
import os
import sys
import threading

__all__ = [
    "Fa2Error", "Fa2ShapeError", "Fa2LibraryNotFound", "Problem", "DeviceInfo", "Plan",
    "Library", "load_library", "library", "version", "build_info", "status_string", "device_info",
    "make_device_info", "make_problem", "make_varlen_problem", "plan", "forward", "backward",
    "attention", "flash_attn_func", "flash_attn_varlen_func", "flash_attn_with_kvcache",
    "DTYPE_FP16", "DTYPE_BF16", "DTYPE_FP32", "MAX_SEQLEN", "MAX_WINDOW",
    "MAX_SOFTMAX_SCALE", "MAX_COMBINE_PARTS", "MAX_SPLITS", "MAX_SOFTCAP", "MIN_SOFTCAP",
    "STRUCT_MIRRORS",
    "plan_for", "ForwardArgs", "BackwardArgs",
    "repeats_addresses", "CombineProblem", "combine",
]

# ---------------------------------------------------------------------------------
# Constants: pinned in include/fa2.h.
# ---------------------------------------------------------------------------------
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
# Exceptions: one class per status.
# ---------------------------------------------------------------------------------
class Fa2Error(Exception):
    """A libfa2 call failed. `status` is the fa2_status_t value (None for errors the
    binding found itself), `message` the library's fa2_last_error() text, `function`
    the C function that failed."""

    status = None

    def __init__(self, message, status=None, function=None):
        if status is not None:
            self.status = status
        self.message = message
        self.function = function
        where = f"{function}: " if function else ""
        name = STATUS_NAMES.get(self.status, f"status {self.status}")
        tail = f" [{name}]" if self.status is not None else ""
        super().__init__(f"{where}{message}{tail}")

    @property
    def status_name(self):
        return STATUS_NAMES.get(self.status)


def _status_class(code, name, doc):
    return type(name, (Fa2Error,), {"status": code, "__doc__": doc, "__module__": __name__})


Fa2NullPointer = _status_class(1, "Fa2NullPointer", "a required pointer is NULL")
Fa2StructSize = _status_class(2, "Fa2StructSize", "struct_size unknown to the library")
Fa2InvalidSize = _status_class(3, "Fa2InvalidSize", "batch/seqlen/heads out of range")
Fa2SizeOverflow = _status_class(4, "Fa2SizeOverflow", "an extent does not fit in int64")
Fa2UnsupportedDtype = _status_class(5, "Fa2UnsupportedDtype", "dtype not fp16/bf16")
Fa2UnsupportedHeadDim = _status_class(6, "Fa2UnsupportedHeadDim",
                                      "head_dim not a multiple of 8 in [8, 256]")
Fa2HeadsMismatch = _status_class(7, "Fa2HeadsMismatch", "heads_q not a multiple of heads_kv")
Fa2BadStride = _status_class(8, "Fa2BadStride", "negative stride or not a multiple of 8")
Fa2Misaligned = _status_class(9, "Fa2Misaligned", "a pointer is not 16-byte aligned")
Fa2BadWindow = _status_class(10, "Fa2BadWindow", "bad window_left/right or causal")
Fa2BadScale = _status_class(11, "Fa2BadScale", "softmax_scale negative, NaN or infinite")
Fa2UnsupportedDevice = _status_class(12, "Fa2UnsupportedDevice",
                                     "compute capability below 8.0")
Fa2SharedMemory = _status_class(13, "Fa2SharedMemory", "tiles do not fit shared memory")
Fa2Workspace = _status_class(14, "Fa2Workspace", "workspace missing or too small")
Fa2NoDevice = _status_class(15, "Fa2NoDevice", "no CUDA device, or a bad device index")
Fa2CudaError = _status_class(16, "Fa2CudaError", "the CUDA runtime reported an error")
Fa2Overlap = _status_class(17, "Fa2Overlap", "an output overlaps an input, another output "
                           "or itself (a layout with repeated addresses)")
Fa2BadPlan = _status_class(18, "Fa2BadPlan", "the plan was changed after fa2_plan made it")
Fa2DeviceMismatch = _status_class(19, "Fa2DeviceMismatch",
                                  "the current device is not the one the plan was made for")
Fa2Reserved = _status_class(20, "Fa2Reserved", "a reserved field is not zero")
Fa2Unsupported = _status_class(21, "Fa2Unsupported", "a combination this version does not run")
Fa2BadMetadata = _status_class(22, "Fa2BadMetadata",
                               "a packed batch's device metadata failed a check")

_EXCEPTIONS = {cls.status: cls for cls in (
    Fa2NullPointer, Fa2StructSize, Fa2InvalidSize, Fa2SizeOverflow, Fa2UnsupportedDtype,
    Fa2UnsupportedHeadDim, Fa2HeadsMismatch, Fa2BadStride, Fa2Misaligned, Fa2BadWindow,
    Fa2BadScale, Fa2UnsupportedDevice, Fa2SharedMemory, Fa2Workspace, Fa2NoDevice,
    Fa2CudaError, Fa2Overlap, Fa2BadPlan, Fa2DeviceMismatch, Fa2Reserved, Fa2Unsupported,
    Fa2BadMetadata)}
__all__ += [cls.__name__ for cls in _EXCEPTIONS.values()]


class Fa2ShapeError(Fa2Error, ValueError):
    """The binding refused the call before reaching libfa2: tensor shapes, dtypes or
    devices that disagree, a head_dim stride other than 1, or a tensor whose strides
    reach past its storage."""


class Fa2LibraryNotFound(Fa2Error, OSError):
    """libfa2.so could not be found or loaded."""


def exception_for(status, message, function=None):
    """The Fa2Error subclass instance for a status code (Fa2Error for unknown codes)."""
    return _EXCEPTIONS.get(status, Fa2Error)(message, status=status, function=function)


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
                   ("reserved3", _i32)])


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
                   ("fwd_arch", _i32), ("bwd_arch", _i32), ("decode_splits", _i32),
                   ("reserved2", _i32), ("device", DeviceInfo)])


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


# ---------------------------------------------------------------------------------
# Finding and loading the library.
# ---------------------------------------------------------------------------------
_HERE = os.path.dirname(os.path.abspath(__file__))
_NAMES = ("libfa2.so.0", "libfa2.so")


def _package_version():
    """The version without loading the library: the installed distribution's, else the
    one place it is written, FA2_VERSION_* in fa2.h (REPO/include or PREFIX/include)."""
    try:
        from importlib.metadata import PackageNotFoundError, version
        try:
            return version("libfa2")
        except PackageNotFoundError:
            pass
    except ImportError:
        pass
    import re
    for up in (2, 4):  # REPO/python/libfa2, PREFIX/share/fa2/python/libfa2
        header = os.path.join(_HERE, *([os.pardir] * up), "include", "fa2.h")
        try:
            with open(header) as f:
                text = f.read()
        except OSError:
            continue
        parts = [re.search(r"#define FA2_VERSION_%s (\d+)" % p, text) for p in
                 ("MAJOR", "MINOR", "PATCH")]
        if all(parts):
            return ".".join(m.group(1) for m in parts)
    return "unknown"


__version__ = _package_version()


def candidate_paths():
    """Where the library is looked for, in order (FA2_LIBRARY excluded)."""
    # A wheel: the library beside this file.
    out = [os.path.join(_HERE, name) for name in _NAMES]
    # Installed: PREFIX/share/fa2/python/libfa2 -> PREFIX/lib, lib64, lib/<multiarch>.
    parts = _HERE.split(os.sep)
    if parts[-4:] == ["share", "fa2", "python", "libfa2"]:
        prefix = os.sep.join(parts[:-4]) or os.sep
        for libdir in ["lib", "lib64"] + sorted(glob.glob(os.path.join(prefix, "lib", "*-linux-gnu"))):
            for name in _NAMES:
                out.append(os.path.join(prefix, libdir, name))
    found = ctypes.util.find_library("fa2")
    if found:
        out.append(found)
    # Source tree: REPO/python/libfa2 -> REPO/build/libfa2.so, then REPO/build*/ newest.
    repo = os.path.dirname(os.path.dirname(_HERE))
    builds = [p for p in glob.glob(os.path.join(repo, "build*", "libfa2.so"))]
    builds.sort(key=lambda p: (os.path.basename(os.path.dirname(p)) != "build",
                               -os.path.getmtime(p)))
    return out + builds


class Library:
    """One loaded libfa2. Thin: each method is one C call plus the status check."""

    def __init__(self, path):
        self.path = path
        try:
            self.cdll = ctypes.CDLL(path)
        except OSError as e:
            raise Fa2LibraryNotFound(f"cannot load {path}: {e}") from None
        c = self.cdll
        vp, sz = ctypes.c_void_p, ctypes.c_size_t
        c.fa2_version.argtypes, c.fa2_version.restype = [], ctypes.c_uint
        # Libraries built before 0.1.0 was tagged lack the two string functions.
        for f in ("fa2_version_string", "fa2_build_info"):
            if hasattr(c, f):
                getattr(c, f).argtypes, getattr(c, f).restype = [], ctypes.c_char_p
        c.fa2_status_string.argtypes, c.fa2_status_string.restype = [ctypes.c_int], ctypes.c_char_p
        c.fa2_last_error.argtypes, c.fa2_last_error.restype = [], ctypes.c_char_p
        c.fa2_device_info_query.argtypes = [ctypes.c_int, ctypes.POINTER(DeviceInfo)]
        c.fa2_problem_init.argtypes = [ctypes.POINTER(Problem), ctypes.c_int] + [_i64] * 6
        c.fa2_problem_init.restype = None
        c.fa2_plan.argtypes = [ctypes.POINTER(Problem), ctypes.POINTER(DeviceInfo),
                               ctypes.POINTER(PlanStruct)]
        c.fa2_forward.argtypes = [ctypes.POINTER(PlanStruct)] + [vp] * 6 + [sz, vp]
        c.fa2_forward_varlen.argtypes = [ctypes.POINTER(PlanStruct)] + [vp] * 10 + [sz, vp]
        c.fa2_backward_varlen.argtypes = [ctypes.POINTER(PlanStruct)] + [vp] * 13 + [sz, vp]
        c.fa2_backward.argtypes = [ctypes.POINTER(PlanStruct)] + [vp] * 10 + [sz, vp]
        if hasattr(c, "fa2_varlen_check"):  # not in a library older than the binding
            c.fa2_varlen_check.argtypes = [ctypes.POINTER(PlanStruct), vp, sz,
                                           ctypes.POINTER(_i64), ctypes.POINTER(ctypes.c_int)]
            c.fa2_varlen_check.restype = ctypes.c_int
        if hasattr(c, "fa2_combine"):
            c.fa2_combine_problem_init.argtypes = [ctypes.POINTER(CombineProblem), ctypes.c_int,
                                                   ctypes.c_int] + [_i64] * 4
            c.fa2_combine_problem_init.restype = None
            c.fa2_combine.argtypes = [ctypes.POINTER(CombineProblem)] + [vp] * 5
            c.fa2_combine.restype = ctypes.c_int
            probe = CombineProblem()
            c.fa2_combine_problem_init(ctypes.byref(probe), DTYPE_FP32, DTYPE_BF16, 2, 1, 1, 64)
            self._check_mirror("fa2_combine_problem_t", probe.struct_size, CombineProblem)
        if hasattr(c, "fa2_forward_with"):  # not in a library older than the binding
            for name, mirror in (("forward", ForwardArgs), ("backward", BackwardArgs)):
                init, run = getattr(c, f"fa2_{name}_args_init"), getattr(c, f"fa2_{name}_with")
                init.argtypes, init.restype = [ctypes.POINTER(mirror)], None
                run.argtypes = [ctypes.POINTER(PlanStruct), ctypes.POINTER(mirror)]
                run.restype = ctypes.c_int
                probe = mirror()
                init(ctypes.byref(probe))
                self._check_mirror(f"fa2_{name}_args_t", probe.struct_size, mirror)
        for f in ("fa2_device_info_query", "fa2_plan", "fa2_forward", "fa2_forward_varlen",
                  "fa2_backward", "fa2_backward_varlen"):
            getattr(c, f).restype = ctypes.c_int
        # The mirrors must match the library's layout (the library writes struct_size).
        probe = Problem()
        c.fa2_problem_init(ctypes.byref(probe), DTYPE_BF16, 1, 1, 1, 1, 1, 64)
        self._check_mirror("fa2_problem_t", probe.struct_size, Problem)
        # fa2_plan writes a whole fa2_plan_t: probe it into a buffer with room to spare,
        # so that a library whose plan is larger than the mirror cannot write past it.
        room = (ctypes.c_char * (ctypes.sizeof(PlanStruct) + 4096))()
        a100 = make_device_info(8, 0, 108, 166912, 167936)
        if c.fa2_plan(ctypes.byref(probe), ctypes.byref(a100),
                      ctypes.cast(room, ctypes.POINTER(PlanStruct))) == 0:
            self._check_mirror("fa2_plan_t", ctypes.c_size_t.from_buffer(room).value,
                               PlanStruct)

    def _check_mirror(self, c_name, library_size, mirror):
        if library_size != ctypes.sizeof(mirror):
            raise Fa2LibraryNotFound(
                f"{self.path}: {c_name} is {library_size} bytes in the library, "
                f"{ctypes.sizeof(mirror)} in the libfa2 package (library version "
                f"{self.version_string()}): use the package of the same release")

    # -- plain calls --------------------------------------------------------------
    def version(self):
        """fa2_version(): MAJOR*10000 + MINOR*100 + PATCH."""
        return self.cdll.fa2_version()

    def version_string(self):
        """fa2_version_string(): "MAJOR.MINOR.PATCH"."""
        if not hasattr(self.cdll, "fa2_version_string"):
            v = self.version()
            return f"{v // 10000}.{v // 100 % 100}.{v % 100}"
        return self.cdll.fa2_version_string().decode()

    def build_info(self):
        """fa2_build_info(): version, CUDA runtime and GPU code of the library."""
        if not hasattr(self.cdll, "fa2_build_info"):
            return f"libfa2 {self.version_string()} (no fa2_build_info)"
        return self.cdll.fa2_build_info().decode()

    def status_string(self, status):
        return self.cdll.fa2_status_string(int(status)).decode()

    def last_error(self):
        """The calling thread's fa2_last_error() text."""
        return self.cdll.fa2_last_error().decode(errors="replace")

    def check(self, status, function):
        """Raise the Fa2Error subclass for a non-zero status, with fa2_last_error()."""
        if status != 0:
            raise exception_for(status, self.last_error(), function)

    def device_info(self, device=0):
        """fa2_device_info_query(device) -> DeviceInfo. Fa2NoDevice without a GPU."""
        info = DeviceInfo()
        self.check(self.cdll.fa2_device_info_query(int(device), ctypes.byref(info)),
                   "fa2_device_info_query")
        return info

    def problem_init(self, dtype, batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim):
        """fa2_problem_init: contiguous BSHD strides, defaults for every option."""
        p = Problem()
        self.cdll.fa2_problem_init(ctypes.byref(p), _dtype_code(dtype), batch, seqlen_q,
                                   seqlen_k, heads_q, heads_kv, head_dim)
        return p

    def plan(self, problem, device=None):
        """fa2_plan(problem, device) -> Plan. `device`: a DeviceInfo, a device index,
        or None for device 0 (the current torch device when torch is in use)."""
        info = self._device(device)
        raw = PlanStruct()
        self.check(self.cdll.fa2_plan(None if problem is None else ctypes.byref(problem),
                                      ctypes.byref(info), ctypes.byref(raw)), "fa2_plan")
        return Plan(self, raw)

    def _device(self, device):
        if isinstance(device, DeviceInfo):
            return device
        if device is None:
            torch = sys.modules.get("torch")
            device = torch.cuda.current_device() if torch is not None and \
                torch.cuda.is_available() else 0
        return _cached_device_info(self, int(device))

    def __repr__(self):
        return f"<fa2.Library {self.path} version {self.version_string()}>"


_lock = threading.Lock()
_default = None
_loaded = {}
_device_cache = {}


def load_library(path=None):
    """Load libfa2 from `path`, or find it (FA2_LIBRARY, install prefix, loader paths,
    build directories). Loads once per path."""
    tried = []
    if path is None:
        env = os.environ.get("FA2_LIBRARY")
        if env:
            path = os.path.join(env, "libfa2.so") if os.path.isdir(env) else env
            if not os.path.exists(path):
                raise Fa2LibraryNotFound(f"FA2_LIBRARY={env}: no such file")
    if path is None:
        for cand in candidate_paths():
            tried.append(cand)
            if os.sep not in cand or os.path.exists(cand):
                path = cand
                break
    if path is None:
        raise Fa2LibraryNotFound(
            "libfa2 not found: set FA2_LIBRARY to libfa2.so, or install libfa2 (looked in: "
            + (", ".join(tried) or "the loader's paths") + ")")
    with _lock:
        key = os.path.realpath(path) if os.sep in path else path
        if key not in _loaded:
            _loaded[key] = Library(path)
        return _loaded[key]


def library():
    """The default Library, loaded on first use."""
    global _default
    if _default is None:
        lib = load_library()
        with _lock:
            if _default is None:
                _default = lib
    return _default


def _cached_device_info(lib, index):
    key = (id(lib), index)
    info = _device_cache.get(key)
    if info is None:
        info = lib.device_info(index)
        with _lock:
            _device_cache[key] = info
    return info


def version():
    return library().version()


def build_info():
    """How the loaded libfa2 was built: version, CUDA runtime, GPU code."""
    return library().build_info()


def status_string(status):
    return library().status_string(status)


def device_info(device=0):
    """fa2_device_info_query on the default library."""
    return library().device_info(device)


def make_device_info(cc_major, cc_minor, sm_count, smem_per_block_optin, smem_per_sm=None):
    """A hand-filled DeviceInfo (planning without a GPU, or for another device).
    Example, an H100/H200: make_device_info(9, 0, 132, 232448, 233472)."""
    info = DeviceInfo()
    info.struct_size = ctypes.sizeof(DeviceInfo)
    info.cc_major, info.cc_minor, info.sm_count = cc_major, cc_minor, sm_count
    info.smem_per_block_optin = smem_per_block_optin
    info.smem_per_sm = smem_per_block_optin if smem_per_sm is None else smem_per_sm
    return info


# ---------------------------------------------------------------------------------
# Problems from shapes and strides.
# ---------------------------------------------------------------------------------
_DTYPE_NAMES = {"fp16": DTYPE_FP16, "float16": DTYPE_FP16, "half": DTYPE_FP16,
                "bf16": DTYPE_BF16, "bfloat16": DTYPE_BF16}


def _dtype_code(dtype):
    if isinstance(dtype, int):
        return dtype  # passed through: the library validates it
    name = str(dtype).replace("torch.", "")
    if name in _DTYPE_NAMES:
        return _DTYPE_NAMES[name]
    raise Fa2ShapeError(f"dtype={dtype!r} is not supported (fp16 or bf16)")


def _strides3(name, strides):
    """(batch, seq, head) strides from a 4-tuple whose last entry is 1, or a 3-tuple."""
    strides = tuple(int(s) for s in strides)
    if len(strides) == 4:
        if strides[3] != 1:
            raise Fa2ShapeError(f"{name}: the head_dim stride is {strides[3]}, it must be 1")
        return strides[:3]
    if len(strides) == 3:
        return strides
    raise Fa2ShapeError(f"{name}: strides {strides} are not 3 or 4 values")


def make_problem(dtype, q_shape, k_shape, v_shape=None, o_shape=None, *, q_strides=None,
                 k_strides=None, v_strides=None, o_strides=None, causal=False,
                 window=(-1, -1), softmax_scale=None, deterministic=False, softcap=0.0,
                 alibi=False, sinks=False, lib=None):
    """An fa2_problem_t from BSHD shapes [batch, seq, heads, head_dim] and strides in
    elements (4 values with the last = 1, or 3: batch, seq, head; None = contiguous
    BSHD). Shapes must agree (q with o, k with v, batch and head_dim everywhere), else
    Fa2ShapeError; everything else is left to fa2_plan, which validates it. softcap,
    alibi, sinks: the score variants (include/fa2.h)."""
    lib = lib or library()
    shapes = {"q": q_shape, "k": k_shape, "v": k_shape if v_shape is None else v_shape,
              "o": q_shape if o_shape is None else o_shape}
    for n, s in shapes.items():
        if len(s) != 4:
            raise Fa2ShapeError(f"{n} has shape {tuple(s)}: expected 4 dims "
                                "[batch, seqlen, heads, head_dim]")
    shapes = {n: tuple(int(x) for x in s) for n, s in shapes.items()}
    q, k, v, o = shapes["q"], shapes["k"], shapes["v"], shapes["o"]
    if v != k:
        raise Fa2ShapeError(f"k has shape {k} but v has {v}: they must match")
    if o != q:
        raise Fa2ShapeError(f"q has shape {q} but o has {o}: they must match")
    if k[0] != q[0]:
        raise Fa2ShapeError(f"q has batch {q[0]} but k has {k[0]}")
    if k[3] != q[3]:
        raise Fa2ShapeError(f"q has head_dim {q[3]} but k has {k[3]}")
    p = lib.problem_init(dtype, q[0], q[1], k[1], q[2], k[2], q[3])
    for n, st in (("q", q_strides), ("k", k_strides), ("v", v_strides), ("o", o_strides)):
        if st is not None:
            b, s_, h = _strides3(n, st)
            setattr(p, f"{n}_batch_stride", b)
            setattr(p, f"{n}_seq_stride", s_)
            setattr(p, f"{n}_head_stride", h)
    p.causal = int(bool(causal))
    p.window_left, p.window_right = int(window[0]), int(window[1])
    p.softmax_scale = 0.0 if softmax_scale is None else float(softmax_scale)
    p.deterministic = int(bool(deterministic))
    _set_score_variants(p, softcap, alibi, sinks)
    return p


def _set_score_variants(p, softcap, alibi, sinks):
    """The score variants' fields of a problem: softcap (0 = off), alibi and sinks
    (whether their tensors come with the calls)."""
    p.softcap = float(softcap)
    p.alibi, p.sinks = int(bool(alibi)), int(bool(sinks))


def make_varlen_problem(dtype, total_q, total_k, heads_q, heads_kv, head_dim, *, batch,
                        max_seqlen_q, max_seqlen_k, q_strides=None, k_strides=None,
                        v_strides=None, o_strides=None, causal=False, window=(-1, -1),
                        softmax_scale=None, pages=None, softcap=0.0, alibi=False, sinks=False,
                        lib=None):
    """An fa2_problem_t for a packed variable-length batch (fa2_forward_varlen): Q and O
    [total_q, heads_q, head_dim], K and V [total_k, heads_kv, head_dim], strides (row,
    head) in elements (None = contiguous); at most `batch` sequences, the longest
    max_seqlen_q queries and max_seqlen_k keys. pages=(page_size, num_pages,
    pages_per_seq, k_page_stride, v_page_stride): K and V are a paged cache [num_pages,
    page_size, heads_kv, head_dim] instead (total_k 0); softcap, alibi, sinks: the score
    variants. fa2_plan validates it."""
    p = (lib or library()).problem_init(dtype, batch, max_seqlen_q, max_seqlen_k, heads_q,
                                         heads_kv, head_dim)
    p.total_q, p.total_k = int(total_q), int(total_k)
    for n, st, heads in (("q", q_strides, heads_q), ("k", k_strides, heads_kv),
                         ("v", v_strides, heads_kv), ("o", o_strides, heads_q)):
        row, head = (int(heads) * int(head_dim), int(head_dim)) if st is None else \
            (int(st[0]), int(st[1]))
        setattr(p, f"{n}_batch_stride", 0)
        setattr(p, f"{n}_seq_stride", row)
        setattr(p, f"{n}_head_stride", head)
    if pages is not None:
        page_size, num_pages, pages_per_seq, k_page, v_page = (int(x) for x in pages)
        p.page_size, p.num_pages, p.pages_per_seq = page_size, num_pages, pages_per_seq
        p.k_batch_stride, p.v_batch_stride = k_page, v_page
    p.causal = int(bool(causal))
    p.window_left, p.window_right = int(window[0]), int(window[1])
    p.softmax_scale = 0.0 if softmax_scale is None else float(softmax_scale)
    _set_score_variants(p, softcap, alibi, sinks)
    return p


# ---------------------------------------------------------------------------------
# Plans and calls on raw pointers (or torch tensors).
# ---------------------------------------------------------------------------------
def _is_tensor(x):
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def _ptr(x):
    """A device pointer from an int, None (NULL) or a torch tensor."""
    if x is None:
        return None
    if _is_tensor(x):
        return x.data_ptr() or None
    return int(x)


def _stream(stream):
    """A cudaStream_t value from None (legacy default stream), an int, or a
    torch.cuda.Stream."""
    if stream is None:
        return None
    return int(getattr(stream, "cuda_stream", stream)) or None


class Plan:
    """An fa2_plan_t and the library it came from. Fields of the C struct read as
    attributes (plan.block_m, plan.bwd_workspace_bytes, plan.fwd_arch, plan.bwd_arch,
    plan.problem.head_dim, ...)."""

    def __init__(self, lib, raw):
        self.lib = lib
        self.raw = raw

    def __getattr__(self, name):
        return getattr(self.__dict__["raw"], name)

    def __repr__(self):
        return f"<fa2.Plan {_struct_repr(self.raw)}>"

    def forward(self, q, k, v, o, lse=None, workspace=None, workspace_bytes=None,
                stream=None):
        """fa2_forward on device pointers (ints) or torch tensors laid out as the plan's
        problem says. Asynchronous on `stream` (an int cudaStream_t, a torch stream, or
        None for the legacy default stream)."""
        if workspace_bytes is None:
            workspace_bytes = _nbytes(workspace) if _is_tensor(workspace) else 0
        self.lib.check(self.lib.cdll.fa2_forward(
            ctypes.byref(self.raw), _ptr(q), _ptr(k), _ptr(v), _ptr(o), _ptr(lse),
            _ptr(workspace), workspace_bytes, _stream(stream)), "fa2_forward")

    def forward_varlen(self, q, k, v, o, cu_seqlens_q, cu_seqlens_k, lse=None,
                       seqused_k=None, page_table=None, workspace=None, workspace_bytes=None,
                       stream=None):
        """fa2_forward_varlen for a packed plan (make_varlen_problem): the offsets, key
        counts and page table are device int32 arrays (pointers or torch tensors), read
        on the GPU only."""
        if workspace_bytes is None:
            workspace_bytes = _nbytes(workspace) if _is_tensor(workspace) else 0
        self.lib.check(self.lib.cdll.fa2_forward_varlen(
            ctypes.byref(self.raw), _ptr(q), _ptr(k), _ptr(v), _ptr(o), _ptr(lse),
            _ptr(cu_seqlens_q), _ptr(cu_seqlens_k), _ptr(seqused_k), _ptr(page_table),
            _ptr(workspace), workspace_bytes, _stream(stream)), "fa2_forward_varlen")

    def forward_with(self, q, k, v, o, lse=None, cu_seqlens_q=None, cu_seqlens_k=None,
                     seqused_k=None, page_table=None, alibi_slopes=None, sinks=None,
                     workspace=None, workspace_bytes=None, stream=None):
        """fa2_forward_with: any plan's forward, with the score variants' per-head
        tensors (float32 [heads_q], pointers or torch tensors) when the plan has them."""
        if workspace_bytes is None:
            workspace_bytes = _nbytes(workspace) if _is_tensor(workspace) else 0
        args = ForwardArgs()
        self.lib.cdll.fa2_forward_args_init(ctypes.byref(args))
        for name, value in (("q", q), ("k", k), ("v", v), ("o", o), ("lse", lse),
                            ("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k),
                            ("seqused_k", seqused_k), ("page_table", page_table),
                            ("alibi_slopes", alibi_slopes), ("sinks", sinks),
                            ("workspace", workspace)):
            setattr(args, name, _ptr(value))
        args.workspace_bytes = workspace_bytes
        args.stream = _stream(stream)
        self.lib.check(self.lib.cdll.fa2_forward_with(ctypes.byref(self.raw), ctypes.byref(args)),
                       "fa2_forward_with")

    def backward_with(self, q, k, v, o, d_o, lse, dq, dk, dv, workspace, cu_seqlens_q=None,
                      cu_seqlens_k=None, seqused_k=None, alibi_slopes=None, sinks=None,
                      dsinks=None, workspace_bytes=None, stream=None):
        """fa2_backward_with: any plan's backward, with the score variants' per-head
        tensors (float32 [heads_q]) when the plan has them, and the sinks' gradient
        dsinks (written)."""
        if workspace_bytes is None:
            workspace_bytes = _nbytes(workspace) if _is_tensor(workspace) \
                else self.raw.bwd_workspace_bytes
        args = BackwardArgs()
        self.lib.cdll.fa2_backward_args_init(ctypes.byref(args))
        for name, value in (("q", q), ("k", k), ("v", v), ("o", o), ("d_o", d_o), ("lse", lse),
                            ("dq", dq), ("dk", dk), ("dv", dv), ("cu_seqlens_q", cu_seqlens_q),
                            ("cu_seqlens_k", cu_seqlens_k), ("seqused_k", seqused_k),
                            ("alibi_slopes", alibi_slopes), ("sinks", sinks),
                            ("dsinks", dsinks), ("workspace", workspace)):
            setattr(args, name, _ptr(value))
        args.workspace_bytes = workspace_bytes
        args.stream = _stream(stream)
        self.lib.check(self.lib.cdll.fa2_backward_with(ctypes.byref(self.raw),
                                                       ctypes.byref(args)),
                       "fa2_backward_with")

    def varlen_check(self, workspace, workspace_bytes=None):
        """fa2_varlen_check: the metadata checks the last forward_varlen with this plan
        and workspace wrote (synchronous: call once that work has finished). Returns
        None when every sequence passed; raises Fa2BadMetadata naming the first sequence
        that failed and its check (also as e.sequence and e.check)."""
        if workspace_bytes is None:
            workspace_bytes = _nbytes(workspace) if _is_tensor(workspace) \
                else self.raw.workspace_bytes
        seq, check = _i64(-1), ctypes.c_int(0)
        status = self.lib.cdll.fa2_varlen_check(ctypes.byref(self.raw), _ptr(workspace),
                                                workspace_bytes, ctypes.byref(seq),
                                                ctypes.byref(check))
        try:
            self.lib.check(status, "fa2_varlen_check")
        except Fa2BadMetadata as e:
            e.sequence, e.check = seq.value, VARLEN_CHECK_NAMES.get(check.value, check.value)
            raise

    def backward_varlen(self, q, k, v, o, d_o, lse, dq, dk, dv, cu_seqlens_q, cu_seqlens_k,
                        workspace, seqused_k=None, workspace_bytes=None, stream=None):
        """fa2_backward_varlen for a packed plan, with the forward's offsets."""
        if workspace_bytes is None:
            workspace_bytes = _nbytes(workspace) if _is_tensor(workspace) \
                else self.raw.bwd_workspace_bytes
        self.lib.check(self.lib.cdll.fa2_backward_varlen(
            ctypes.byref(self.raw), _ptr(q), _ptr(k), _ptr(v), _ptr(o), _ptr(d_o), _ptr(lse),
            _ptr(dq), _ptr(dk), _ptr(dv), _ptr(cu_seqlens_q), _ptr(cu_seqlens_k),
            _ptr(seqused_k), _ptr(workspace), workspace_bytes, _stream(stream)),
            "fa2_backward_varlen")

    def backward(self, q, k, v, o, d_o, lse, dq, dk, dv, workspace, workspace_bytes=None,
                 stream=None):
        """fa2_backward: dQ, dK, dV from Q, K, V, O, dO and the forward's LSE. The
        workspace holds plan.bwd_workspace_bytes bytes (default workspace_bytes: the
        tensor's size, or plan.bwd_workspace_bytes for a raw pointer)."""
        if workspace_bytes is None:
            workspace_bytes = _nbytes(workspace) if _is_tensor(workspace) \
                else self.raw.bwd_workspace_bytes
        self.lib.check(self.lib.cdll.fa2_backward(
            ctypes.byref(self.raw), _ptr(q), _ptr(k), _ptr(v), _ptr(o), _ptr(d_o), _ptr(lse),
            _ptr(dq), _ptr(dk), _ptr(dv), _ptr(workspace), workspace_bytes,
            _stream(stream)), "fa2_backward")


def _nbytes(t):
    return t.numel() * t.element_size()


def plan(problem, device=None, lib=None):
    """fa2_plan on the default library: see Library.plan."""
    return (lib or library()).plan(problem, device)


# ---------------------------------------------------------------------------------
# torch: tensors in, tensors out, autograd.
# ---------------------------------------------------------------------------------
def _torch():
    try:
        import torch
    except ImportError:
        raise ImportError("fa2's tensor helpers need PyTorch; the raw-pointer API "
                          "(make_problem, plan, Plan.forward) does not") from None
    return torch


_PLAN_CACHE_MAX = 256
_plan_cache = {}


# ---------------------------------------------------------------------------------
# Layout arithmetic on shapes and strides (no torch needed).
# ---------------------------------------------------------------------------------
def repeats_addresses(shape, strides):
    """True when two elements of a strided layout may share an address: a dim of
    extent > 1 has stride 0, or, with the dims sorted by stride, a stride does not
    clear the offsets the smaller ones reach. A layout with no elements repeats
    nothing. Exact for dense tensors and their permutations, slices and expansions;
    the rare interleaved layout it flags without a real repeat is treated as repeating."""
    if any(int(n) == 0 for n in shape):
        return False
    reach = 0  # the largest offset the dims taken so far reach
    for stride, n in sorted((int(st), int(n)) for n, st in zip(shape, strides) if int(n) > 1):
        if stride <= reach:
            return True
        reach += (n - 1) * stride
    return False


def _extent(shape, strides):
    """Elements from the first to one past the last one the strides reach (0 if none)."""
    if any(int(n) == 0 for n in shape):
        return 0
    return 1 + sum((int(n) - 1) * int(st) for n, st in zip(shape, strides))


def _dense_strides(shape):
    """The strides of a contiguous tensor of `shape` (torch's rule: size-0 and size-1
    dims count as 1)."""
    out, step = [], 1
    for n in reversed(tuple(shape)):
        out.append(step)
        step *= max(int(n), 1)
    return tuple(reversed(out))


# ---------------------------------------------------------------------------------
# Tensor checks. Every one runs before the first C call, so a refused call writes
# nothing.
# ---------------------------------------------------------------------------------
def _check_storage(name, t):
    """t's storage must hold every element t's strides reach: the C kernels read or
    write all of them (a storage resized smaller under a view, as
    untyped_storage().resize_(0) does, would be accessed past its end)."""
    end = (t.storage_offset() + _extent(t.shape, t.stride())) * t.element_size()
    if t.numel() and end > t.untyped_storage().nbytes():
        raise Fa2ShapeError(f"{name}: its strides reach {end} bytes into its storage, "
                            f"which holds {t.untyped_storage().nbytes()}")


def _check_tensors(q, k, v):
    torch = _torch()
    for n, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise Fa2ShapeError(f"{n} is a {type(t).__name__}, not a torch.Tensor")
        if not t.is_cuda:
            raise Fa2ShapeError(f"{n} is on {t.device}, not on a CUDA device")
        if t.dtype not in (torch.float16, torch.bfloat16):
            raise Fa2ShapeError(f"{n} has dtype {t.dtype}: fp16 or bf16 only")
        if t.dim() != 4:
            raise Fa2ShapeError(f"{n} has shape {tuple(t.shape)}: expected 4 dims "
                                "[batch, seqlen, heads, head_dim]")
    if not (q.dtype == k.dtype == v.dtype):
        raise Fa2ShapeError(f"dtypes differ: q {q.dtype}, k {k.dtype}, v {v.dtype}")
    if not (q.device == k.device == v.device):
        raise Fa2ShapeError(f"devices differ: q {q.device}, k {k.device}, v {v.device}")
    for n, t in (("q", q), ("k", k), ("v", v)):
        _check_storage(n, t)


def _check_like(name, t, shape, dtype, device):
    """t is a torch tensor of `shape` and `dtype` on `device`, within its storage."""
    torch = _torch()
    if not isinstance(t, torch.Tensor):
        raise Fa2ShapeError(f"{name} is a {type(t).__name__}, not a torch.Tensor")
    if t.device != device:
        raise Fa2ShapeError(f"{name} is on {t.device}, q on {device}: they must match")
    if t.dtype != dtype:
        raise Fa2ShapeError(f"{name} has dtype {t.dtype}, expected {dtype}")
    if tuple(t.shape) != tuple(shape):
        raise Fa2ShapeError(f"{name} has shape {tuple(t.shape)}, expected {tuple(shape)}")
    _check_storage(name, t)


def _check_distinct(name, t):
    """An output needs one address per element: repeated ones would race."""
    if repeats_addresses(t.shape, t.stride()):
        raise Fa2Overlap(f"{name}: strides {t.stride()} give several elements of shape "
                         f"{tuple(t.shape)} one address; an output needs one address "
                         "per element")


def _check_output(name, t, shape, dtype, device):
    """An output the C call writes with t's own strides (forward's out=): the layout
    fa2_plan accepts for O, checked here so that the message names the argument."""
    _check_like(name, t, shape, dtype, device)
    strides = t.stride()
    if strides[-1] != 1:
        raise Fa2ShapeError(f"{name}: the head_dim stride is {strides[-1]}, it must be 1")
    if any(s < 0 or s % 8 for s in strides[:-1]):
        raise Fa2BadStride(f"{name}: strides {strides} are not all non-negative "
                           "multiples of 8 elements (16-byte rows)")
    _check_distinct(name, t)


def _lse_shape(q):
    return (q.shape[0], q.shape[2], q.shape[1])


def _check_lse(name, t, q):
    """The LSE: float32 [batch, heads_q, seqlen_q], contiguous, on q's device."""
    if t is None:
        raise Fa2ShapeError(f"{name} is None: pass the forward's LSE "
                            "(forward(..., return_lse=True))")
    _check_like(name, t, _lse_shape(q), _torch().float32, q.device)
    if not t.is_contiguous():
        raise Fa2ShapeError(f"{name} has strides {t.stride()}: it must be contiguous "
                            "[batch, heads_q, seqlen_q]")


def _check_gradient(name, g, t):
    """A caller-given dq, dk or dv for input t: t's shape, dtype and device, one
    address per element, and the strides the backward writes it with: t's, or those of
    t.contiguous() when t's repeat an address (backward() then passes that copy)."""
    _check_like(name, g, t.shape, t.dtype, t.device)
    _check_distinct(name, g)
    written = _dense_strides(t.shape) if repeats_addresses(t.shape, t.stride()) \
        else t.stride()
    if g.stride() != written:
        whose = f"{name[1:]}'s" if written == t.stride() else \
            f"those of {name[1:]}.contiguous(), as {name[1:]} repeats addresses"
        raise Fa2ShapeError(f"{name} has strides {g.stride()}; the backward writes it "
                            f"with {whose}: {written}")


def _as_c_input(q, t):
    """The tensor whose pointer and strides describe input K or V to the library.
    With seqlen_k = 0 K and V have no elements (data_ptr() may be 0), but the C API
    wants non-NULL k and v: Q stands in for them. The kernels read nothing from K/V
    when seqlen_k = 0, and the extent so described lies inside Q's."""
    return q if t.shape[1] == 0 else t


def plan_for(q, k, v, o=None, *, causal=False, window=(-1, -1), softmax_scale=None,
             deterministic=False, max_splits=0, softcap=0.0, alibi=False, sinks=False,
             lib=None):
    """The Plan for torch tensors (cached per shapes, strides, dtype, options, device).
    The backward uses such a plan too: dO has O's strides, dQ Q's, dK K's, dV V's.
    max_splits: fa2_problem_t.max_splits (key splits when the decode kernel runs);
    softcap, alibi, sinks: the score variants (include/fa2.h)."""
    lib = lib or library()
    o_shape, o_strides = (tuple(q.shape), None) if o is None else (tuple(o.shape), o.stride())
    k_strides, v_strides = _as_c_input(q, k).stride(), _as_c_input(q, v).stride()
    key = (id(lib), q.device.index, str(q.dtype), tuple(q.shape), q.stride(), tuple(k.shape),
           k_strides, tuple(v.shape), v_strides, o_shape, o_strides, bool(causal),
           tuple(window), softmax_scale, bool(deterministic), int(max_splits),
           float(softcap), bool(alibi), bool(sinks))
    p = _plan_cache.get(key)
    if p is None:
        problem = make_problem(q.dtype, q.shape, k.shape, v.shape, o_shape,
                               q_strides=q.stride(), k_strides=k_strides,
                               v_strides=v_strides, o_strides=o_strides, causal=causal,
                               window=window, softmax_scale=softmax_scale,
                               deterministic=deterministic, softcap=softcap, alibi=alibi,
                               sinks=sinks, lib=lib)
        problem.max_splits = int(max_splits)
        p = lib.plan(problem, q.device.index)
        with _lock:
            if len(_plan_cache) >= _PLAN_CACHE_MAX:
                _plan_cache.clear()
            _plan_cache[key] = p
    return p


def _empty_as(t):
    """A new tensor with t's shape and strides (dense for dense t; for a strided view,
    storage spanning the view's extent)."""
    torch = _torch()
    return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device)


def _check_score_tensors(alibi_slopes, sinks, heads_q, device):
    """The score variants' per-head tensors: contiguous float32 [heads_q] on q's device
    (or None)."""
    torch = _torch()
    for name, t in (("alibi_slopes", alibi_slopes), ("sinks", sinks)):
        if t is not None and (not isinstance(t, torch.Tensor) or t.dtype != torch.float32 or
                              tuple(t.shape) != (heads_q,) or not t.is_contiguous() or
                              t.device != device):
            raise Fa2ShapeError(f"{name}: expected a contiguous float32 tensor [heads_q = "
                                f"{heads_q}] on q's device")


def _max_splits(num_splits):
    """flash-attn's num_splits (0: the planner decides, n >= 1: at most n) as
    fa2_problem_t.max_splits."""
    n = int(num_splits)
    if n < 0 or n > MAX_SPLITS:
        raise Fa2ShapeError(f"num_splits={n} is out of range [0, {MAX_SPLITS}]")
    return MAX_SPLITS if n == 0 else n


def forward(q, k, v, *, causal=False, window=(-1, -1), softmax_scale=None, out=None,
            lse=None, return_lse=False, deterministic=False, num_splits=0, softcap=0.0,
            alibi_slopes=None, sinks=None, lib=None):
    """Attention forward on torch tensors: q [b, sq, hq, d], k/v [b, sk, hkv, d] (BSHD
    views, any strides with head_dim stride 1; sk may be 0). Runs on the current
    stream of q's device. Returns o (new, or `out`), and the LSE float32 [b, hq, sq]
    (new, or `lse`) when return_lse=True or `lse` is given. `out` must have q's
    shape, dtype and device, a head_dim stride of 1, other strides multiples of 8 and
    one address per element; `lse` must be contiguous float32 on q's device. Checked
    before any C call: a refused call writes nothing. num_splits (as flash-attn's): 0
    lets the planner split each sequence's keys over blocks when the decode kernel runs
    (a few query rows per kv head: docs/api.md "Decode"; the workspace is allocated
    here), 1 never splits, n at most n. softcap (0 = off), alibi_slopes and sinks
    (float32 [heads_q] on q's device): the score variants as include/fa2.h defines them;
    the LSE returned includes the sink."""
    torch = _torch()
    _check_tensors(q, k, v)
    _check_score_tensors(alibi_slopes, sinks, q.shape[2], q.device)
    max_splits = _max_splits(num_splits)
    if out is None:
        out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    else:
        _check_output("out", out, q.shape, q.dtype, q.device)
    if lse is not None:
        _check_lse("lse", lse, q)
        return_lse = True
    elif return_lse:
        lse = torch.empty(_lse_shape(q), dtype=torch.float32, device=q.device)
    p = plan_for(q, k, v, out, causal=causal, window=window, softmax_scale=softmax_scale,
                 deterministic=deterministic, max_splits=max_splits, softcap=softcap,
                 alibi=alibi_slopes is not None, sinks=sinks is not None, lib=lib)
    workspace = (torch.empty(int(p.workspace_bytes), dtype=torch.uint8, device=q.device)
                 if p.workspace_bytes else None)
    with torch.cuda.device(q.device):
        p.forward_with(q, _as_c_input(q, k), _as_c_input(q, v), out, lse,
                       alibi_slopes=alibi_slopes, sinks=sinks, workspace=workspace,
                       stream=torch.cuda.current_stream(q.device))
    return (out, lse) if return_lse else out


def backward(d_o, q, k, v, o, lse, *, causal=False, window=(-1, -1), softmax_scale=None,
             deterministic=False, dq=None, dk=None, dv=None, softcap=0.0, alibi_slopes=None,
             sinks=None, lib=None):
    """Attention backward on torch tensors: returns (dq, dk, dv) shaped like q, k, v,
    and with sinks also dsinks (float32 [heads_q]): (dq, dk, dv, dsinks). The score
    variants (softcap, alibi_slopes, sinks) as the forward had them.
    `o` and `lse` come from forward(..., return_lse=True) with the same options; o and
    d_o have q's shape, dtype and device. dO is copied to O's strides when its own
    differ.

    fa2_backward writes dQ, dK, dV with Q's, K's and V's strides. An input whose
    strides repeat an address (an expanded tensor, e.g. k0.expand(2, ...)) goes to the
    library as a contiguous copy, and its gradient is a full-shape tensor with the
    copy's strides: sum it over the broadcast dims (autograd does, for expand). A
    given dq, dk or dv must have the strides the library writes (its input's, or the
    copy's) and one address per element, else Fa2Overlap / Fa2ShapeError before any C
    call. With seqlen_k = 0, dq is zero and dk, dv have no elements."""
    torch = _torch()
    _check_tensors(q, k, v)
    _check_score_tensors(alibi_slopes, sinks, q.shape[2], q.device)
    _check_like("o", o, q.shape, q.dtype, q.device)
    _check_like("d_o", d_o, q.shape, q.dtype, q.device)
    _check_lse("lse", lse, q)
    for name, g, t in (("dq", dq, q), ("dk", dk, k), ("dv", dv, v)):
        if g is not None:
            _check_gradient(name, g, t)
    # Checks done. Inputs that repeat addresses go as contiguous copies (only those).
    q_c, k_c, v_c = (t.contiguous() if repeats_addresses(t.shape, t.stride()) else t
                     for t in (q, k, v))
    p = plan_for(q_c, k_c, v_c, o, causal=causal, window=window,
                 softmax_scale=softmax_scale, deterministic=deterministic, softcap=softcap,
                 alibi=alibi_slopes is not None, sinks=sinks is not None, lib=lib)
    dq = _empty_as(q_c) if dq is None else dq
    dk = _empty_as(k_c) if dk is None else dk
    dv = _empty_as(v_c) if dv is None else dv
    dsinks = None if sinks is None else torch.empty_like(sinks)
    if k.shape[1] == 0:
        # No key: dQ = 0 and dK, dV are empty, and every row is the sink's alone, with
        # O = 0: dsinks = 0. fa2_backward would need non-NULL dK and dV pointers that
        # overlap nothing, for no work: not called.
        return (dq.zero_(), dk, dv) + (() if dsinks is None else (dsinks.zero_(),))
    if d_o.stride() != o.stride():
        d_o = _empty_as(o).copy_(d_o)
    workspace = torch.empty(max(int(p.bwd_workspace_bytes), 16), dtype=torch.uint8,
                            device=q.device)
    with torch.cuda.device(q.device):
        p.backward_with(q_c, k_c, v_c, o, d_o, lse, dq, dk, dv, workspace,
                        alibi_slopes=alibi_slopes, sinks=sinks, dsinks=dsinks,
                        stream=torch.cuda.current_stream(q.device))
    return (dq, dk, dv) + (() if dsinks is None else (dsinks,))


_ops = None


def _custom_ops():
    """torch.ops.libfa2.fwd / bwd: forward and backward registered as torch.library
    custom ops (with fake implementations for shapes, and the backward as the forward's
    autograd formula), so that torch.compile traces attention() without a graph break.
    Built on first use, so that importing libfa2 needs no torch."""
    global _ops
    if _ops is not None:
        return _ops
    torch = _torch()
    from typing import Optional, Tuple

    with _lock:
        if _ops is not None:
            return _ops

        @torch.library.custom_op("libfa2::fwd", mutates_args=())
        def fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                window_left: int, window_right: int, softmax_scale: Optional[float],
                deterministic: bool, softcap: float, alibi_slopes: Optional[torch.Tensor],
                sinks: Optional[torch.Tensor]) -> Tuple[torch.Tensor, torch.Tensor]:
            return forward(q, k, v, causal=causal, window=(window_left, window_right),
                           softmax_scale=softmax_scale, deterministic=deterministic,
                           softcap=softcap, alibi_slopes=alibi_slopes, sinks=sinks,
                           return_lse=True)

        @fwd.register_fake
        def _(q, k, v, causal, window_left, window_right, softmax_scale, deterministic,
              softcap, alibi_slopes, sinks):
            return (q.new_empty(q.shape),
                    q.new_empty(_lse_shape(q), dtype=torch.float32))

        # dsinks: float32 [heads_q] with sinks, else an empty tensor (a custom op returns
        # tensors).
        @torch.library.custom_op("libfa2::bwd", mutates_args=())
        def bwd(d_o: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                o: torch.Tensor, lse: torch.Tensor, causal: bool, window_left: int,
                window_right: int, softmax_scale: Optional[float], deterministic: bool,
                softcap: float, alibi_slopes: Optional[torch.Tensor],
                sinks: Optional[torch.Tensor]
                ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
            grads = backward(d_o, q, k, v, o, lse, causal=causal,
                             window=(window_left, window_right), softmax_scale=softmax_scale,
                             deterministic=deterministic, softcap=softcap,
                             alibi_slopes=alibi_slopes, sinks=sinks)
            return grads if sinks is not None else grads + (q.new_empty(0, dtype=torch.float32),)

        @bwd.register_fake
        def _(d_o, q, k, v, o, lse, causal, window_left, window_right, softmax_scale,
              deterministic, softcap, alibi_slopes, sinks):
            # backward() writes each gradient with its input's strides, or dense ones
            # for an input whose strides repeat an address.
            return tuple(torch.empty_strided(t.shape, _dense_strides(t.shape) if
                                             repeats_addresses(t.shape, t.stride())
                                             else t.stride(), dtype=t.dtype,
                                             device=t.device) for t in (q, k, v)) + (
                q.new_empty(0 if sinks is None else sinks.shape[0], dtype=torch.float32),)

        def setup_context(ctx, inputs, output):
            (q, k, v, causal, window_left, window_right, softmax_scale, deterministic,
             softcap, alibi_slopes, sinks) = inputs
            o, lse = output
            ctx.save_for_backward(q, k, v, o, lse, alibi_slopes, sinks)
            ctx.mark_non_differentiable(lse)
            ctx.options = (causal, window_left, window_right, softmax_scale, deterministic,
                           softcap)

        def backward_formula(ctx, d_o, d_lse):
            q, k, v, o, lse, alibi_slopes, sinks = ctx.saved_tensors
            dq, dk, dv, dsinks = bwd(d_o, q, k, v, o, lse, *ctx.options, alibi_slopes, sinks)
            return (dq, dk, dv) + (None,) * 7 + (None if sinks is None else dsinks,)

        fwd.register_autograd(backward_formula, setup_context=setup_context)

        @torch.library.custom_op("libfa2::varlen_fwd", mutates_args=())
        def varlen_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                       cu_seqlens_q: torch.Tensor, cu_seqlens_k: torch.Tensor,
                       seqused_k: Optional[torch.Tensor], max_seqlen_q: int,
                       max_seqlen_k: int, causal: bool, window_left: int, window_right: int,
                       softmax_scale: Optional[float], deterministic: bool, softcap: float,
                       alibi_slopes: Optional[torch.Tensor], sinks: Optional[torch.Tensor]
                       ) -> Tuple[torch.Tensor, torch.Tensor]:
            return _varlen_forward(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k,
                                   max_seqlen_q, max_seqlen_k, causal,
                                   (window_left, window_right), softmax_scale, deterministic,
                                   softcap, alibi_slopes, sinks)

        @varlen_fwd.register_fake
        def _(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k,
              causal, window_left, window_right, softmax_scale, deterministic, softcap,
              alibi_slopes, sinks):
            return (q.new_empty(q.shape),
                    q.new_empty((q.shape[1], q.shape[0]), dtype=torch.float32))

        @torch.library.custom_op("libfa2::varlen_bwd", mutates_args=())
        def varlen_bwd(d_o: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                       o: torch.Tensor, lse: torch.Tensor, cu_seqlens_q: torch.Tensor,
                       cu_seqlens_k: torch.Tensor, seqused_k: Optional[torch.Tensor],
                       max_seqlen_q: int, max_seqlen_k: int, causal: bool, window_left: int,
                       window_right: int, softmax_scale: Optional[float], deterministic: bool,
                       softcap: float, alibi_slopes: Optional[torch.Tensor],
                       sinks: Optional[torch.Tensor]
                       ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
            return _varlen_backward(d_o, q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k,
                                    seqused_k, max_seqlen_q, max_seqlen_k, causal,
                                    (window_left, window_right), softmax_scale, deterministic,
                                    softcap, alibi_slopes, sinks)

        @varlen_bwd.register_fake
        def _(d_o, q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q,
              max_seqlen_k, causal, window_left, window_right, softmax_scale, deterministic,
              softcap, alibi_slopes, sinks):
            return tuple(torch.empty_strided(t.shape, t.stride(), dtype=t.dtype,
                                             device=t.device) for t in (q, k, v)) + (
                q.new_empty(0 if sinks is None else sinks.shape[0], dtype=torch.float32),)

        def varlen_setup_context(ctx, inputs, output):
            q, k, v, cu_q, cu_k, used = inputs[:6]
            alibi_slopes, sinks = inputs[-2:]
            o, lse = output
            ctx.save_for_backward(q, k, v, o, lse, cu_q, cu_k, used, alibi_slopes, sinks)
            ctx.mark_non_differentiable(lse)
            ctx.options = inputs[6:-2]

        def varlen_backward_formula(ctx, d_o, d_lse):
            q, k, v, o, lse, cu_q, cu_k, used, alibi_slopes, sinks = ctx.saved_tensors
            dq, dk, dv, dsinks = varlen_bwd(d_o, q, k, v, o, lse, cu_q, cu_k, used,
                                            *ctx.options, alibi_slopes, sinks)
            return (dq, dk, dv) + (None,) * 12 + (None if sinks is None else dsinks,)

        varlen_fwd.register_autograd(varlen_backward_formula,
                                     setup_context=varlen_setup_context)
        _ops = torch.ops.libfa2
    return _ops


def attention(q, k, v, *, causal=False, window=(-1, -1), softmax_scale=None,
              deterministic=False, softcap=0.0, alibi_slopes=None, sinks=None):
    """softmax(scale * q k^T + mask) v on BSHD torch tensors, differentiable. Options
    are keyword-only (a fourth positional argument would be flash_attn_func's dropout_p;
    see flash_attn_func).
    q [b, sq, hq, d], k/v [b, sk, hkv, d], hq a multiple of hkv (GQA/MQA). Causal
    masks are bottom-right aligned when sq != sk (FlashAttention-2 >= 2.1). Tensors
    whose head_dim stride is not 1 are made contiguous first. Broadcast (expanded)
    inputs get correct gradients; sk = 0 gives o = 0 and dq = 0. softcap (0 = off),
    alibi_slopes and sinks (float32 [heads_q] on q's device): the score variants of
    include/fa2.h; sinks get a gradient, the slopes none."""
    q, k, v = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))
    window_left, window_right = (int(w) for w in window)
    o, _ = _custom_ops().fwd(q, k, v, bool(causal), window_left, window_right,
                             None if softmax_scale is None else float(softmax_scale),
                             bool(deterministic), float(softcap), alibi_slopes, sinks)
    return o


def _refuse_unsupported(function, dropout_p, return_attn_probs):
    """flash-attn arguments libfa2 does not implement, refused by name."""
    if dropout_p:
        raise Fa2ShapeError(f"{function}: dropout_p={dropout_p!r}: libfa2 has no "
                            "dropout (use 0.0)")
    if return_attn_probs:
        raise Fa2ShapeError(f"{function}: return_attn_probs is not supported")


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False,
                    window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                    deterministic=False, return_attn_probs=False, *, sinks=None):
    """attention() with the argument order of flash_attn.flash_attn_func, for code
    written against FlashAttention-2; softcap, alibi_slopes (float32 [heads_q]) and,
    keyword-only, sinks as attention() takes them. What libfa2 does not do is refused,
    naming the argument, before any tensor is touched: dropout_p != 0,
    return_attn_probs."""
    _refuse_unsupported("flash_attn_func", dropout_p, return_attn_probs)
    return attention(q, k, v, causal=causal, window=tuple(window_size),
                     softmax_scale=softmax_scale, deterministic=deterministic,
                     softcap=softcap, alibi_slopes=alibi_slopes, sinks=sinks)


def _check_offsets(name, t, n, device):
    """A device int32 vector of n values (cu_seqlens_*, seqused_k)."""
    torch = _torch()
    if not isinstance(t, torch.Tensor):
        raise Fa2ShapeError(f"{name} is a {type(t).__name__}, not a torch.Tensor")
    if t.dtype != torch.int32 or t.dim() != 1 or t.numel() != n or not t.is_contiguous():
        raise Fa2ShapeError(f"{name}: dtype {t.dtype}, shape {tuple(t.shape)}: expected a "
                            f"contiguous int32 vector of {n} values")
    if t.device != device:
        raise Fa2ShapeError(f"{name} is on {t.device}, q on {device}: they must match")


def _varlen_plan(q3, k3, v3, batch, max_seqlen_q, max_seqlen_k, causal, window,
                 softmax_scale, deterministic, softcap=0.0, alibi=False, sinks=False):
    """The cached Plan of a packed batch: q3 [total_q, hq, d], k3/v3 [total_k, hkv, d],
    O contiguous like q3; softcap, alibi, sinks: the score variants."""
    key = ("varlen", q3.device.index, str(q3.dtype), tuple(q3.shape), q3.stride(),
           tuple(k3.shape), k3.stride(), v3.stride(), batch, int(max_seqlen_q),
           int(max_seqlen_k), bool(causal), tuple(window), softmax_scale, bool(deterministic),
           float(softcap), bool(alibi), bool(sinks))
    p = _plan_cache.get(key)
    if p is None:
        lib = library()
        problem = make_varlen_problem(
            q3.dtype, q3.shape[0], k3.shape[0], q3.shape[1], k3.shape[1], q3.shape[2],
            batch=batch, max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k,
            q_strides=q3.stride()[:2], k_strides=k3.stride()[:2], v_strides=v3.stride()[:2],
            o_strides=(q3.shape[1] * q3.shape[2], q3.shape[2]), causal=causal,
            window=window, softmax_scale=softmax_scale, softcap=softcap, alibi=alibi,
            sinks=sinks, lib=lib)
        problem.deterministic = int(bool(deterministic))
        p = lib.plan(problem, q3.device.index)
        with _lock:
            if len(_plan_cache) >= _PLAN_CACHE_MAX:
                _plan_cache.clear()
            _plan_cache[key] = p
    return p


def _varlen_inputs(k3, v3, q3):
    """K and V pointers for the library: with no key row (data_ptr() may be 0), q stands
    in; nothing is read from it."""
    return (q3, q3) if k3.shape[0] == 0 else (k3, v3)


def _varlen_forward(q3, k3, v3, cu_q, cu_k, seqused_k, max_q, max_k, causal, window,
                    softmax_scale, deterministic, softcap=0.0, alibi_slopes=None, sinks=None):
    """(o, lse) of a checked packed batch: o contiguous like q3, lse [heads_q, total_q]."""
    torch = _torch()
    p = _varlen_plan(q3, k3, v3, cu_q.numel() - 1, max_q, max_k, causal, window,
                     softmax_scale, deterministic, softcap, alibi_slopes is not None,
                     sinks is not None)
    k_c, v_c = _varlen_inputs(k3, v3, q3)
    o = torch.empty(q3.shape, dtype=q3.dtype, device=q3.device)
    lse = torch.empty((q3.shape[1], q3.shape[0]), dtype=torch.float32, device=q3.device)
    # the metadata checks' record (a failed sequence is skipped; not read back here)
    workspace = torch.empty(p.workspace_bytes, dtype=torch.uint8, device=q3.device)
    with torch.cuda.device(q3.device):
        p.forward_with(q3, k_c, v_c, o, lse, cu_q, cu_k, seqused_k,
                       alibi_slopes=alibi_slopes, sinks=sinks, workspace=workspace,
                       stream=torch.cuda.current_stream(q3.device))
    return o, lse


def _varlen_backward(d_o, q3, k3, v3, o, lse, cu_q, cu_k, seqused_k, max_q, max_k, causal,
                     window, softmax_scale, deterministic, softcap=0.0, alibi_slopes=None,
                     sinks=None):
    """(dq, dk, dv, dsinks) of a packed batch, each gradient with its input's strides;
    rows no sequence uses (which the library leaves alone) are 0, their gradient;
    dsinks float32 [heads_q] (empty without sinks)."""
    torch = _torch()
    dq, dk, dv = (_empty_as(t).zero_() for t in (q3, k3, v3))
    dsinks = (q3.new_empty(0, dtype=torch.float32) if sinks is None
              else torch.zeros_like(sinks))
    if k3.shape[0] == 0:
        return dq, dk, dv, dsinks  # no key: dQ = 0, dK and dV empty, O = 0: dsinks = 0
    p = _varlen_plan(q3, k3, v3, cu_q.numel() - 1, max_q, max_k, causal, window,
                     softmax_scale, deterministic, softcap, alibi_slopes is not None,
                     sinks is not None)
    d_o = d_o.contiguous()  # O's strides (o is contiguous)
    workspace = torch.empty(max(int(p.bwd_workspace_bytes), 16), dtype=torch.uint8,
                            device=q3.device)
    with torch.cuda.device(q3.device):
        p.backward_with(q3, k3, v3, o, d_o, lse, dq, dk, dv, workspace, cu_q, cu_k, seqused_k,
                        alibi_slopes=alibi_slopes, sinks=sinks,
                        dsinks=None if sinks is None else dsinks,
                        stream=torch.cuda.current_stream(q3.device))
    return dq, dk, dv, dsinks


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                           dropout_p=0.0, softmax_scale=None, causal=False,
                           window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                           deterministic=False, return_attn_probs=False, *, seqused_k=None,
                           return_lse=False, sinks=None):
    """A packed variable-length batch in the shape of flash_attn.flash_attn_varlen_func,
    differentiable: q [total_q, heads_q, d], k and v [total_k, heads_kv, d] (CUDA,
    fp16/bf16), cu_seqlens_q / cu_seqlens_k int32 [batch + 1] offsets on q's device,
    max_seqlen_q / max_seqlen_k the longest sequences (host ints: the plan's bounds).
    seqused_k (int32 [batch]): the keys each sequence uses. Returns o [total_q, heads_q,
    d], and with return_lse=True also the LSE float32 [heads_q, total_q] (natural log,
    not differentiable). The offsets are read on the GPU only. Runs as the custom ops
    libfa2::varlen_fwd / varlen_bwd (torch.compile traces it). softcap, alibi_slopes and
    (keyword-only) sinks, float32 [heads_q]: the score variants as attention() takes
    them. Dropout and returned probabilities are refused."""
    _refuse_unsupported("flash_attn_varlen_func", dropout_p, return_attn_probs)
    torch = _torch()
    for n, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.dim() != 3:
            raise Fa2ShapeError(f"{n}: expected a 3-dim tensor [total, heads, head_dim]")
    # The dense checks, on [1, total, heads, d] views.
    q4, k4, v4 = (t.unsqueeze(0) if t.stride(-1) == 1 else t.contiguous().unsqueeze(0)
                  for t in (q, k, v))
    _check_tensors(q4, k4, v4)
    batch = cu_seqlens_q.numel() - 1 if isinstance(cu_seqlens_q, torch.Tensor) else 0
    if batch < 1:
        raise Fa2ShapeError("cu_seqlens_q: expected batch + 1 >= 2 offsets")
    _check_offsets("cu_seqlens_q", cu_seqlens_q, batch + 1, q.device)
    _check_offsets("cu_seqlens_k", cu_seqlens_k, batch + 1, q.device)
    if seqused_k is not None:
        _check_offsets("seqused_k", seqused_k, batch, q.device)
    _check_score_tensors(alibi_slopes, sinks, q.shape[1], q.device)
    window_left, window_right = (int(w) for w in window_size)
    o, lse = _custom_ops().varlen_fwd(
        q4[0], k4[0], v4[0], cu_seqlens_q, cu_seqlens_k, seqused_k, int(max_seqlen_q),
        int(max_seqlen_k), bool(causal), window_left, window_right,
        None if softmax_scale is None else float(softmax_scale), bool(deterministic),
        float(softcap), alibi_slopes, sinks)
    return (o, lse) if return_lse else o


def flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens, block_table,
                            softmax_scale=None, causal=False, window_size=(-1, -1),
                            softcap=0.0, alibi_slopes=None, k=None, v=None, rotary_cos=None,
                            rotary_sin=None, return_softmax_lse=False, *,
                            check_metadata=False, num_splits=0, sinks=None):
    """Attention over a KV cache in the shape of flash_attn.flash_attn_with_kvcache
    (forward only): q [batch, seqlen_q, heads_q, d]; k_cache / v_cache [num_pages,
    page_size, heads_kv, d] (any page size) with block_table int32 [batch,
    pages_per_seq], each sequence's pages in order; or, block_table None, a contiguous
    cache [batch, seqlen_cache, heads_kv, d] (run as one page per sequence);
    cache_seqlens int32 [batch], each sequence's key count.
    Causal masks and windows are bottom-right aligned (decode: the query rows are the
    last of each sequence). Returns o like q (and the LSE float32 [heads_q, batch *
    seqlen_q] with return_softmax_lse). softcap (0 = off), alibi_slopes and sinks
    (float32 [heads_q] on q's device; sinks: one softmax logit per query head with no
    value) as include/fa2.h defines them; so far only where the decode kernel runs (query
    heads per kv head x seqlen_q <= 16), else Fa2Unsupported. Writing new keys into the
    cache (k, v) and rotary embeddings are refused. The library checks cache_seqlens and the
    page ids on the GPU and skips a sequence that fails (its rows of o are not written);
    check_metadata=True waits for the call and raises Fa2BadMetadata naming the first
    such sequence (a host synchronisation: not for CUDA graphs). num_splits: as
    flash-attn's, 0 lets the planner split each sequence's keys (up to MAX_SPLITS) when
    the decode kernel runs; 1 never splits."""
    for name, arg in (("k", k), ("v", v), ("rotary_cos", rotary_cos),
                      ("rotary_sin", rotary_sin)):
        if arg is not None:
            raise Fa2ShapeError(f"flash_attn_with_kvcache: {name} is not supported (use None)")
    torch = _torch()
    if not isinstance(q, torch.Tensor) or q.dim() != 4:
        raise Fa2ShapeError("q: expected a 4-dim tensor [batch, seqlen_q, heads, head_dim]")
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        if not isinstance(t, torch.Tensor) or t.dim() != 4:
            raise Fa2ShapeError(f"{name}: expected [num_pages, page_size, heads_kv, head_dim]")
    if k_cache.shape != v_cache.shape:
        raise Fa2ShapeError(f"k_cache has shape {tuple(k_cache.shape)}, v_cache "
                            f"{tuple(v_cache.shape)}: they must match")
    batch, seqlen_q = q.shape[0], q.shape[1]
    q3 = (q if q.is_contiguous() else q.contiguous()).view(batch * seqlen_q, q.shape[2],
                                                             q.shape[3])
    _check_tensors(q3.unsqueeze(0), k_cache, v_cache)
    _check_offsets("cache_seqlens", cache_seqlens, batch, q.device)
    _check_score_tensors(alibi_slopes, sinks, q.shape[2], q.device)
    if block_table is None:  # a contiguous cache: sequence b is page b
        if k_cache.shape[0] != batch:
            raise Fa2ShapeError(f"k_cache: {k_cache.shape[0]} sequences for a batch of "
                                f"{batch} (block_table None: [batch, seqlen_cache, heads_kv, "
                                f"head_dim])")
        block_table = _identity_table(batch, q.device)
    if not isinstance(block_table, torch.Tensor) or block_table.dtype != torch.int32 or \
            block_table.dim() != 2 or block_table.shape[0] != batch or \
            not block_table.is_contiguous() or block_table.device != q.device:
        raise Fa2ShapeError("block_table: expected a contiguous int32 [batch, pages_per_seq] "
                            "tensor on q's device")
    num_pages, page_size = k_cache.shape[0], k_cache.shape[1]
    pages_per_seq = block_table.shape[1]
    cu_q = torch.arange(0, (batch + 1) * seqlen_q, seqlen_q, dtype=torch.int32,
                        device=q.device)
    max_splits = _max_splits(num_splits)
    key = ("paged", q.device.index, str(q.dtype), tuple(q3.shape), tuple(k_cache.shape),
           k_cache.stride(), v_cache.stride(), pages_per_seq, bool(causal),
           tuple(window_size), softmax_scale, max_splits, float(softcap),
           alibi_slopes is not None, sinks is not None)
    p = _plan_cache.get(key)
    if p is None:
        lib = library()
        problem = make_varlen_problem(
            q.dtype, q3.shape[0], 0, q3.shape[1], k_cache.shape[2], q3.shape[2], batch=batch,
            max_seqlen_q=seqlen_q, max_seqlen_k=pages_per_seq * page_size,
            k_strides=k_cache.stride()[1:3], v_strides=v_cache.stride()[1:3],
            pages=(page_size, num_pages, pages_per_seq, k_cache.stride(0),
                   v_cache.stride(0)),
            causal=causal, window=window_size, softmax_scale=softmax_scale, softcap=softcap,
            alibi=alibi_slopes is not None, sinks=sinks is not None, lib=lib)
        problem.max_splits = max_splits  # the decode kernel may split the keys
        p = lib.plan(problem, q.device.index)
        with _lock:
            if len(_plan_cache) >= _PLAN_CACHE_MAX:
                _plan_cache.clear()
            _plan_cache[key] = p
    o = torch.empty(q3.shape, dtype=q.dtype, device=q.device)
    lse = torch.empty((q3.shape[1], q3.shape[0]), dtype=torch.float32, device=q.device) \
        if return_softmax_lse else None
    workspace = torch.empty(p.workspace_bytes, dtype=torch.uint8, device=q.device)
    with torch.cuda.device(q.device):
        p.forward_with(q3, k_cache, v_cache, o, lse, cu_q, None, cache_seqlens, block_table,
                       alibi_slopes, sinks, workspace=workspace,
                       stream=torch.cuda.current_stream(q.device))
        if check_metadata:
            torch.cuda.current_stream(q.device).synchronize()
            p.varlen_check(workspace)
    o = o.view(q.shape)
    return (o, lse) if return_softmax_lse else o


_identity_tables = {}


def _identity_table(batch, device):
    """The page table [[0], [1], ...] of `batch` sequences on `device`, made once, by
    the first call outside CUDA-graph capture (the same tensor every call after: graph
    replays keep its address)."""
    torch = _torch()
    key = (device.index, batch)
    table = _identity_tables.get(key)
    if table is None:
        if torch.cuda.is_current_stream_capturing():
            raise Fa2ShapeError("flash_attn_with_kvcache without block_table: call it once "
                                "outside CUDA-graph capture first (it makes its page table "
                                "then)")
        table = torch.arange(batch, dtype=torch.int32, device=device).view(batch, 1)
        with _lock:
            _identity_tables[key] = table
    return table


def combine(o_parts, lse_parts, out_dtype=None, *, return_lse=True, lib=None):
    """fa2_combine on torch tensors: N partial results of attention over separate key
    ranges, o_parts [N, rows, heads, head_dim] (float32, float16 or bfloat16, last dim
    contiguous, other strides free) and lse_parts float32 [N, heads, rows] (natural log,
    as libfa2 returns it; -inf: the part saw no key), merged into the attention over all
    the keys: o [rows, heads, head_dim] of out_dtype (default: o_parts' dtype) and, with
    return_lse, lse float32 [heads, rows]. Asynchronous on the current stream. lib: the
    Library to call (default: library())."""
    torch = _torch()
    dtypes = {torch.float32: DTYPE_FP32, torch.float16: DTYPE_FP16,
              torch.bfloat16: DTYPE_BF16}
    if not isinstance(o_parts, torch.Tensor) or o_parts.dim() != 4 or \
            o_parts.dtype not in dtypes or not o_parts.is_cuda:
        raise Fa2ShapeError("o_parts: expected a CUDA float32/float16/bfloat16 tensor "
                            "[parts, rows, heads, head_dim]")
    n, rows, heads, d = o_parts.shape
    if not isinstance(lse_parts, torch.Tensor) or lse_parts.dtype != torch.float32 or \
            tuple(lse_parts.shape) != (n, heads, rows) or lse_parts.device != o_parts.device:
        raise Fa2ShapeError(f"lse_parts: expected float32 {(n, heads, rows)} on o_parts' "
                            "device")
    out_dtype = o_parts.dtype if out_dtype is None else out_dtype
    if out_dtype not in dtypes:
        raise Fa2ShapeError(f"out_dtype={out_dtype}: float32, float16 or bfloat16")
    if o_parts.stride(-1) != 1:
        o_parts = o_parts.contiguous()
    lib = lib or library()
    p = CombineProblem()
    lib.cdll.fa2_combine_problem_init(ctypes.byref(p), dtypes[o_parts.dtype], dtypes[out_dtype],
                                      n, rows, heads, d)
    p.o_parts_part_stride, p.o_parts_row_stride, p.o_parts_head_stride = o_parts.stride()[:3]
    p.lse_parts_part_stride, p.lse_parts_head_stride, p.lse_parts_row_stride = \
        lse_parts.stride()
    o = torch.empty((rows, heads, d), dtype=out_dtype, device=o_parts.device)
    lse = torch.empty((heads, rows), dtype=torch.float32, device=o_parts.device) \
        if return_lse else None
    with torch.cuda.device(o_parts.device):
        lib.check(lib.cdll.fa2_combine(ctypes.byref(p), _ptr(o_parts), _ptr(lse_parts),
                                       _ptr(o), _ptr(lse),
                                       _stream(torch.cuda.current_stream(o_parts.device))),
                  "fa2_combine")
    return (o, lse) if return_lse else o
