#!/usr/bin/env python3
"""fa2_combine timed as engines use it: merging the partial results (O_i fp32, LSE_i) of
attention over separate key ranges into bf16 O and the LSE. Shapes: decode splits (few
rows, 8-16 parts), cascade / prefix sharing (2 parts, many rows) and context
parallelism (4 parts). Rate = bytes read and written / time. With --base-lib, the same
calls on a second build in alternating rounds (what a change to the combine costs or
gains; the combine's structs must match).

    python3 bench/combine_compare.py --lib build/libfa2.so [--base-lib old.so] [--csv f]
"""
import argparse
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sdpa_compare import alternate, fa2lib, load_library, ratio, write_csv  # noqa: E402

# (name, parts, rows, heads, head_dim)
SHAPES = (("decode 16 splits, 8 rows", 16, 8, 32, 128),
          ("decode 8 splits, 64 rows", 8, 64, 32, 128),
          ("cascade 2 parts, 8k rows", 2, 8192, 32, 128),
          ("context parallel 4 parts, 32k rows", 4, 32768, 8, 128))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default=os.environ.get("FA2_LIBRARY", "build/libfa2.so"))
    ap.add_argument("--base-lib")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--csv")
    args = ap.parse_args()
    libs = {"fa2": load_library(args.lib)}
    if args.base_lib:
        libs["base"] = load_library(args.base_lib)
    torch.manual_seed(0)
    rows_out = []
    for name, n, rows, heads, d in SHAPES:
        o_parts = torch.randn(n, rows, heads, d, device="cuda", dtype=torch.float32)
        lse_parts = torch.randn(n, heads, rows, device="cuda", dtype=torch.float32) * 4
        lse_parts[0, :, ::7] = float("-inf")  # some empty parts
        calls = {k: (lambda lib=lib: fa2lib.combine(o_parts, lse_parts, torch.bfloat16,
                                                    lib=lib))
                 for k, lib in libs.items()}
        outs = {k: fn()[0] for k, fn in calls.items()}
        if "base" in outs and not torch.equal(outs["fa2"], outs["base"]):
            print(f"  note: outputs differ (max abs "
                  f"{(outs['fa2'].float() - outs['base'].float()).abs().max().item():.2e})")
        times = dict(zip(calls, alternate(list(calls.values()), [()], args.rounds, args.iters,
                                          warmup=5)))
        moved = o_parts.numel() * 4 + lse_parts.numel() * 4 + rows * heads * (d * 2 + 4)
        med = {k: statistics.median(t) for k, t in times.items()}
        text = "  ".join(f"{k} {ms * 1e3:8.2f} us {moved / (ms * 1e-3) / 1e12:5.2f} TB/s"
                         for k, ms in med.items())
        extra = ""
        if "base" in med:
            speed, lo, hi = ratio(times["base"], times["fa2"])
            extra = f"   base/fa2 {speed:5.3f} (rounds {lo:.3f}..{hi:.3f})"
        print(f"combine {name:36s} {text}{extra}", flush=True)
        rows_out.append(dict(case=name, parts=n, rows=rows, heads=heads, head_dim=d,
                             **{f"{k}_us": round(ms * 1e3, 3) for k, ms in med.items()}))
    if args.csv:
        write_csv(args.csv, rows_out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
