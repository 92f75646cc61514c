#!/usr/bin/env python3
"""Host cost per call of libfa2's Python entry points beside PyTorch SDPA (flash and cuDNN
backends), and the seeds' training benchmark end to end.

Host cost: problems so small that the GPU finishes each call's kernels sooner than the
host issues the next call, so the time to issue N calls back to back (measured on the
CPU, before the closing synchronize) is what the Python layer, the C call and the launch
cost. Each entry runs `--rounds` rounds of `--calls` calls of every contender after a
warm-up, the contenders taking turns within each round (so that a drift of the machine
falls on all of them alike); the median round is reported, in microseconds per call.
Ratios are libfa2 / the cheaper SDPA backend (<= 1.0: libfa2 costs no more).

Training: the benchmark of the documents this project began from (batch 2, 8 heads,
head dim 64, fp16, seqlen 2048 / 4096 / 8192, and causal 4096): forward + backward
through autograd, wall time per step with CUDA events around `--steps` steps.

    FA2_LIBRARY=build/libfa2.so python3 bench/host_overhead.py [--baseline DIR]
        [--calls 300] [--rounds 7] [--skip-training] [--csv FILE]

--baseline DIR also times the libfa2 package in DIR (an older commit's python/ folder,
imported as libfa2_baseline, on the same library) in the same rounds: column "before".
"""
import argparse
import contextlib
import importlib
import importlib.util
import os
import statistics
import sys
import time


def parse():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", help="a folder holding an older libfa2 package to time "
                    "beside this tree's")
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--skip-training", action="store_true")
    ap.add_argument("--csv")
    return ap.parse_args()


ARGS = parse()
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

import libfa2  # noqa: E402


def import_baseline(folder):
    """The libfa2 package in folder/libfa2, imported as libfa2_baseline (its modules
    import each other relatively, so the name does not matter to them)."""
    path = os.path.join(os.path.abspath(folder), "libfa2", "__init__.py")
    spec = importlib.util.spec_from_file_location(
        "libfa2_baseline", path, submodule_search_locations=[os.path.dirname(path)])
    module = importlib.util.module_from_spec(spec)
    sys.modules["libfa2_baseline"] = module
    spec.loader.exec_module(module)
    return module


DEV = "cuda"
BACKENDS = (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION))


def host_us(calls, n, rounds):
    """{name: median over rounds of the CPU time to issue n calls, us per call} for
    calls {name: (context, call)} (context(): what each round runs in), the calls taking
    turns within each round."""
    for context, call in calls.values():
        with context():
            for _ in range(20):
                call()
    torch.cuda.synchronize()
    times = {name: [] for name in calls}
    for _ in range(rounds):
        for name, (context, call) in calls.items():
            with context():
                t0 = time.perf_counter()
                for _ in range(n):
                    call()
                times[name].append((time.perf_counter() - t0) / n * 1e6)
            torch.cuda.synchronize()
    return {name: statistics.median(t) for name, t in times.items()}


def randn(*shape, dtype=torch.bfloat16, grad=False):
    return torch.randn(*shape, device=DEV, dtype=dtype).requires_grad_(grad)


