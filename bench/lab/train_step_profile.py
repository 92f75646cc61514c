#!/usr/bin/env python3
"""One question: where does a tiny training step's host time go, libfa2.attention
against SDPA flash? Profiles (torch.profiler, CPU activities: every thread, autograd's
device thread included) `--steps` forward + backward steps of each after a warm-up and
prints, per step, the ops and runtime calls with the most self CPU time, and the kernel
launches counted.

    FA2_LIBRARY=build/libfa2.so python3 bench/lab/train_step_profile.py [--steps 300]
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "python"))
import torch  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

import libfa2  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--top", type=int, default=22)
    args = ap.parse_args()
    q, k, v = (torch.randn(1, 128, 8, 64, device="cuda", dtype=torch.bfloat16,
                           requires_grad=True) for _ in range(3))
    g = torch.randn_like(q)
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
    gt = g.transpose(1, 2)
    steps = {
        "libfa2": lambda: libfa2.attention(q, k, v).backward(g),
        "sdpa flash": lambda: torch.nn.functional.scaled_dot_product_attention(
            qt, kt, vt).backward(gt),
    }
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        for name, step in steps.items():
            for _ in range(50):
                step()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(args.steps):
                step()
            plain = (time.perf_counter() - t0) / args.steps * 1e6
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                for _ in range(args.steps):
                    step()
                torch.cuda.synchronize()
            rows = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)
            print(f"\n== {name}: {plain:.1f} us per step without the profiler; per step "
                  "under it: self CPU us, calls")
            for e in rows[:args.top]:
                print(f"  {e.self_cpu_time_total / args.steps:8.2f} "
                      f"{e.count / args.steps:5.1f}x  {e.key[:90]}")


if __name__ == "__main__":
    main()
