#!/usr/bin/env python3
"""Decode steps side by side on one GPU (the decode issue's acceptance figures): one
query token per sequence (or a few speculative ones) against a contiguous KV cache,
bf16, causal, libfa2 (its decode kernel, key splits allowed) against PyTorch SDPA's
flash and cuDNN backends.
Rate = bytes of K and V read / time; the device-to-device copy bandwidth is measured in
the same run as the yardstick. Each shape is timed as an engine runs it: one CUDA graph
holds a decode step over several layers, each layer with its own K/V (together 4x the
L2 cache, so every layer reads HBM), and the graph is replayed (median of event-timed
replays, per layer). The first shape is also timed as one call replayed alone (its
K/V then stays in L2) with its kernels' device times; three shapes also over a paged
cache (pages of 16 and 64 keys) against contiguous K/V.

    python3 bench/decode_compare.py --lib build/libfa2.so [--base-lib other/libfa2.so]
        [--csv out.csv]

With --base-lib, a second build's decode step is timed beside (column "base").
"""
import argparse
import os
import sys

import torch
from torch.nn.attention import SDPBackend

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sdpa_compare import fa2lib, sdpa, time_ms, write_csv  # noqa: E402

# (batch, keys, heads_q, heads_kv, head_dim, query tokens): the table, then its
# other head dims and GQA ratios, then more than 16 rows per kv head (MQA 64:1, a group
# of 128, GQA 64:8 with 4 speculative tokens)
SHAPES = [(1, 8192, 32, 8, 128, 1), (1, 131072, 32, 8, 128, 1), (16, 8192, 32, 8, 128, 1),
          (64, 4096, 32, 8, 128, 1), (8, 16384, 32, 32, 128, 1), (16, 8192, 32, 8, 64, 1),
          (16, 8192, 32, 8, 256, 1), (16, 8192, 32, 32, 128, 1), (16, 8192, 32, 2, 128, 1),
          (16, 8192, 64, 1, 128, 1), (1, 131072, 64, 1, 128, 1), (8, 8192, 128, 1, 128, 1),
          (4, 16384, 64, 8, 128, 4)]


def copy_bandwidth():
    """Device-to-device copy rate (read + write bytes / time) of a 2 GiB buffer."""
    a = torch.empty(1 << 30, dtype=torch.int16, device="cuda")
    b = torch.empty_like(a)
    ms = time_ms(lambda: b.copy_(a), [()], warmup=3, iters=20)
    return 2 * a.numel() * 2 / (ms * 1e-3) / 1e12


class Fa2Decode:
    """A planned libfa2 forward for one decode step (max_splits 64) with its workspace;
    `device`: a DeviceInfo to plan for (default: this GPU); `binding`: the libfa2 package
    whose structs `lib` takes (default: this tree's)."""

    def __init__(self, lib, q, k, device=None, binding=fa2lib):
        problem = binding.make_problem(q.dtype, q.shape, k.shape, causal=True, lib=lib)
        problem.max_splits = 64
        self.plan = lib.plan(problem, device if device is not None
                             else torch.cuda.current_device())
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
    """Median time of one call replayed alone from a CUDA graph (its K/V stays in L2
    between replays when it fits, and each replay waits for the host's launch)."""
    graph = capture(fn, args)
    return time_ms(lambda: graph.replay(), [()], warmup=10, iters=iters)


