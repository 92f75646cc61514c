#!/usr/bin/env python3
"""Several libfa2 builds' decode steps side by side (a performance experiment, e.g.
bench/lab/decode_row_warps.patch against the tree it applies to): each
shape of bench/decode_compare.py timed as there (a CUDA graph of one step over layers
whose K/V exceed the L2 cache), the builds in alternating rounds, TB/s of K+V read.

    python3 bench/lab/decode_ab.py --lib NAME=path/libfa2.so[@BYTES] [--lib ...]
        [--binding NAME=path/python/libfa2] [--shapes 0,9]

@BYTES plans that build's steps for this GPU with BYTES of shared memory a block (so a
shallower pipeline, more blocks a multiprocessor). --binding: the Python package of a
build whose structs differ from this tree's (its python/libfa2).
"""
import argparse
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from decode_compare import (SHAPES, Fa2Decode, copy_bandwidth, make_layers,  # noqa: E402
                            step_ms)
from sdpa_compare import fa2lib  # noqa: E402
from lab.ab_compare import load_binding  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", action="append", required=True, help="NAME=path")
    ap.add_argument("--binding", action="append", default=[], help="NAME=python/libfa2 dir")
    ap.add_argument("--shapes", help="indices into decode_compare.SHAPES (default: all)")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    bindings = dict(x.split("=", 1) for x in args.binding)
    libs = []
    for item in args.lib:
        name, path = item.split("=", 1)
        path, _, smem = path.partition("@")
        binding = fa2lib
        if name in bindings:
            binding = load_binding(bindings[name])
        lib = binding.load_library(path)
        info = None
        if smem:
            info = lib.device_info(torch.cuda.current_device())
            info.smem_per_block_optin = int(smem)
        libs.append((name, binding, lib, info))
    picks = [int(i) for i in args.shapes.split(",")] if args.shapes else range(len(SHAPES))
    torch.manual_seed(0)
    copy = copy_bandwidth()
    print(f"copy bandwidth {copy:.2f} TB/s; TB/s of K+V read, median of {args.rounds} "
          f"alternating rounds; ratios to the first build")
    for i in picks:
        b, sk, hq, hkv, d, tokens = SHAPES[i]
        kv_bytes = 2 * b * sk * hkv * d * 2
        layers = make_layers(b, sk, hq, hkv, d, tokens)
        runs = [(n, Fa2Decode(lib, layers[0][0], layers[0][1], info, binding))
                for n, binding, lib, info in libs]
        rates = {n: [] for n, _ in runs}
        for _ in range(args.rounds):
            for n, fn in runs:
                ms = step_ms([(fn, x) for x in layers], 10)
                rates[n].append(kv_bytes / (ms * 1e-3) / 1e12)
        med = {n: statistics.median(r) for n, r in rates.items()}
        first = med[runs[0][0]]
        print(f"{b:3d} x {sk:6d} GQA {hq:3d}:{hkv:<2d} d={d:3d} tok={tokens:2d}  " +
              "  ".join(f"{n} {m:.2f} ({m / first:.3f}, {fn.plan.splits}sp "
                        f"{fn.plan.decode_stages}st)"
                        for (n, fn), m in zip(runs, med.values())), flush=True)
        del layers, runs
    return 0


if __name__ == "__main__":
    sys.exit(main())