def entries(packages):
    """(name, {package name: its call}, {backend: (backend, sdpa call)}) for each public
    entry point, for packages {name: libfa2 module}."""
    b, s, h, d = 1, 128, 8, 64
    q, k, v = (randn(b, s, h, d) for _ in range(3))
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
    qg, kg, vg = (randn(b, s, h, d, grad=True) for _ in range(3))
    qgt, kgt, vgt = (t.transpose(1, 2) for t in (qg, kg, vg))
    grad_out = randn(b, s, h, d)
    o, lse = libfa2.forward(q, k, v, return_lse=True)
    fais = {name: importlib.import_module(m.__name__ + ".flash_attn_interface")
            for name, m in packages.items()}

    def no_grad(f):
        def call():
            with torch.no_grad():
                return f()
        return call

    def sdpa_forward():
        return F.scaled_dot_product_attention(qt, kt, vt)

    def train(fa2):
        return lambda: fa2.attention(qg, kg, vg).backward(grad_out)

    def sdpa_train():
        F.scaled_dot_product_attention(qgt, kgt, vgt).backward(grad_out.transpose(1, 2))

    # a decode step: one query token, GQA 8:2, 200 cached keys of a 256-row cache
    batch, hq, hkv, keys = 4, 8, 2, 200
    dq = randn(batch, 1, hq, d)
    k_cache, v_cache = (randn(batch, 256, hkv, d) for _ in range(2))
    lens = torch.full((batch,), keys, dtype=torch.int32, device=DEV)
    k_keys, v_keys = k_cache[:, :keys], v_cache[:, :keys]
    dqt = dq.transpose(1, 2)
    # SDPA gets K/V already repeated to every query head (no GQA work in its call)
    k_rep, v_rep = (t.repeat_interleave(hq // hkv, dim=2).transpose(1, 2).contiguous()
                    for t in (k_keys, v_keys))

    def sdpa_decode():
        return F.scaled_dot_product_attention(dqt, k_rep, v_rep)

    # a packed batch of two sequences of 64
    q3, k3, v3 = (randn(2 * 64, h, d) for _ in range(3))
    cu = torch.tensor([0, 64, 128], dtype=torch.int32, device=DEV)

    # combine: two partial results of 8 rows; cache_write: 4 new rows into a paged cache
    o_parts = randn(2, 8, h, d, dtype=torch.float32)
    lse_parts = randn(2, h, 8, dtype=torch.float32)
    k_new, v_new = (randn(4, hkv, d) for _ in range(2))
    slots = torch.arange(4, dtype=torch.int32, device=DEV) * 7
    pages_k, pages_v = (randn(16, 16, hkv, d) for _ in range(2))

    trains = {n: (be, sdpa_train) for n, be in BACKENDS}
    infer = {n: (be, sdpa_forward) for n, be in BACKENDS}
    decode = {n: (be, sdpa_decode) for n, be in BACKENDS}

    def each(make):
        return {name: make(m, fais[name]) for name, m in packages.items()}
    return [
        ("forward", each(lambda fa2, fai: no_grad(lambda: fa2.forward(q, k, v))), infer),
        ("flash_attn_func", each(lambda fa2, fai: no_grad(lambda: fai.flash_attn_func(q, k, v))),
         infer),
        ("backward", each(lambda fa2, fai: lambda: fa2.backward(grad_out, q, k, v, o, lse)), {}),
        ("attention fwd+bwd", each(lambda fa2, fai: train(fa2)), trains),
        ("decode: flash_attn_with_kvcache",
         each(lambda fa2, fai: no_grad(lambda: fai.flash_attn_with_kvcache(
             dq, k_cache, v_cache, cache_seqlens=lens))), decode),
        ("decode: forward", each(lambda fa2, fai: no_grad(lambda: fa2.forward(dq, k_keys,
                                                                              v_keys))),
         decode),
        ("flash_attn_varlen_func",
         each(lambda fa2, fai: no_grad(lambda: fai.flash_attn_varlen_func(q3, k3, v3, cu, cu,
                                                                          64, 64))), {}),
        ("combine", each(lambda fa2, fai: lambda: fa2.combine(o_parts, lse_parts)), {}),
        ("cache_write", each(lambda fa2, fai: lambda: fa2.cache_write(
            k_new, v_new, slots, pages_k, pages_v, 16, 256)), {}),
    ]


def run_host(rows, packages):
    print(f"host cost per call, us (median of {ARGS.rounds} rounds of {ARGS.calls} calls, "
          "the contenders in turn; bf16, tiny problems)")
    names = list(packages)
    print(f"{'entry':34} " + " ".join(f"{n:>8}" for n in names) +
          f" {'flash':>8} {'cudnn':>8} {'ratio':>6}")
    for name, ours, peers in entries(packages):
        calls = {n: (contextlib.nullcontext, call) for n, call in ours.items()}
        usable = {}
        for pname, (backend, call) in peers.items():
            try:
                with sdpa_kernel([backend]):
                    call()
                usable[pname] = (lambda backend=backend: sdpa_kernel([backend]), call)
            except RuntimeError as e:
                print(f"  SDPA {pname} unavailable for {name}: {str(e).splitlines()[0]}")
        times = host_us({**calls, **usable}, ARGS.calls, ARGS.rounds)
        peer = {p: times[p] for p in usable}
        cheaper = min(peer.values()) if peer else None
        cells = [f"{peer[p]:8.1f}" if p in peer else f"{'-':>8}" for p, _ in BACKENDS]
        ratio = f"{times['libfa2'] / cheaper:6.2f}" if cheaper else f"{'-':>6}"
        print(f"{name:34} " + " ".join(f"{times[n]:8.1f}" for n in names) +
              f" {' '.join(cells)} {ratio}", flush=True)
        rows.append(dict(kind="host_us", entry=name, **times))


def step_ms(step, steps):
    for _ in range(5):
        step()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(steps):
        step()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / steps


def run_training(rows):
    print("\ntraining, the seeds' benchmark: batch 2, 8 heads, d 64, fp16, forward + "
          f"backward through autograd, {ARGS.steps} steps; ms per step and TFLOP/s")
    b, h, d = 2, 8, 64
    for seqlen, causal in ((2048, False), (4096, False), (8192, False), (4096, True)):
        q, k, v = (randn(b, seqlen, h, d, dtype=torch.float16, grad=True) for _ in range(3))
        g = randn(b, seqlen, h, d, dtype=torch.float16)
        qt, kt, vt, gt = (t.transpose(1, 2) for t in (q, k, v, g))
        flops = 3.5 * 4 * b * h * seqlen * seqlen * d * (0.5 if causal else 1.0)
        times = {"libfa2": step_ms(lambda: libfa2.attention(q, k, v, causal=causal)
                                   .backward(g), ARGS.steps)}
        for name, backend in BACKENDS:
            with sdpa_kernel([backend]):
                times[name] = step_ms(lambda: F.scaled_dot_product_attention(
                    qt, kt, vt, is_causal=causal).backward(gt), ARGS.steps)
        cells = "  ".join(f"{n} {t:.3f} ms {flops / t / 1e9:.0f} TFLOP/s"
                          for n, t in times.items())
        print(f"seqlen {seqlen:5d}{' causal' if causal else '       '}  {cells}  "
              f"libfa2/flash speed {times['flash'] / times['libfa2']:.2f}", flush=True)
        rows.append(dict(kind="train_ms", entry=f"{seqlen}{' causal' if causal else ''}",
                         **times))


def main():
    torch.manual_seed(0)
    print(f"{torch.cuda.get_device_name()}; torch {torch.__version__}; libfa2 package "
          f"{os.path.dirname(libfa2.__file__)}; {libfa2.build_info()}")
    rows = []
    packages = {"libfa2": libfa2}
    if ARGS.baseline:
        packages["before"] = import_baseline(ARGS.baseline)
    run_host(rows, packages)
    if not ARGS.skip_training:
        run_training(rows)
    if ARGS.csv:
        keys = list(dict.fromkeys(k for r in rows for k in r))
        with open(ARGS.csv, "w") as f:
            f.write(",".join(keys) + "\n")
            for r in rows:
                f.write(",".join(str(r.get(k, "")) for k in keys) + "\n")


if __name__ == "__main__":
    main()
