#!/usr/bin/env python3
"""Two builds of libfa2 in one process: this tree's library (--lib) against an older
one (--base), forward and backward, per shape.

Both libraries are loaded through python/libfa2 (their public structs must agree, which
the binding checks) and run on the same tensors. Per shape, the two are timed in
alternation for --rounds rounds (each a median over event-timed calls, as in
sdpa_compare.py), so that clock and thermal drift hit both alike; the ratio printed is
median(base time) / median(lib time), i.e. lib speed over base speed, and `spread` is
the range of the per-round ratios. A second copy of --lib can stand in for --base to
measure the harness's own noise.

    python3 bench/lab/ab_compare.py --lib build/libfa2.so --base old/libfa2.so [--csv f]
"""
import argparse
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from sdpa_compare import Fa2Forward, alternate, fa2lib, random_sets, ratio  # noqa: E402


def load_binding(directory):
    """The libfa2 Python package in `directory` (an older tree's python/libfa2), as a
    module of its own, for a library whose structs differ from this tree's."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "libfa2_base", os.path.join(directory, "__init__.py"),
        submodule_search_locations=[directory])
    module = importlib.util.module_from_spec(spec)
    sys.modules["libfa2_base"] = module
    spec.loader.exec_module(module)
    return module


def shape_case(libs, dt, b, h, s, d, causal, rounds, iters):
    """libs: [(binding, library)] for this tree and the baseline."""
    bsets = []
    sets = random_sets(b, s, s, h, h, d, dt)
    runs = [Fa2Forward(lib, sets[0][0], sets[0][1], causal, binding=binding)
            for binding, lib in libs]
    outs = []
    for run in runs:
        q, k, v, o = sets[0]
        o.fill_(float("nan"))
        run(q, k, v, o)
        outs.append(o.clone())
    if not torch.equal(outs[0], outs[1]):
        diff = (outs[0].float() - outs[1].float()).abs().max().item()
        print(f"  note: outputs differ (max abs {diff:.2e})")
    fwd = alternate(runs, sets, rounds, iters)
    for q, k, v, o in sets:
        lse = torch.empty(b, h, s, device="cuda", dtype=torch.float32)
        runs[0](q, k, v, o, lse)
        ws = torch.empty(max(r.plan.bwd_workspace_bytes for r in runs), device="cuda",
                         dtype=torch.uint8)
        bsets.append((q, k, v, o, lse, torch.randn_like(q), torch.empty_like(q),
                      torch.empty_like(k), torch.empty_like(v), ws))
    bwd = alternate([r.backward for r in runs], bsets, rounds, iters)
    return ratio(fwd[1], fwd[0]), ratio(bwd[1], bwd[0])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True, help="this tree's libfa2.so")
    ap.add_argument("--base", required=True, help="the libfa2.so to compare against")
    ap.add_argument("--base-binding", help="its python/libfa2 directory, when its structs "
                    "differ from this tree's (default: this tree's binding)")
    ap.add_argument("--dims", default="64,128,256")
    ap.add_argument("--seqlens", default="512,1024,2048,4096,8192,16384")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--csv")
    args = ap.parse_args()
    base_binding = load_binding(args.base_binding) if args.base_binding else fa2lib
    libs = [(fa2lib, fa2lib.load_library(args.lib)),
            (base_binding, base_binding.load_library(args.base))]
    if libs[0][1] is libs[1][1]:
        sys.exit("--lib and --base are the same file: copy one to measure the noise")
    dt = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    torch.manual_seed(0)
    print(f"lib {args.lib}: {libs[0][1].build_info()}\n"
          f"base {args.base}: {libs[1][1].build_info()}")
    print(f"{'b':>3} {'h':>3} {'seq':>6} {'d':>4} {'causal':>6} | {'fwd':>6} "
          f"{'spread':>13} | {'bwd':>6} {'spread':>13}")
    rows = []
    for d in (int(x) for x in args.dims.split(",")):
        for causal in (False, True):
            for s in (int(x) for x in args.seqlens.split(",")):
                b, h = 16384 // s, 2048 // d
                f, bw = shape_case(libs, dt, b, h, s, d, causal, args.rounds, args.iters)
                rows.append((b, h, s, d, int(causal)) + f + bw)
                print(f"{b:3d} {h:3d} {s:6d} {d:4d} {int(causal):6d} | {f[0]:6.3f} "
                      f"{f[1]:6.3f}-{f[2]:6.3f} | {bw[0]:6.3f} {bw[1]:6.3f}-{bw[2]:6.3f}",
                      flush=True)
                torch.cuda.empty_cache()
    for name, col in (("forward", 5), ("backward", 8)):
        r = [row[col] for row in rows]
        print(f"{len(rows)} shapes, {name}: {min(r):.3f}-{max(r):.3f}, mean "
              f"{statistics.mean(r):.3f}; outside +-3 %: {sum(abs(x - 1) > 0.03 for x in r)}")
    if args.csv:
        with open(args.csv, "w") as fcsv:
            fcsv.write("b,h,seq,d,causal,fwd_ratio,fwd_lo,fwd_hi,bwd_ratio,bwd_lo,bwd_hi\n")
            for row in rows:
                fcsv.write(",".join(f"{x:.4f}" if isinstance(x, float) else str(x)
                                    for x in row) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
