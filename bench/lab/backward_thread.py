#!/usr/bin/env python3
"""One question: does libfa2's backward cost more inside autograd (on its device thread,
through a Python Function's backward) than called directly? Times, per step, an identity
torch.autograd.Function's forward + backward with nothing in its backward, then with
libfa2.backward (on fixed tensors) in its backward, and libfa2.backward called directly;
and SDPA flash's forward + backward beside libfa2.attention's.

    FA2_LIBRARY=build/libfa2.so python3 bench/lab/backward_thread.py
"""
import os
import sys
import timeit

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "python"))
import torch  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

import libfa2  # noqa: E402


def main():
    q, k, v = (torch.randn(1, 128, 8, 64, device="cuda", dtype=torch.bfloat16)
               for _ in range(3))
    g = torch.randn_like(q)
    o, lse = libfa2.forward(q, k, v, return_lse=True)
    qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))
    qt, kt, vt = (t.transpose(1, 2) for t in (qg, kg, vg))

    class Identity(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.view_as(x)

        @staticmethod
        def backward(ctx, d):
            return d

    class WithBackward(Identity):
        @staticmethod
        def backward(ctx, d):
            return libfa2.backward(d, q, k, v, o, lse)[0]

    steps = {
        "identity Function fwd+bwd": lambda: Identity.apply(qg).backward(g),
        "identity Function, libfa2.backward in its backward":
            lambda: WithBackward.apply(qg).backward(g),
        "libfa2.backward direct": lambda: libfa2.backward(g, q, k, v, o, lse),
        "libfa2.attention fwd+bwd": lambda: libfa2.attention(qg, kg, vg).backward(g),
        "SDPA flash fwd+bwd": lambda: torch.nn.functional.scaled_dot_product_attention(
            qt, kt, vt).backward(g.transpose(1, 2)),
    }
    print(f"{torch.cuda.get_device_name()}; us per step, best of 5 runs of 2000")
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        for name, fn in steps.items():
            fn()
            best = min(timeit.repeat(fn, number=2000, repeat=5)) / 2000 * 1e6
            torch.cuda.synchronize()
            print(f"{name:52} {best:7.1f}")


if __name__ == "__main__":
    main()
