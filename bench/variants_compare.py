#!/usr/bin/env python3
"""What the score variants (softcap, ALiBi, sinks; include/fa2.h) cost: each variant's
plan against the plain plan on the same tensors, in one process, forward, and backward
on the prefill shapes.

Per shape, the plain call and each variant are timed in alternation for --rounds rounds
(each a median over event-timed calls, as in sdpa_compare.py), so drift hits all alike;
the figure printed is median(variant time) / median(plain time), with the range of the
per-round ratios. Shapes: prefill at bf16, d = 128, causal (the issue's 8k) and decode
steps (GQA 32:8, the decode kernel). With --base-lib, a second library's plain and
variant calls join the same rounds, and each call's speed over its base is printed too
(median(base time) / median(time)).

    python3 bench/variants_compare.py --lib build/libfa2.so [--base-lib old.so] [--csv f]
"""
import argparse
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sdpa_compare import (alternate, fa2lib, load_library, random_sets, ratio,  # noqa: E402
                          write_csv)

# softcap 30 (Grok's) and 50 (Gemma 2's) are at most the largest softcap the Hopper
# forward offsets by a fixed offset (FA2_MAX_BOUNDED_SOFTCAP), 60 above it: a running
# maximum. alibi: slopes uniform in [0, 0.25); alibi schedule: ALiBi's own, 2^(-8 i / heads)
# for heads i = 1..heads (the steepest near 1, the shallowest near 0)
VARIANTS = (("softcap", dict(softcap=30.0)), ("softcap 50", dict(softcap=50.0)),
            ("softcap 60", dict(softcap=60.0)),
            ("alibi", dict(alibi=1)), ("alibi schedule", dict(alibi=2)),
            ("sinks", dict(sinks=1)),
            ("all three", dict(softcap=30.0, alibi=1, sinks=1)))


def alibi_slopes(fields, slopes, schedule):
    """The slopes a variant's fields ask for (None: ALiBi off)."""
    return {1: slopes, 2: schedule}.get(fields.get("alibi"))


def plan_with(lib, q, k, causal, **variants):
    problem = fa2lib.make_problem(q.dtype, q.shape, k.shape, causal=causal, lib=lib,
                                  **variants)
    problem.max_splits = fa2lib.MAX_SPLITS
    return lib.plan(problem, q.device.index)


def forward_runs(lib, sets, causal, variants, slopes, schedule, sinks):
    """The plain plan's call and each variant's, on lib; and the plain plan."""
    plain = plan_with(lib, sets[0][0], sets[0][1], causal)
    ws_bytes = max(plain.workspace_bytes, 1)
    # The plain plan through forward_with too: the same host path as the variants', whose
    # Python cost shows at decode sizes, where a call's host time nears its GPU time
    runs = [lambda q, k, v, o, p=plain, ws=torch.empty(ws_bytes, dtype=torch.uint8,
                                                        device="cuda"):
            p.forward_with(q, k, v, o, workspace=ws)]
    for _, fields in variants:
        p = plan_with(lib, sets[0][0], sets[0][1], causal, **fields)
        ws = torch.empty(max(p.workspace_bytes, 1), dtype=torch.uint8, device="cuda")
        runs.append(lambda q, k, v, o, p=p, ws=ws, f=fields: p.forward_with(
            q, k, v, o, alibi_slopes=alibi_slopes(f, slopes, schedule),
            sinks=sinks if f.get("sinks") else None, workspace=ws))
    return runs, plain


def print_over_base(kind, name, labels, times, base_times):
    """Each call's speed over the base library's same call (same rounds)."""
    for label, t, b in zip(labels, times, base_times):
        speed, lo, hi = ratio(b, t)
        print(f"{kind} {label:10s} {name:34s} over base {speed:.3f} (rounds {lo:.3f}..{hi:.3f})")


