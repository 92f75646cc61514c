"""`flash_attn` bound to libfa2, for running flash-attn's own tests (bench/conformance).

The public functions come from libfa2.flash_attn_interface; every other submodule
(bert_padding, layers.rotary, ops) resolves to the flash-attention checkout named by
FA2_FLASH_ATTN_CHECKOUT, whose pure-PyTorch helpers the tests import.
"""
import os

from libfa2.flash_attn_interface import (  # noqa: F401
    flash_attn_func, flash_attn_kvpacked_func, flash_attn_qkvpacked_func,
    flash_attn_varlen_func, flash_attn_varlen_kvpacked_func, flash_attn_varlen_qkvpacked_func,
    flash_attn_with_kvcache)

__version__ = "libfa2"
__path__.append(os.path.join(os.environ["FA2_FLASH_ATTN_CHECKOUT"], "flash_attn"))
