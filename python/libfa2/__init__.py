"""libfa2 from Python: a pure-ctypes binding (the package libfa2).

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

The package, by role: _cdefs (the C API's constants and struct mirrors), errors (the
exceptions), _library (finding and loading libfa2.so), plans (problems and plans on raw
pointers), ops (torch tensors: forward, backward, autograd, packed and paged batches,
combine), _calls (the per-signature call cache that repeated calls take),
flash_attn_interface (flash-attn's names and signatures). `python -m libfa2`
checks an installation.
"""
from . import _cdefs, errors
from ._cdefs import *  # noqa: F401,F403  (constants, limits, struct mirrors)
from ._cdefs import __all__ as _cdefs_all
from ._library import (Library, _package_version, build_info, candidate_paths, device_info,
                       library, load_library, make_device_info, status_string, version)
from .errors import *  # noqa: F401,F403
from .errors import __all__ as _errors_all
from .flash_attn_interface import (flash_attn_func, flash_attn_kvpacked_func,
                                   flash_attn_qkvpacked_func, flash_attn_varlen_func,
                                   flash_attn_varlen_kvpacked_func,
                                   flash_attn_varlen_qkvpacked_func, flash_attn_with_kvcache)
from .ops import (attention, attention_with_lse, backward, cache_write, combine, forward,
                  paged_forward)
from .plans import Plan, make_problem, make_varlen_problem, plan
from ._tensors import plan_for, repeats_addresses

__version__ = _package_version()

__all__ = _cdefs_all + _errors_all + [
    "Library", "build_info", "candidate_paths", "device_info", "library", "load_library",
    "make_device_info", "status_string", "version",
    "Plan", "make_problem", "make_varlen_problem", "plan", "plan_for", "repeats_addresses",
    "attention", "attention_with_lse", "backward", "cache_write", "combine", "forward",
    "paged_forward",
    "flash_attn_func", "flash_attn_kvpacked_func", "flash_attn_qkvpacked_func",
    "flash_attn_varlen_func", "flash_attn_varlen_kvpacked_func",
    "flash_attn_varlen_qkvpacked_func", "flash_attn_with_kvcache",
]
del _cdefs, errors