def shape_case(libs, name, b, sq, sk, hq, hkv, d, causal, rounds, iters, variants, backward):
    """Each variant's forward (and, prefill, backward) over the plain one's; libs: this
    tree's library, then optionally the base."""
    dt = torch.bfloat16
    sets = random_sets(b, sq, sk, hq, hkv, d, dt)
    slopes = torch.rand(hq, device="cuda") * 0.25
    schedule = torch.exp2(-8.0 * torch.arange(1, hq + 1, device="cuda") / hq)
    sinks = torch.rand(hq, device="cuda") * 4.0 - 2.0
    runs, plain = forward_runs(libs[0], sets, causal, variants, slopes, schedule, sinks)
    calls = len(runs)
    if len(libs) > 1:
        runs += forward_runs(libs[1], sets, causal, variants, slopes, schedule, sinks)[0]
    times = alternate(runs, sets, rounds, iters)
    rows = []
    if sq > 1 and backward:
        rows += backward_costs(libs, name, sets, causal, (slopes, schedule), sinks,
                               rounds, iters, variants)
    if len(libs) > 1:
        print_over_base("forward", name, ["plain"] + [v for v, _ in variants],
                        times[:calls], times[calls:])
    base = statistics.median(times[0])
    print(f"{name}: plain {base * 1e3:.1f} us (decode splits {plain.splits})")
    for (variant, _), t in zip(variants, times[1:]):
        cost, lo, hi = ratio(t, times[0])
        print(f"variant {variant:10s} {name:34s} time / plain {cost:.3f} "
              f"(rounds {lo:.3f}..{hi:.3f})")
        rows.append(dict(shape=name, variant=variant, plain_us=round(base * 1e3, 2),
                         variant_us=round(statistics.median(t) * 1e3, 2),
                         ratio=round(cost, 4)))
    return rows


def backward_costs(libs, name, sets, causal, slopes, sinks, rounds, iters, variants):
    """Each variant's backward against the plain one (each from its own forward's LSE);
    slopes: (uniform, schedule)."""
    q0, k0 = sets[0][0], sets[0][1]
    dsinks = torch.empty_like(sinks)
    runs, bsets = [], []
    for lib, fields in [(lib, f) for lib in libs for f in [{}] + [f for _, f in variants]]:
        p = plan_with(lib, q0, k0, causal, **fields)
        tensors = dict(alibi_slopes=alibi_slopes(fields, *slopes),
                       sinks=sinks if fields.get("sinks") else None)
        one = []
        for q, k, v, o in sets:
            lse = torch.empty(q.shape[0], q.shape[2], q.shape[1], device="cuda",
                              dtype=torch.float32)
            p.forward_with(q, k, v, o, lse, **tensors)
            ws = torch.empty(p.bwd_workspace_bytes, dtype=torch.uint8, device="cuda")
            one.append((q, k, v, o.clone(), torch.randn_like(q), lse, torch.empty_like(q),
                        torch.empty_like(k), torch.empty_like(v), ws))
        bsets.append(one)
        runs.append(lambda *a, p=p, t=tensors: p.backward_with(
            *a, dsinks=dsinks if t["sinks"] is not None else None, **t))
    times = alternate(runs, bsets, rounds, iters, per_fn_sets=True)
    calls = len(variants) + 1
    if len(libs) > 1:
        print_over_base("backward", name, ["plain"] + [v for v, _ in variants],
                        times[:calls], times[calls:])
    times = times[:calls]
    rows = []
    for (variant, _), t in zip(variants, times[1:]):
        cost, lo, hi = ratio(t, times[0])
        print(f"backward {variant:10s} {name:34s} time / plain {cost:.3f} "
              f"(rounds {lo:.3f}..{hi:.3f})")
        rows.append(dict(shape=name, variant=variant + " backward",
                         plain_us=round(statistics.median(times[0]) * 1e3, 2),
                         variant_us=round(statistics.median(t) * 1e3, 2), ratio=round(cost, 4)))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default=os.environ.get("FA2_LIBRARY", "build/libfa2.so"))
    ap.add_argument("--base-lib", help="a second libfa2.so timed in the same rounds")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--csv")
    ap.add_argument("--variants", help="comma-separated names of VARIANTS (default: all)")
    ap.add_argument("--prefill-only", action="store_true", help="no decode shapes")
    ap.add_argument("--no-backward", action="store_true")
    args = ap.parse_args()
    names = args.variants.split(",") if args.variants else [n for n, _ in VARIANTS]
    unknown = set(names) - {n for n, _ in VARIANTS}
    if unknown:
        ap.error(f"unknown variants: {', '.join(sorted(unknown))}")
    variants = [(n, f) for n, f in VARIANTS if n in names]
    libs = [load_library(args.lib)] + ([load_library(args.base_lib)] if args.base_lib else [])
    torch.manual_seed(0)
    rows = []
    for name, shape in (("prefill 2 x 8k causal h16 d128", (2, 8192, 8192, 16, 16, 128, True)),
                        ("prefill 1 x 8k causal GQA 32:8", (1, 8192, 8192, 32, 8, 128, True)),
                        ("decode 1 x 8k GQA 32:8", (1, 1, 8192, 32, 8, 128, True)),
                        ("decode 16 x 8k GQA 32:8", (16, 1, 8192, 32, 8, 128, True))):
        if args.prefill_only and shape[1] == 1:
            continue
        rows += shape_case(libs, name, *shape, args.rounds, args.iters, variants,
                           not args.no_backward)
    if args.csv:
        write_csv(args.csv, rows)


if __name__ == "__main__":
    main()
