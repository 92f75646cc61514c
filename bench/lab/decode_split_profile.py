#!/usr/bin/env python3
"""One question: where does a split decode step's time go, in two libraries? For each
library (alternating rounds): the event-timed call (host path and GPU, as
bench/variants_compare.py times it), the same calls replayed from a CUDA graph (GPU
only), and each kernel's duration from the profiler (the decode kernel, the merge).

    python3 bench/lab/decode_split_profile.py --lib a/libfa2.so --base-lib b/libfa2.so
"""
import argparse
import collections
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from sdpa_compare import fa2lib, load_library, random_sets, time_ms  # noqa: E402


def decode_call(lib, q, k):
    problem = fa2lib.make_problem(q.dtype, q.shape, k.shape, causal=True, lib=lib)
    problem.max_splits = fa2lib.MAX_SPLITS
    plan = lib.plan(problem, q.device.index)
    ws = torch.empty(max(plan.workspace_bytes, 1), dtype=torch.uint8, device="cuda")
    return (lambda q, k, v, o: plan.forward_with(
        q, k, v, o, workspace=ws, stream=torch.cuda.current_stream())), plan


def graph_us(fn, args, calls=20, reps=20):
    """Median time of one call replayed from a graph of `calls` calls."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn(*args)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn(*args)
    g.replay()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3 / calls)
    return statistics.median(times)


def kernel_us(fn, args, calls=50):
    """Mean GPU time of each kernel over `calls` calls (profiler), by name."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn(*args)
        torch.cuda.synchronize()
    per = collections.defaultdict(list)
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            per[e.name[:60]].append(e.device_time)
    return {name: statistics.mean(t) for name, t in per.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--base-lib", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    libs = {"lib": load_library(args.lib), "base": load_library(args.base_lib)}
    torch.manual_seed(0)
    for b, sk in ((1, 8192), (1, 32768), (16, 8192)):
        sets = random_sets(b, 1, sk, 32, 8, 128, torch.bfloat16)
        calls = {n: decode_call(lib, sets[0][0], sets[0][1]) for n, lib in libs.items()}
        ev = collections.defaultdict(list)
        gr = collections.defaultdict(list)
        for _ in range(args.rounds):
            for n, (fn, _) in calls.items():
                ev[n].append(time_ms(fn, sets, warmup=3, iters=30) * 1e3)
                try:
                    gr[n].append(graph_us(fn, sets[0]))
                except RuntimeError as e:  # capture refused: the event times still stand
                    print(f"  {n}: graph capture failed: {e}")
                    gr[n].append(float("nan"))
        print(f"decode {b} x {sk} GQA 32:8 d128 (splits: "
              + ", ".join(f"{n} {c[1].splits}" for n, c in calls.items()) + ")")
        for n, (fn, _) in calls.items():
            try:
                ker = kernel_us(fn, sets[0])
            except Exception as e:  # the profiler's names or fields differ: say so
                ker = {f"profiler failed ({e})": 0.0}
            print(f"  {n:5s} event {statistics.median(ev[n]):7.2f} us  graph "
                  f"{statistics.median(gr[n]):7.2f} us  kernels: "
                  + "; ".join(f"{k} {v:.2f} us" for k, v in sorted(ker.items())))


if __name__ == "__main__":
    main()
