#!/usr/bin/env python3
"""One backward shape, for a profiler: libfa2's backward, then SDPA's (flash, cudnn),
each a few times on the same random inputs (16k tokens, hidden 2048, bf16).

    ncu --clock-control none -k regex:'dkdv|dq_|dot_do|flash_bwd|cudnn' \
        python3 bench/lab/profile_bwd.py --lib build/libfa2.so --d 64 --seqlen 1024 --causal 1
"""
import argparse
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

# python/libfa2, the one ctypes binding; sdpa_compare's Fa2Forward runs its Plan.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import libfa2 as fa2lib  # noqa: E402
from sdpa_compare import Fa2Forward  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="build/libfa2.so")
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--seqlen", type=int, default=1024)
    ap.add_argument("--causal", type=int, default=1)
    ap.add_argument("--calls", type=int, default=2)
    ap.add_argument("--backends", default="fa2,flash,cudnn")
    args = ap.parse_args()
    s, d, causal = args.seqlen, args.d, bool(args.causal)
    b, h = 16384 // s, 2048 // d
    dt = torch.bfloat16
    q, k, v, d_o = (torch.randn(b, s, h, d, device="cuda", dtype=dt) for _ in range(4))
    backends = args.backends.split(",")
    if "fa2" in backends:
        fa2 = Fa2Forward(fa2lib.load_library(args.lib), q, k, causal)
        o = torch.empty_like(q)
        lse = torch.empty(b, h, s, device="cuda", dtype=torch.float32)
        fa2(q, k, v, o, lse)
        ws = torch.empty(max(fa2.plan.bwd_workspace_bytes, 1), device="cuda", dtype=torch.uint8)
        grads = [torch.empty_like(x) for x in (q, k, v)]
        for _ in range(args.calls):
            fa2.backward(q, k, v, o, lse, d_o, *grads, ws)
    for name, be in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
        if name not in backends:
            continue
        qr, kr, vr = (x.detach().clone().requires_grad_() for x in (q, k, v))
        with sdpa_kernel([be]):
            out = F.scaled_dot_product_attention(qr.transpose(1, 2), kr.transpose(1, 2),
                                                 vr.transpose(1, 2), is_causal=causal)
        for _ in range(args.calls):
            torch.autograd.grad(out, (qr, kr, vr), d_o.transpose(1, 2), retain_graph=True)
    torch.cuda.synchronize()
    print(f"profile_bwd: b={b} h={h} s={s} d={d} causal={int(causal)} backends={args.backends} done")


if __name__ == "__main__":
    main()
