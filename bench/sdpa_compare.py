#!/usr/bin/env python3
"""libfa2 forward next to PyTorch SDPA (flash, cudnn) in one process.

Loads libfa2.so through python/libfa2 (the ctypes binding), makes inputs with torch,
checks libfa2's output against SDPA's, and times every backend on the same tensors
(CUDA events, warm-up, median over >= 30 runs, inputs rotated so L2 does not hold
them). Prints a table and writes CSV.

    python3 bench/sdpa_compare.py --lib build/libfa2.so [--csv out.csv] [--quick]
"""
import argparse
import os
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

# python/libfa2 holds the only mirror of the C structs.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import libfa2 as fa2lib  # noqa: E402


def load_library(path):
    """The fa2.Library for libfa2.so at `path`."""
    return fa2lib.load_library(path)


class Fa2Forward:
    """A planned libfa2 forward (and backward) for BSHD torch tensors q [b, s, h, d],
    k/v [b, s, hkv, d]: an fa2.Plan called on raw device pointers, so that a timed call
    is the C call and little else. `binding`: the libfa2 Python package that matches
    `lib` (another tree's, for a library whose structs differ)."""

    def __init__(self, lib, q, k, causal, deterministic=False, binding=fa2lib):
        problem = binding.make_problem(q.dtype, q.shape, k.shape, causal=causal,
                                       deterministic=deterministic, lib=lib)
        self.plan = lib.plan(problem, torch.cuda.current_device())

    def __call__(self, q, k, v, o, lse=None):
        self.plan.forward(q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(),
                          lse.data_ptr() if lse is not None else None,
                          stream=torch.cuda.current_stream().cuda_stream)

    def backward(self, q, k, v, o, lse, d_o, dq, dk, dv, workspace):
        self.plan.backward(q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(),
                           d_o.data_ptr(), lse.data_ptr(), dq.data_ptr(), dk.data_ptr(),
                           dv.data_ptr(), workspace.data_ptr(), workspace.numel(),
                           stream=torch.cuda.current_stream().cuda_stream)


def flops_forward(b, h, sq, sk, d, causal):
    f = 4.0 * b * h * sq * sk * d
    return f / 2 if causal else f


def time_ms(fn, sets, warmup=5, iters=30):
    """Median of `iters` event-timed calls, cycling through input sets."""
    for i in range(warmup):
        fn(*sets[i % len(sets)])
    times = []
    for i in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        args = sets[i % len(sets)]
        start.record()
        fn(*args)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def alternate(fns, sets, rounds, iters, warmup=2, per_fn_sets=False):
    """Per-round medians (time_ms) for each of `fns`, timed in alternation so that clock
    and thermal drift hit all alike: times[i][round]. per_fn_sets: sets[i] are fns[i]'s
    own input sets."""
    times = [[] for _ in fns]
    for _ in range(rounds):
        for i, fn in enumerate(fns):
            times[i].append(time_ms(fn, sets[i] if per_fn_sets else sets, warmup=warmup,
                                    iters=iters))
    return times


def random_sets(b, sq, sk, hq, hkv, d, dt, count=3):
    """count input sets (q, k, v, o): standard-normal Q, K, V and an empty O, for the
    timed calls to rotate over (the method's rotated inputs, docs/performance.md)."""
    sets = []
    for _ in range(count):
        q = torch.randn(b, sq, hq, d, device="cuda", dtype=dt)
        k = torch.randn(b, sk, hkv, d, device="cuda", dtype=dt)
        v = torch.randn(b, sk, hkv, d, device="cuda", dtype=dt)
        sets.append((q, k, v, torch.empty_like(q)))
    return sets


def ratio(base, new):
    """median(base) / median(new) of two alternate() rows, and the range of the
    per-round ratios."""
    per_round = [b / n for b, n in zip(base, new)]
    return statistics.median(base) / statistics.median(new), min(per_round), max(per_round)


def sdpa(backend, causal, gqa):
    def run(q, k, v, o):
        with sdpa_kernel([backend]):
            # SDPA takes [b, h, s, d]; transposes are views of the same BSHD storage.
            F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                           v.transpose(1, 2), is_causal=causal,
                                           enable_gqa=gqa)
    return run


