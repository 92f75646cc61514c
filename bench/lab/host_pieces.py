#!/usr/bin/env python3
"""One question: what each step of a cached Python call costs the host (us per step), to
tell which ones bench/host_overhead.py's totals are made of: tensor attribute reads, the
storage check, an output allocation, the current device and stream, the ctypes call
(fa2_forward refused at once on a NULL plan: argument conversion and the C entry), the
signature hash, and torch.autograd.Function round trips (with and without the
backward through autograd's engine) beside a C++ op's.

    FA2_LIBRARY=build/libfa2.so python3 bench/lab/host_pieces.py
"""
import os
import sys
import timeit

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "python"))
import libfa2  # noqa: E402


class Identity(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        return g


def main():
    q = torch.randn(1, 128, 8, 64, device="cuda", dtype=torch.bfloat16)
    qg = q.clone().requires_grad_()
    kg, vg = (q.clone().requires_grad_() for _ in range(2))
    qt, qgt, kgt, vgt = (t.transpose(1, 2) for t in (q, qg, kg, vg))

    def sdpa_flash(*qkv):  # (main runs every step inside sdpa_kernel([FLASH_ATTENTION]))
        return torch.nn.functional.scaled_dot_product_attention(*qkv)
    lib = libfa2.library()
    fwd = lib.cdll.fa2_forward
    key = ("forward", (q.shape, q.stride(), q.dtype, 0), (q.shape, q.stride(), q.dtype, 0),
           (q.shape, q.stride(), q.dtype, 0), (), (), (), (), False, False, (-1, -1), None,
           False, 0, 0.0, None)
    cache = {key: 1}
    steps = {
        "t.shape": lambda: q.shape,
        "t.stride()": lambda: q.stride(),
        "t.dtype": lambda: q.dtype,
        "t.get_device()": lambda: q.get_device(),
        "t.data_ptr()": lambda: q.data_ptr(),
        "t.storage_offset()": lambda: q.storage_offset(),
        "t.untyped_storage().nbytes()": lambda: q.untyped_storage().nbytes(),
        "torch.empty(shape, dtype, device)": lambda: torch.empty(q.shape, dtype=q.dtype,
                                                                 device=q.device),
        "q.new_empty(shape)": lambda: q.new_empty(q.shape),
        "torch.empty_like(q)": lambda: torch.empty_like(q),
        "q.new_empty(lse shape, dtype=float32)": lambda: q.new_empty((1, 8, 128),
                                                                   dtype=torch.float32),
        "q.new_empty_strided(shape, strides)": lambda: q.new_empty_strided(q.shape,
                                                                           q.stride()),
        "torch.empty_strided(..., dtype, device)": lambda: torch.empty_strided(
            q.shape, q.stride(), dtype=q.dtype, device=q.device),
        "torch._C._cuda_getDevice()": lambda: torch._C._cuda_getDevice(),
        "torch._C._cuda_getCurrentRawStream(0)": lambda: torch._C._cuda_getCurrentRawStream(0),
        "torch.cuda.current_stream()": lambda: torch.cuda.current_stream(),
        "with torch.cuda.device(0)": lambda: torch.cuda.device(0).__enter__(),
        "ctypes fa2_forward(NULL, 8 args)": lambda: fwd(None, 1, 2, 3, 4, 5, 0, 0, 0),
        "ctypes fa2_version()": lambda: lib.cdll.fa2_version(),
        "dict lookup of a 16-part signature": lambda: cache.get(key),
        "torch.is_grad_enabled()": lambda: torch.is_grad_enabled(),
        "torch.compiler.is_compiling()": lambda: torch.compiler.is_compiling(),
        "autograd.Function apply (identity)": lambda: Identity.apply(qg),
        "autograd.Function apply + backward": lambda: Identity.apply(qg).backward(q),
        "C++ op + backward (x.clone())": lambda: qg.clone().backward(q),
        "libfa2.attention forward, grad on": lambda: libfa2.attention(qg, kg, vg),
        "SDPA forward, grad on (flash)": lambda: sdpa_flash(qgt, kgt, vgt),
        "libfa2.attention fwd+bwd": lambda: libfa2.attention(qg, kg, vg).backward(q),
        "SDPA fwd+bwd (flash)": lambda: sdpa_flash(qgt, kgt, vgt).backward(qt),
        "torch.empty(n, uint8)": lambda: torch.empty(4096, dtype=torch.uint8,
                                                      device=q.device),
    }
    print(f"{torch.cuda.get_device_name()}; torch {torch.__version__}; us per step "
          "(best of 5 runs of 4000)")
    for name, fn in steps.items():
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
            best = min(timeit.repeat(fn, number=4000, repeat=5)) / 4000 * 1e6
        print(f"{name:42} {best:7.3f}")
        torch.cuda.synchronize()


if __name__ == "__main__":
    main()
