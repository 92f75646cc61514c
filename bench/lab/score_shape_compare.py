#!/usr/bin/env python3
"""Whether the forward's time depends on the shape of the scores, not only on the
problem: the plain plan on random Q, K against the plain plan on Q, K whose scores fall
linearly with the distance to the diagonal (as ALiBi makes them: far tiles' P all but
zero), and the ALiBi and softcap 30 plans on random Q, K, in one process
(bench/variants_compare.py's alternation). Each case then runs on its own for a few
seconds while nvidia-smi samples the SM clock and the power draw, to tell a
data-dependent clock from a slower kernel.

    python3 bench/lab/score_shape_compare.py --lib build/libfa2.so
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from sdpa_compare import alternate, fa2lib, load_library, random_sets, ratio  # noqa: E402


def decaying_qk(b, s, hq, hkv, d, decay, dt):
    """Q, K with scale q_i.k_j = decay * j plus noise of about 0.7: along a fixed unit
    vector u, Q rows have length 8 and key j's has length decay * j / (8 scale)."""
    scale = d ** -0.5
    u = torch.ones(d, device="cuda") / d ** 0.5
    q = 8.0 * u + 0.1 * torch.randn(b, s, hq, d, device="cuda")
    j = torch.arange(s, device="cuda", dtype=torch.float32).view(1, s, 1, 1)
    k = (decay * j / (8.0 * scale)) * u + torch.randn(b, s, hkv, d, device="cuda")
    return q.to(dt), k.to(dt)


def sampled(fn, seconds):
    """Runs fn for about `seconds` under nvidia-smi; median SM clock (MHz), power (W)."""
    smi = subprocess.Popen(["nvidia-smi", "--query-gpu=clocks.sm,power.draw",
                            "--format=csv,noheader,nounits", "-lms", "100"],
                           stdout=subprocess.PIPE, text=True)
    t_end = time.time() + seconds
    while time.time() < t_end:
        for _ in range(20):
            fn()
        torch.cuda.synchronize()
    smi.terminate()
    out = smi.communicate()[0]
    rows = [line.split(",") for line in out.strip().splitlines()[3:]]  # past the ramp
    clocks = [float(r[0]) for r in rows if len(r) == 2]
    watts = [float(r[1]) for r in rows if len(r) == 2]
    return (statistics.median(clocks) if clocks else float("nan"),
            statistics.median(watts) if watts else float("nan"))


def shape_case(lib, name, b, s, hq, hkv, d, decay, rounds, iters):
    dt = torch.bfloat16
    rand_sets = random_sets(b, s, s, hq, hkv, d, dt)
    decay_sets = [decaying_qk(b, s, hq, hkv, d, decay, dt) + (v, torch.empty_like(o))
                  for _, _, v, o in rand_sets]
    slopes = torch.rand(hq, device="cuda") * 0.25
    q0, k0 = rand_sets[0][0], rand_sets[0][1]
    plans = {}
    for key, fields in (("plain", {}), ("alibi", dict(alibi=1)),
                        ("softcap", dict(softcap=30.0))):
        problem = fa2lib.make_problem(dt, q0.shape, k0.shape, causal=True, lib=lib, **fields)
        plans[key] = lib.plan(problem, q0.device.index)
    ws = torch.empty(max(p.workspace_bytes for p in plans.values()) + 1, dtype=torch.uint8,
                     device="cuda")
    cases = (("plain, random scores", plans["plain"], None, rand_sets),
             (f"plain, scores falling {decay} per key", plans["plain"], None, decay_sets),
             ("alibi (slopes in [0, 0.25)), random scores", plans["alibi"], slopes, rand_sets),
             ("softcap 30, random scores", plans["softcap"], None, rand_sets))
    runs = [lambda q, k, v, o, p=p, a=a: p.forward_with(q, k, v, o, alibi_slopes=a,
                                                        workspace=ws)
            for _, p, a, _ in cases]
    sets = [c[3] for c in cases]
    times = alternate(runs, sets, rounds, iters, per_fn_sets=True)
    base = statistics.median(times[0])
    print(f"{name}: plain on random scores {base * 1e3:.1f} us")
    for (label, p, a, st), t in zip(cases, times):
        cost, lo, hi = ratio(t, times[0])
        q, k, v, o = st[0]
        mhz, watts = sampled(lambda: p.forward_with(q, k, v, o, alibi_slopes=a, workspace=ws),
                             3.0)
        print(f"  {label:44s} time / plain {cost:.3f} (rounds {lo:.3f}..{hi:.3f}), "
              f"alone: SM clock {mhz:.0f} MHz, {watts:.0f} W")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default=os.environ.get("FA2_LIBRARY", "build/libfa2.so"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--decay", type=float, default=0.1, help="score fall per key")
    args = ap.parse_args()
    lib = load_library(args.lib)
    torch.manual_seed(0)
    for name, shape in (("prefill 2 x 8k causal h16 d128", (2, 8192, 16, 16, 128)),
                        ("prefill 1 x 8k causal GQA 32:8", (1, 8192, 32, 8, 128))):
        shape_case(lib, name, *shape, args.decay, args.rounds, args.iters)


if __name__ == "__main__":
    main()
