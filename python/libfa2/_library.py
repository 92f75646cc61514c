"""Finding and loading libfa2.so, and the thin Library wrapper around it."""
import ctypes
import ctypes.util
import glob
import os
import sys
import threading

from ._cdefs import (DTYPE_BF16, DTYPE_FP32, BackwardArgs, CombineProblem, DeviceInfo,
                     ForwardArgs, PlanStruct, Problem, _DTYPE_NAMES, _i64)
from .errors import Fa2LibraryNotFound, Fa2ShapeError, exception_for

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
        if hasattr(c, "fa2_plan_describe"):  # not in a library older than the binding
            c.fa2_plan_describe.argtypes = [ctypes.POINTER(PlanStruct), ctypes.c_char_p, sz,
                                            ctypes.POINTER(sz)]
            c.fa2_plan_describe.restype = ctypes.c_int
        if hasattr(c, "fa2_varlen_check"):  # not in a library older than the binding
            c.fa2_varlen_check.argtypes = [ctypes.POINTER(PlanStruct), vp, sz,
                                           ctypes.POINTER(_i64), ctypes.POINTER(ctypes.c_int)]
            c.fa2_varlen_check.restype = ctypes.c_int
        if hasattr(c, "fa2_cache_write"):
            c.fa2_cache_write.argtypes = [ctypes.POINTER(PlanStruct), vp, vp, _i64, _i64, vp,
                                          vp, vp, vp]
            c.fa2_cache_write.restype = ctypes.c_int
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
        from .plans import Plan
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


def _dtype_code(dtype):
    if isinstance(dtype, int):
        return dtype  # passed through: the library validates it
    name = str(dtype).replace("torch.", "")
    if name in _DTYPE_NAMES:
        return _DTYPE_NAMES[name]
    raise Fa2ShapeError(f"dtype={dtype!r} is not supported (fp16 or bf16)")
