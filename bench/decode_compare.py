#!/usr/bin/env python3
"""Decode steps side by side on one GPU (the decode issue's acceptance figures): one
query token per sequence against a contiguous KV cache, bf16, causal, libfa2 (its
decode kernel, key splits allowed) against PyTorch SDPA's flash and cuDNN backends.
Rate = bytes of K and V read / time; the device-to-device copy bandwidth is measured in
the same run as the yardstick. Each step is timed as engines run it, replayed from a
captured CUDA graph (median of CUDA-event-timed replays; eager calls, bound by Python's
launch cost at small shapes, are printed alongside); the first shape's step is broken
down into its kernels' device times; two shapes also over a paged cache (pages of 16
and 64 keys) against contiguous K/V.

    python3 bench/decode_compare.py --lib build/libfa2.so [--csv out.csv]
"""
import argparse
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sdpa_compare import fa2lib, time_ms  # noqa: E402

# (batch, keys, heads_q, heads_kv, head_dim): the table, then its other head dims
# and GQA ratios
SHAPES = [(1, 8192, 32, 8, 128), (1, 131072, 32, 8, 128), (16, 8192, 32, 8, 128),
          (64, 4096, 32, 8, 128), (8, 16384, 32, 32, 128), (16, 8192, 32, 8, 64),
          (16, 8192, 32, 8, 256), (16, 8192, 32, 32, 128), (16, 8192, 32, 2, 128)]


def copy_bandwidth():
    """Device-to-device copy rate (read + write bytes / time) of a 2 GiB buffer."""
    a = torch.empty(1 << 30, dtype=torch.int16, device="cuda")
    b = torch.empty_like(a)
    ms = time_ms(lambda: b.copy_(a), [()], warmup=3, iters=20)
    return 2 * a.numel() * 2 / (ms * 1e-3) / 1e12


class Fa2Decode:
    """A planned libfa2 forward for one decode step (max_splits 64) with its workspace."""

    def __init__(self, lib, q, k):
        problem = fa2lib.make_problem(q.dtype, q.shape, k.shape, causal=True, lib=lib)
        problem.max_splits = 64
        self.plan = lib.plan(problem, torch.cuda.current_device())
        self.ws = torch.empty(max(self.plan.workspace_bytes, 16), dtype=torch.uint8,
                              device="cuda")

    def __call__(self, q, k, v, o):
        self.plan.forward(q, k, v, o, workspace=self.ws,
                          stream=torch.cuda.current_stream().cuda_stream)


class Fa2PagedDecode:
    """The same step over a paged cache (shuffled pages of `page` keys): fa2_forward_varlen
    with a page table, key splits allowed."""

    def __init__(self, lib, q, k, v, page):
        b, sk, hkv, d = k.shape
        per_seq = (sk + page - 1) // page
        self.table = torch.randperm(b * per_seq, device="cuda").view(b, per_seq) \
            .to(torch.int32).contiguous()
        self.k_cache = torch.empty(b * per_seq, page, hkv, d, device="cuda", dtype=k.dtype)
        self.v_cache = torch.empty_like(self.k_cache)
        keys = torch.arange(sk, device="cuda")
        for i in range(b):  # the same keys, scattered into the pages
            slots = self.table[i][keys // page].long()
            self.k_cache[slots, keys % page] = k[i]
            self.v_cache[slots, keys % page] = v[i]
        self.cu = torch.arange(b + 1, dtype=torch.int32, device="cuda")
        self.used = torch.full((b,), sk, dtype=torch.int32, device="cuda")
        stride = self.k_cache.stride(0)
        problem = fa2lib.make_varlen_problem(
            q.dtype, b, 0, q.shape[2], hkv, d, batch=b, max_seqlen_q=1, max_seqlen_k=sk,
            causal=True, pages=(page, b * per_seq, per_seq, stride, stride), lib=lib)
        problem.max_splits = 64
        self.plan = lib.plan(problem, torch.cuda.current_device())
        self.ws = torch.empty(max(self.plan.workspace_bytes, 16), dtype=torch.uint8,
                              device="cuda")

    def __call__(self, q, k, v, o):
        self.plan.forward_varlen(q.view(q.shape[0], q.shape[2], q.shape[3]), self.k_cache,
                                 self.v_cache, o.view(o.shape[0], o.shape[2], o.shape[3]),
                                 self.cu, None, None, self.used, self.table, self.ws,
                                 stream=torch.cuda.current_stream().cuda_stream)


def sdpa(backend):
    def run(q, k, v, o):
        with sdpa_kernel([backend]):
            F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                           v.transpose(1, 2), is_causal=False,
                                           enable_gqa=True)
    return run


def capture(fn, args):
    """A CUDA graph of one call of fn(*args)."""
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn(*args)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            fn(*args)
    return graph


def graph_ms(fn, args, iters=100):
    """Median time of one step replayed from a captured CUDA graph."""
    graph = capture(fn, args)
    return time_ms(lambda: graph.replay(), [()], warmup=10, iters=iters)