def write_csv(path, rows):
    """Rows (dicts) as CSV: the columns every key seen, in order of first appearance;
    a row without a key leaves its cell empty."""
    keys = list(dict.fromkeys(k for r in rows for k in r))
    with open(path, "w") as f:
        f.write(",".join(keys) + "\n")
        for r in rows:
            f.write(",".join(str(r.get(k, "")) for k in keys) + "\n")


def rel_err(x, ref):
    return ((x.float() - ref.float()).norm() / ref.float().norm()).item()


def backward_case(lib, fa2, dt, b, hq, hkv, s, d, causal, n_sets=2):
    """fa2 backward vs SDPA flash/cudnn backward: TFLOP/s and max grad rel. error."""
    sets = []
    for _ in range(n_sets):
        q = torch.randn(b, s, hq, d, device="cuda", dtype=dt)
        k = torch.randn(b, s, hkv, d, device="cuda", dtype=dt)
        v = torch.randn(b, s, hkv, d, device="cuda", dtype=dt)
        d_o = torch.randn(b, s, hq, d, device="cuda", dtype=dt)
        o = torch.empty_like(q)
        lse = torch.empty(b, hq, s, device="cuda", dtype=torch.float32)
        fa2(q, k, v, o, lse)
        ws = torch.empty(fa2.plan.bwd_workspace_bytes, device="cuda", dtype=torch.uint8)
        sets.append((q, k, v, o, lse, d_o, torch.empty_like(q), torch.empty_like(k),
                     torch.empty_like(v), ws))
    q, k, v, o, lse, d_o, dq, dk, dv, ws = sets[0]
    for g in (dq, dk, dv):
        g.fill_(float("nan"))
    fa2.backward(*sets[0])
    qr, kr, vr = (x.detach().clone().requires_grad_() for x in (q, k, v))
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION,
                      SDPBackend.EFFICIENT_ATTENTION]):
        ref = F.scaled_dot_product_attention(qr.transpose(1, 2), kr.transpose(1, 2),
                                             vr.transpose(1, 2), is_causal=causal,
                                             enable_gqa=hq != hkv).transpose(1, 2)
    gq, gk, gv = torch.autograd.grad(ref, (qr, kr, vr), d_o)
    err = max(rel_err(dq, gq), rel_err(dk, gk), rel_err(dv, gv))
    t = {"fa2": time_ms(fa2.backward, sets)}
    for name, be in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
        try:
            graphs = []
            for q, k, v, o, lse, d_o, *_ in sets:
                qr, kr, vr = (x.detach().clone().requires_grad_() for x in (q, k, v))
                with sdpa_kernel([be]):
                    out = F.scaled_dot_product_attention(qr.transpose(1, 2), kr.transpose(1, 2),
                                                         vr.transpose(1, 2), is_causal=causal,
                                                         enable_gqa=hq != hkv)
                graphs.append((out, (qr, kr, vr), d_o.transpose(1, 2)))
            t[name] = time_ms(lambda out, ins, g: torch.autograd.grad(out, ins, g, retain_graph=True),
                              graphs)
            del graphs
        except RuntimeError:
            t[name] = float("nan")
    fl = 2.5 * flops_forward(b, hq, s, s, d, causal)
    del sets
    return {k_: fl / (ms * 1e-3) / 1e12 for k_, ms in t.items()}, err


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default=os.environ.get("FA2_LIBRARY", "build/libfa2.so"))
    ap.add_argument("--csv")
    ap.add_argument("--quick", action="store_true", help="d=128 bf16 only")
    ap.add_argument("--no-backward", action="store_true")
    ap.add_argument("--deterministic", action="store_true", help="backward without atomics")
    ap.add_argument("--dims", help="comma-separated head dims (default 64,128,256)")
    ap.add_argument("--seqlens", help="comma-separated seqlens (default 512..16384)")
    ap.add_argument("--dtypes", help="comma-separated: bf16,fp16")
    args = ap.parse_args()
    lib = load_library(args.lib)
    torch.manual_seed(0)

    shapes = []  # (dtype, b, hq, hkv, s, d, causal)
    names = {"bf16": torch.bfloat16, "fp16": torch.float16}
    dtypes = [torch.bfloat16] if args.quick else [torch.bfloat16, torch.float16]
    if args.dtypes:
        dtypes = [names[x] for x in args.dtypes.split(",")]
    dims = [128] if args.quick else [64, 128, 256]
    if args.dims:
        dims = [int(x) for x in args.dims.split(",")]
    seqlens = [512, 1024, 2048, 4096, 8192, 16384]
    if args.seqlens:
        seqlens = [int(x) for x in args.seqlens.split(",")]
    for dt in dtypes:
        for d in dims:
            for causal in (False, True):
                for s in seqlens:
                    h = 2048 // d
                    shapes.append((dt, 16384 // s, h, h, s, d, causal))
    if not (args.quick or args.dims or args.seqlens or args.dtypes):
        shapes += [(torch.bfloat16, 4, 32, 8, 4096, 128, c) for c in (False, True)]
        shapes += [(torch.float16, 2, 8, 8, s, 64, False) for s in (2048, 4096, 8192)]

    rows = []
    header = (f"{'dtype':5} {'b':>3} {'hq':>3} {'hkv':>3} {'seq':>6} {'d':>4} {'causal':>6} "
              f"{'fa2':>7} {'flash':>7} {'cudnn':>7} {'fa2/fl':>7} {'fa2/cu':>7} {'err':>8}"
              f" | {'bwd fa2':>7} {'flash':>7} {'cudnn':>7} {'fa2/fl':>7} {'fa2/cu':>7} {'err':>8}")
    print(header)
    for dt, b, hq, hkv, s, d, causal in shapes:
        sets = random_sets(b, s, s, hq, hkv, d, dt)
        fa2 = Fa2Forward(lib, sets[0][0], sets[0][1], causal, args.deterministic)
        q, k, v, o = sets[0]
        o.fill_(float("nan"))
        fa2(q, k, v, o)
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION,
                          SDPBackend.EFFICIENT_ATTENTION]):
            ref = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                                 v.transpose(1, 2), is_causal=causal,
                                                 enable_gqa=hq != hkv).transpose(1, 2)
        err = ((o.float() - ref.float()).norm() / ref.float().norm()).item()
        fl = flops_forward(b, hq, s, s, d, causal)
        t = {"fa2": time_ms(fa2, sets)}
        for name, be in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
            try:
                t[name] = time_ms(sdpa(be, causal, hq != hkv), sets)
            except RuntimeError:
                t[name] = float("nan")
        tf = {k_: fl / (ms * 1e-3) / 1e12 for k_, ms in t.items()}
        del sets
        torch.cuda.empty_cache()
        bw, bw_err = ({"fa2": float("nan"), "flash": float("nan"), "cudnn": float("nan")},
                      float("nan"))
        if not args.no_backward:
            bw, bw_err = backward_case(lib, fa2, dt, b, hq, hkv, s, d, causal)
        row = dict(dtype=str(dt).split(".")[-1], b=b, hq=hq, hkv=hkv, seq=s, d=d,
                   causal=int(causal), fa2=tf["fa2"], flash=tf["flash"], cudnn=tf["cudnn"],
                   err=err, bwd_fa2=bw["fa2"], bwd_flash=bw["flash"], bwd_cudnn=bw["cudnn"],
                   bwd_err=bw_err)
        rows.append(row)
        print(f"{row['dtype'][:5]:5} {b:3d} {hq:3d} {hkv:3d} {s:6d} {d:4d} {int(causal):6d} "
              f"{tf['fa2']:7.1f} {tf['flash']:7.1f} {tf['cudnn']:7.1f} "
              f"{tf['fa2'] / tf['flash']:7.2f} {tf['fa2'] / tf['cudnn']:7.2f} {err:8.1e} | "
              f"{bw['fa2']:7.1f} {bw['flash']:7.1f} {bw['cudnn']:7.1f} "
              f"{bw['fa2'] / bw['flash']:7.2f} {bw['fa2'] / bw['cudnn']:7.2f} {bw_err:8.1e}",
              flush=True)
        torch.cuda.empty_cache()
    if args.csv:
        write_csv(args.csv, rows)
    bad = [r for r in rows if not (r["err"] < 2e-2) or
           (not args.no_backward and not (r["bwd_err"] < 3e-2))]
    if bad:
        print(f"FAIL: {len(bad)} shapes with rel. error >= 2e-2 (forward) / 3e-2 (gradients) "
              "against SDPA")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
