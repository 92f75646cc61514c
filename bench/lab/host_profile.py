#!/usr/bin/env python3
"""One question: where do the microseconds of a cached Python call go? Runs each entry
point of bench/host_overhead.py (forward, flash_attn_func, the decode step through
flash_attn_with_kvcache, backward, attention forward + backward) many times under
cProfile after a warm-up, and prints each function's own time per call, largest first, beside the whole call's time measured
without the profiler.

    FA2_LIBRARY=build/libfa2.so python3 bench/lab/host_profile.py [--calls 20000] [--top 15]
"""
import argparse
import cProfile
import os
import pstats
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "python"))
import torch  # noqa: E402

import libfa2  # noqa: E402
from libfa2 import flash_attn_interface as fai  # noqa: E402


def entries():
    dev, bf = "cuda", torch.bfloat16
    q, k, v = (torch.randn(1, 128, 8, 64, device=dev, dtype=bf) for _ in range(3))
    dq = torch.randn(4, 1, 8, 64, device=dev, dtype=bf)
    k_cache, v_cache = (torch.randn(4, 256, 2, 64, device=dev, dtype=bf) for _ in range(2))
    lens = torch.full((4,), 200, dtype=torch.int32, device=dev)
    o, lse = libfa2.forward(q, k, v, return_lse=True)
    g = torch.randn_like(q)
    qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))

    def train():
        with torch.enable_grad():
            libfa2.attention(qg, kg, vg).backward(g)
    return [("forward", lambda: libfa2.forward(q, k, v)),
            ("backward", lambda: libfa2.backward(g, q, k, v, o, lse)),
            ("attention fwd+bwd (the backward's Python runs on autograd's device thread, "
             "outside the profile)", train),
            ("flash_attn_func", lambda: fai.flash_attn_func(q, k, v)),
            ("flash_attn_with_kvcache",
             lambda: fai.flash_attn_with_kvcache(dq, k_cache, v_cache, cache_seqlens=lens))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--top", type=int, default=15)
    args = ap.parse_args()
    with torch.no_grad():
        for name, call in entries():
            for _ in range(200):
                call()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(args.calls):
                call()
            plain = (time.perf_counter() - t0) / args.calls * 1e6
            torch.cuda.synchronize()
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(args.calls):
                call()
            prof.disable()
            torch.cuda.synchronize()
            print(f"\n== {name}: {plain:.1f} us per call without the profiler; own time per "
                  "call under it (the profiler adds its own):")
            stats = pstats.Stats(prof)
            rows = sorted(stats.stats.items(), key=lambda kv: -kv[1][2])[:args.top]
            for (path, line, func), (_, ncalls, tottime, _, _) in rows:
                print(f"  {tottime / args.calls * 1e6:7.2f} us  {ncalls / args.calls:5.1f}x  "
                      f"{os.path.basename(path)}:{line} {func}")


if __name__ == "__main__":
    main()