def layer_count(kv_bytes):
    """Layers of a simulated decode step: enough that their K/V together is 4x the L2
    cache (no layer's K/V is still cached when its turn comes), 2 to 8."""
    l2 = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
    return min(8, max(2, -(-4 * l2 // kv_bytes)))


def make_layers(b, sk, hq, hkv, d, tokens=1):
    """Random (Q, K, V, O) of one decode step for each of layer_count() layers."""
    layers = []
    for _ in range(layer_count(2 * b * sk * hkv * d * 2)):
        q = torch.randn(b, tokens, hq, d, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(b, sk, hkv, d, device="cuda", dtype=torch.bfloat16)
        layers.append((q, k, torch.randn_like(k), torch.empty_like(q)))
    return layers


def step_ms(calls, iters=30):
    """Time per layer of an engine's decode step: one CUDA graph making the calls
    [(fn, args), ...], one per layer (each with its own Q, K, V, O), replayed; median
    replay / layers."""
    def step():
        for fn, args in calls:
            fn(*args)
    graph = capture(step, ())
    return time_ms(lambda: graph.replay(), [()], warmup=5, iters=iters) / len(calls)


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
    ap.add_argument("--base-lib", help="a second libfa2.so timed beside --lib")
    ap.add_argument("--csv")
    args = ap.parse_args()
    lib = fa2lib.load_library(args.lib)
    base_lib = fa2lib.load_library(args.base_lib) if args.base_lib else None
    torch.manual_seed(0)
    copy = copy_bandwidth()
    print(f"libfa2 {lib.build_info()}; bf16 causal (the peers: no mask, the same work "
          f"but for the last tokens' few keys); copy bandwidth {copy:.2f} TB/s; rates in "
          f"TB/s of K+V read")
    rows = []
    for i, (b, sk, hq, hkv, d, tokens) in enumerate(SHAPES):
        kv_bytes = 2 * b * sk * hkv * d * 2
        layers = make_layers(b, sk, hq, hkv, d, tokens)
        fa2 = Fa2Decode(lib, layers[0][0], layers[0][1])
        runs = {"fa2": fa2, "flash": sdpa(SDPBackend.FLASH_ATTENTION, False, True),
                "cudnn": sdpa(SDPBackend.CUDNN_ATTENTION, False, True)}
        if base_lib:
            runs["base"] = Fa2Decode(base_lib, layers[0][0], layers[0][1])
        rate, alone = {}, {}
        for name, fn in runs.items():
            try:
                rate[name] = kv_bytes / (step_ms([(fn, x) for x in layers]) * 1e-3) / 1e12
                if i == 0:
                    alone[name] = kv_bytes / (graph_ms(fn, layers[0]) * 1e-3) / 1e12
            except RuntimeError as e:
                print(f"  {name} unavailable: {str(e).splitlines()[0]}")
                rate[name] = alone[name] = float("nan")
        line = (f"decode {b} x {sk:6d} GQA {hq}:{hkv} d={d:3d} tokens={tokens} splits="
                f"{fa2.plan.splits:2d} layers={len(layers)}  fa2 {rate['fa2']:.2f}  "
                f"flash {rate['flash']:.2f}  cudnn {rate['cudnn']:.2f}  fa2/copy "
                f"{rate['fa2'] / copy:.2f}  fa2/cudnn {rate['fa2'] / rate['cudnn']:.2f}  "
                f"fa2/flash {rate['fa2'] / rate['flash']:.2f}" +
                (f"  base {rate['base']:.2f}  fa2/base {rate['fa2'] / rate['base']:.3f}"
                 if base_lib else ""))
        row = dict(batch=b, keys=sk, heads_q=hq, heads_kv=hkv, head_dim=d, tokens=tokens,
                   splits=fa2.plan.splits, layers=len(layers), copy=copy, **rate,
                   **{f"alone_{n}": x for n, x in alone.items()})
        if i == 0:  # one call replayed alone, and where the time of such a step goes
            line += (f"\n  (one call replayed alone, K/V in L2: fa2 {alone['fa2']:.2f}  "
                     f"flash {alone['flash']:.2f}  cudnn {alone['cudnn']:.2f}  fa2/cudnn "
                     f"{alone['fa2'] / alone['cudnn']:.2f})")
            for name in ("fa2", "cudnn"):
                try:
                    parts = kernel_us(runs[name], layers[0])
                    step = kv_bytes / alone[name] / 1e6
                    line += (f"\n  ({name} kernels, us, of a {step:.1f} us replay alone: " +
                             ", ".join(f"{n} {t:.1f}" for n, t in parts.items()) + ")")
                except Exception as e:  # a diagnostic: never fails the run
                    line += f"\n  ({name} kernel times unavailable: {e})"
        print(line, flush=True)
        rows.append(row)
        del layers, runs, fa2
    for b, sk, hq, hkv, d, _ in (SHAPES[2], SHAPES[3], SHAPES[9]):  # paged, contiguous
        kv_bytes = 2 * b * sk * hkv * d * 2
        layers = make_layers(b, sk, hq, hkv, d)
        dense = Fa2Decode(lib, layers[0][0], layers[0][1])
        base = kv_bytes / (step_ms([(dense, x) for x in layers]) * 1e-3) / 1e12
        for page in (16, 64):
            paged = [Fa2PagedDecode(lib, q, k, v, page) for q, k, v, _ in layers]
            paged_layers = [(q, k, v, torch.empty_like(o)) for q, k, v, o in layers]
            paged[0](*paged_layers[0])
            dense(*layers[0])
            diff = (paged_layers[0][3].float() - layers[0][3].float()).abs().max().item()
            rate = kv_bytes / (step_ms(list(zip(paged, paged_layers))) * 1e-3) / 1e12
            print(f"decode paged {page:2d}, {b} x {sk} GQA {hq}:{hkv}: {rate:.2f} TB/s, "
                  f"contiguous {base:.2f}, paged/contiguous {rate / base:.3f} (max diff "
                  f"{diff:.0e})",
                  flush=True)
            rows.append(dict(batch=b, keys=sk, heads_q=hq, heads_kv=hkv, head_dim=d,
                             page=page, paged=rate, contiguous=base))
            del paged, paged_layers
        del layers, dense

    if args.csv:
        write_csv(args.csv, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