def kernel_us(fn, args, replays=50):
    """Mean device time (us) of each kernel of one graph-replayed step, by short name."""
    graph = capture(fn, args)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(replays):
            graph.replay()
        torch.cuda.synchronize()
    times = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            name = e.name.split("<")[0].split("(")[0].replace("void ", "").split("::")[-1]
            times[name] = times.get(name, 0.0) + e.device_time / replays
    return times


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", required=True)
    ap.add_argument("--csv")
    args = ap.parse_args()
    lib = fa2lib.load_library(args.lib)
    torch.manual_seed(0)
    copy = copy_bandwidth()
    print(f"libfa2 {lib.build_info()}; bf16 causal, one query token; copy bandwidth "
          f"{copy:.2f} TB/s; rates in TB/s of K+V read")
    rows = []
    for i, (b, sk, hq, hkv, d) in enumerate(SHAPES):
        q = torch.randn(b, 1, hq, d, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(b, sk, hkv, d, device="cuda", dtype=torch.bfloat16)
        v = torch.randn_like(k)
        o = torch.empty_like(q)
        kv_bytes = 2 * k.numel() * 2
        fa2 = Fa2Decode(lib, q, k)
        runs = {"fa2": fa2, "flash": sdpa(SDPBackend.FLASH_ATTENTION),
                "cudnn": sdpa(SDPBackend.CUDNN_ATTENTION)}
        rate, eager = {}, {}
        for name, fn in runs.items():
            try:
                eager[name] = kv_bytes / (time_ms(fn, [(q, k, v, o)], warmup=10, iters=100)
                                          * 1e-3) / 1e12
                rate[name] = kv_bytes / (graph_ms(fn, (q, k, v, o)) * 1e-3) / 1e12
            except RuntimeError as e:
                print(f"  {name} unavailable: {str(e).splitlines()[0]}")
                rate[name] = eager[name] = float("nan")
        line = (f"decode {b} x {sk:6d} GQA {hq}:{hkv} d={d:3d} "
                f"splits={fa2.plan.decode_splits:2d}  fa2 {rate['fa2']:.2f}  flash "
                f"{rate['flash']:.2f}  cudnn {rate['cudnn']:.2f}  fa2/copy "
                f"{rate['fa2'] / copy:.2f}  fa2/cudnn {rate['fa2'] / rate['cudnn']:.2f}  "
                f"fa2/flash {rate['fa2'] / rate['flash']:.2f}  (eager: fa2 {eager['fa2']:.2f} "
                f"flash {eager['flash']:.2f} cudnn {eager['cudnn']:.2f})")
        row = dict(batch=b, keys=sk, heads_q=hq, heads_kv=hkv, head_dim=d,
                   splits=fa2.plan.decode_splits, copy=copy, **rate,
                   **{f"eager_{n}": x for n, x in eager.items()})
        if i == 0:  # where the time of a step goes
            for name in ("fa2", "cudnn"):
                try:
                    parts = kernel_us(runs[name], (q, k, v, o))
                    step = kv_bytes / rate[name] / 1e6
                    line += (f"\n  ({name} kernels, us per replayed step of {step:.1f}: " +
                             ", ".join(f"{n} {t:.1f}" for n, t in parts.items()) + ")")
                except Exception as e:  # a diagnostic: never fails the run
                    line += f"\n  ({name} kernel times unavailable: {e})"
        print(line, flush=True)
        rows.append(row)
    for b, sk, hq, hkv, d in (SHAPES[2], SHAPES[3]):  # paged against contiguous
        q = torch.randn(b, 1, hq, d, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(b, sk, hkv, d, device="cuda", dtype=torch.bfloat16)
        v = torch.randn_like(k)
        o, o_paged = torch.empty_like(q), torch.empty_like(q)
        kv_bytes = 2 * k.numel() * 2
        dense = Fa2Decode(lib, q, k)
        base = kv_bytes / (graph_ms(dense, (q, k, v, o)) * 1e-3) / 1e12
        for page in (16, 64):
            paged = Fa2PagedDecode(lib, q, k, v, page)
            paged(q, k, v, o_paged)
            dense(q, k, v, o)
            diff = (o_paged.float() - o.float()).abs().max().item()
            rate = kv_bytes / (graph_ms(paged, (q, k, v, o_paged)) * 1e-3) / 1e12
            print(f"decode paged {page:2d}, {b} x {sk}: {rate:.2f} TB/s, contiguous "
                  f"{base:.2f}, paged/contiguous {rate / base:.3f} (max diff {diff:.0e})",
                  flush=True)
            rows.append(dict(batch=b, keys=sk, heads_q=hq, heads_kv=hkv, head_dim=d,
                             page=page, paged=rate, contiguous=base))

    if args.csv:
        with open(args.csv, "w") as f:
            keys = sorted({k for r in rows for k in r})
            f.write(",".join(keys) + "\n")
            for r in rows:
                f.write(",".join(str(r.get(k, "")) for k in keys) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
