"""flash_attn.flash_attn_interface bound to libfa2's (bench/conformance)."""
from libfa2.flash_attn_interface import *  # noqa: F401,F403

USE_TRITON_ROCM = False  # the tests branch on it; libfa2 is CUDA


def _get_block_size_n(*args, **kwargs):
    """flash-attn's kernel tile, used only to decode its dropout masks: the dropout cases
    are deselected (bench/conformance/conformance_plugin.py), so nothing may reach this."""
    raise NotImplementedError("a flash-attn kernel internal, not part of libfa2")
