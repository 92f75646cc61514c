#!/usr/bin/env python3
"""Packed variable-length batches and paged KV caches, timed side by side on one GPU
(the acceptance figures of the inference issue), bf16, d = 128, GQA 32:8, causal:

  varlen    8 to 64 sequences of random lengths 128..8k: libfa2's fa2_forward_varlen
            against PyTorch's own FlashAttention-2 varlen kernel
            (torch.ops.aten._flash_attention_forward with cum_seq_q / cum_seq_k);
  equal     the same number of sequences, all of one length: varlen against libfa2's
            dense kernel on the same work;
            (both timed in alternating rounds; with --base-lib, the base build's
            varlen call too);
  paged     a batch over a paged cache (page sizes 16 and 64; pages shuffled, and in
            order) against the same batch with contiguous packed K/V, timed in
            alternating rounds (with --base-lib, the base build's paged calls too);
  decode    one query token per sequence over a paged cache (page 16): time and K/V
            read rate, and with --base-lib the same step on a second build, alternating
            (what a change costs a decode step);
  mixed     a serving step's batch in one call: 56 decode rows (one query token, 1..32k
            keys) and 2 prefill chunks (2k queries over 8k cached keys), packed K/V:
            libfa2's one varlen call against its two separate calls (the decode rows,
            then the chunks; the sum of their times) and PyTorch's varlen kernel on the
            same batch, alternating.

Inputs are made with torch; times are medians of CUDA-event-timed calls (sdpa_compare's
time_ms). Prints a table, optionally writes CSV.

    python3 bench/varlen_compare.py --lib build/libfa2.so [--csv out.csv] [--seed 0]
        [--base-lib other/libfa2.so] [--pages 16,64]
        [--rows varlen,equal,paged,decode,mixed]
"""
import argparse
import os
import random
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sdpa_compare import alternate, fa2lib, ratio, time_ms, write_csv  # noqa: E402

HQ, HKV, D = 32, 8, 128
ROUNDS = 7  # alternating rounds of each comparison


def causal_flops(lens):
    """Forward FLOPs of causal attention over sequences of these lengths, counted as
    sdpa_compare does: half of 4 * s^2 * d per head."""
    return sum(2 * s * s * D * HQ for s in lens)


def packed_inputs(lens, dt):
    cu = torch.tensor([0] + [sum(lens[:i + 1]) for i in range(len(lens))], dtype=torch.int32,
                      device="cuda")
    total = int(cu[-1])
    q = torch.randn(total, HQ, D, device="cuda", dtype=dt)
    k = torch.randn(total, HKV, D, device="cuda", dtype=dt)
    v = torch.randn_like(k)
    return cu, q, k, v


class Varlen:
    """A planned fa2_forward_varlen on packed (or paged) tensors."""

    def __init__(self, lib, q, k, lens, pages=None):
        problem = fa2lib.make_varlen_problem(
            q.dtype, q.shape[0], 0 if pages else k.shape[0], HQ, HKV, D, batch=len(lens),
            max_seqlen_q=max(lens), max_seqlen_k=max(lens), causal=True, pages=pages, lib=lib)
        self.plan = lib.plan(problem, torch.cuda.current_device())
        self.workspace = torch.empty(max(self.plan.workspace_bytes, 16), dtype=torch.uint8,
                                     device="cuda")

    def __call__(self, q, k, v, o, cu_q, cu_k, used=None, table=None):
        self.plan.forward_varlen(q, k, v, o, cu_q, cu_k, None, used, table, self.workspace,
                                 stream=torch.cuda.current_stream().cuda_stream)


def decode_row(lib, base, batch, keys, page, dt):
    """One decode step (a query token per sequence, `keys` keys each, paged cache):
    microseconds and K/V read rate, for this library and (A/B, alternating) `base`."""
    per_seq = (keys + page - 1) // page
    num_pages = batch * per_seq
    table = torch.randperm(num_pages, device="cuda").view(batch, per_seq).to(torch.int32)
    k_cache = torch.randn(num_pages, page, HKV, D, device="cuda", dtype=dt)
    v_cache = torch.randn_like(k_cache)
    q = torch.randn(batch, HQ, D, device="cuda", dtype=dt)
    o = torch.empty_like(q)
    cu = torch.arange(batch + 1, dtype=torch.int32, device="cuda")
    used = torch.full((batch,), keys, dtype=torch.int32, device="cuda")
    stride = k_cache.stride(0)
    calls = {}
    for name, library in (("fa2", lib), ("base", base)):
        if library is None:
            continue
        problem = fa2lib.make_varlen_problem(
            dt, batch, 0, HQ, HKV, D, batch=batch, max_seqlen_q=1, max_seqlen_k=keys,
            causal=True, pages=(page, num_pages, per_seq, stride, stride), lib=library)
        if hasattr(problem, "max_splits"):  # the decode kernel may split the keys
            problem.max_splits = 64
        plan = library.plan(problem, torch.cuda.current_device())
        ws = torch.empty(max(plan.workspace_bytes, 16), dtype=torch.uint8, device="cuda")
        calls[name] = (lambda plan=plan, ws=ws: plan.forward_varlen(
            q, k_cache, v_cache, o, cu, None, None, used, table, ws,
            stream=torch.cuda.current_stream().cuda_stream))
    times = {name: [] for name in calls}
    for _ in range(3):  # alternating rounds; the best median of each
        for name, fn in calls.items():
            times[name].append(time_ms(fn, [()], warmup=10, iters=100))
    us = {name: min(t) * 1e3 for name, t in times.items()}
    kv_bytes = 2 * batch * keys * HKV * D * 2
    text = "  ".join(f"{n} {t:7.1f} us {kv_bytes / (t * 1e-6) / 1e12:5.2f} TB/s"
                     for n, t in us.items())
    ratio = us["fa2"] / us["base"] if "base" in us else float("nan")
    print(f"decode paged {page}, {batch} x {keys}{'':18} {text}"
          + (f"   time fa2/base {ratio:5.3f}" if "base" in us else ""), flush=True)
    return dict(case=f"decode {batch} x {keys} page {page}", fa2_us=us["fa2"],
                base_us=us.get("base", ""), ratio=ratio)


class Packed:
    """A planned fa2_forward_varlen over packed Q and K/V of these (query, key) lengths
    (causal, bottom-right aligned), max_splits splits allowed; called on its own
    tensors."""

    def __init__(self, lib, lens_q, lens_k, dt, q=None, k=None, v=None):
        self.cu_q = torch.tensor([0] + [sum(lens_q[:i + 1]) for i in range(len(lens_q))],
                                 dtype=torch.int32, device="cuda")
        self.cu_k = torch.tensor([0] + [sum(lens_k[:i + 1]) for i in range(len(lens_k))],
                                 dtype=torch.int32, device="cuda")
        total_q, total_k = int(self.cu_q[-1]), int(self.cu_k[-1])
        self.q = q if q is not None else torch.randn(total_q, HQ, D, device="cuda", dtype=dt)
        self.k = k if k is not None else torch.randn(total_k, HKV, D, device="cuda", dtype=dt)
        self.v = v if v is not None else torch.randn_like(self.k)
        self.o = torch.empty_like(self.q)
        self.max_q, self.max_k = max(lens_q), max(lens_k)
        problem = fa2lib.make_varlen_problem(
            dt, total_q, total_k, HQ, HKV, D, batch=len(lens_q), max_seqlen_q=self.max_q,
            max_seqlen_k=self.max_k, causal=True, lib=lib)
        if hasattr(problem, "max_splits"):
            problem.max_splits = 64
        self.plan = lib.plan(problem, torch.cuda.current_device())
        self.workspace = torch.empty(max(self.plan.workspace_bytes, 16), dtype=torch.uint8,
                                     device="cuda")

    def __call__(self):
        self.plan.forward_varlen(self.q, self.k, self.v, self.o, self.cu_q, self.cu_k, None,
                                 None, None, self.workspace,
                                 stream=torch.cuda.current_stream().cuda_stream)


def visible_flops(lens_q, lens_k):
    """Forward FLOPs of causal (bottom-right) attention: 4 * d per visible (query, key)
    pair per head."""
    pairs = sum(sum(k - q + i + 1 for i in range(q)) for q, k in zip(lens_q, lens_k))
    return 4 * pairs * D * HQ


def mixed_row(lib, rng, dt):
    """One varlen call over 56 decode rows and 2 prefill chunks against the two separate
    calls and PyTorch's varlen kernel (alternating rounds)."""
    dec_k = [rng.randint(1, 32768) for _ in range(56)]
    pre_q, pre_k = [2048, 2048], [8192 + 2048] * 2
    lens_q, lens_k = [1] * 56 + pre_q, dec_k + pre_k
    mixed = Packed(lib, lens_q, lens_k, dt)
    nq = 56  # the decode rows' queries, then the chunks'
    nk = sum(dec_k)
    decode = Packed(lib, [1] * 56, dec_k, dt, mixed.q[:nq], mixed.k[:nk], mixed.v[:nk])
    prefill = Packed(lib, pre_q, pre_k, dt, mixed.q[nq:], mixed.k[nk:], mixed.v[nk:])
    cu_q, cu_k = mixed.cu_q, mixed.cu_k

    def torch_call():
        torch.ops.aten._flash_attention_forward(mixed.q, mixed.k, mixed.v, cu_q, cu_k,
                                                mixed.max_q, mixed.max_k, 0.0, True, False)
    calls = {"fa2": mixed, "decode": decode, "prefill": prefill, "torch": torch_call}
    times = dict(zip(calls, alternate(list(calls.values()), [()], ROUNDS, 20)))
    med = {k: statistics.median(t) for k, t in times.items()}
    separate = med["decode"] + med["prefill"]
    fl = visible_flops(lens_q, lens_k)
    name = "mixed 56 decode rows + 2 chunks of 2k/10k"
    print(f"{name:44} fa2 {med['fa2'] * 1e3:8.1f} us  separate {separate * 1e3:8.1f} us "
          f"(decode {med['decode'] * 1e3:.1f} + prefill {med['prefill'] * 1e3:.1f})  torch "
          f"{med['torch'] * 1e3:8.1f} us   separate/fa2 {separate / med['fa2']:5.3f}  "
          f"torch/fa2 {med['torch'] / med['fa2']:5.3f}  (plan splits {mixed.plan.splits}, "
          f"fa2 {fl / (med['fa2'] * 1e-3) / 1e12:.1f} TFLOP/s)", flush=True)
    return dict(case=name, fa2_us=med["fa2"] * 1e3, separate_us=separate * 1e3,
                torch_us=med["torch"] * 1e3, ratio=separate / med["fa2"])


def torch_varlen(q, k, v, cu, max_len):
    return torch.ops.aten._flash_attention_forward(q, k, v, cu, cu, max_len, max_len, 0.0, True,
                                                   False)


def compare(name, fl, calls):
    """Times `calls` ({name: fn}, "fa2" first, then the reference, then optionally
    "base") in ROUNDS alternating rounds; prints TFLOP/s of the medians, fa2 over the
    reference (ratio of medians, range of the per-round ratios) and over base."""
    times = dict(zip(calls, alternate(list(calls.values()), [()], ROUNDS, 20)))
    tf = {k: fl / (statistics.median(t) * 1e-3) / 1e12 for k, t in times.items()}
    ref = list(calls)[1]
    speed, lo, hi = ratio(times[ref], times["fa2"])
    text = (f"{name:44} " + "  ".join(f"{k} {v:7.1f}" for k, v in tf.items()) +
            f"   fa2/{ref} {speed:5.3f} (rounds {lo:.3f}..{hi:.3f})")
    if "base" in times:
        text += f"   fa2/base {ratio(times['base'], times['fa2'])[0]:5.3f}"
    print(text, flush=True)
    return dict(case=name, **{f"{k}_tflops": v for k, v in tf.items()}, ratio=speed)


def varlen_calls(lib, base, q, k, v, o, cu, lens, reference):
    """compare()'s calls: this library's varlen call as "fa2", the reference (name, fn),
    the base build's varlen call as "base" when given."""
    calls = {}
    for name, library in (("fa2", lib), ("base", base)):
        if library is not None:
            call = Varlen(library, q, k, lens)
            calls[name] = lambda call=call: call(q, k, v, o, cu, cu)
        if name == "fa2":
            calls[reference[0]] = reference[1]
    return calls


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default=os.environ.get("FA2_LIBRARY", "build/libfa2.so"))
    ap.add_argument("--csv")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--base-lib", help="a second libfa2.so timed against --lib on every row "
                    "(same binding: the structs must match)")
    ap.add_argument("--pages", default="16,64", help="page sizes of the paged rows")
    ap.add_argument("--rows", default="varlen,equal,paged,decode,mixed",
                    help="which groups of rows to time (comma-separated)")
    args = ap.parse_args()
    groups = set(args.rows.split(","))
    unknown = groups - {"varlen", "equal", "paged", "decode", "mixed"}
    if unknown:
        ap.error(f"--rows: no such group {', '.join(sorted(unknown))}")
    lib = fa2lib.load_library(args.lib)
    base = fa2lib.load_library(args.base_lib) if args.base_lib else None
    rng = random.Random(args.seed)
    torch.manual_seed(args.seed)
    dt = torch.bfloat16
    rows = []
    print(f"libfa2 {lib.build_info()}; bf16 d={D} GQA {HQ}:{HKV} causal; TFLOP/s")

    for n in (8, 16, 32, 64):  # varlen against PyTorch's FlashAttention-2 varlen
        lens = [rng.randint(128, 8192) for _ in range(n)]
        if "varlen" not in groups:
            continue  # the lengths are drawn all the same: later rows keep theirs
        cu, q, k, v = packed_inputs(lens, dt)
        o = torch.empty_like(q)
        try:
            torch_varlen(q, k, v, cu, max(lens))
        except (RuntimeError, TypeError) as e:
            print(f"  torch varlen unavailable: {e}")
            continue
        calls = varlen_calls(lib, base, q, k, v, o, cu, lens,
                             ("torch", lambda: torch_varlen(q, k, v, cu, max(lens))))
        rows.append(compare(f"varlen {n} seqs, lengths 128..8k", causal_flops(lens), calls))

    equal = ((8, 2048), (16, 4096), (4, 8192)) if "equal" in groups else ()
    for n, s in equal:  # varlen against dense, equal lengths
        lens = [s] * n
        cu, q, k, v = packed_inputs(lens, dt)
        o = torch.empty_like(q)
        q4, k4, v4, o4 = (t.view(n, s, *t.shape[1:]) for t in (q, k, v, o))
        problem = fa2lib.make_problem(dt, q4.shape, k4.shape, causal=True, lib=lib)
        dense = lib.plan(problem, torch.cuda.current_device())
        stream = torch.cuda.current_stream().cuda_stream
        calls = varlen_calls(lib, base, q, k, v, o, cu, lens,
                             ("dense", lambda: dense.forward(q4, k4, v4, o4, stream=stream)))
        rows.append(compare(f"equal {n} x {s}: varlen over dense", causal_flops(lens), calls))

    # paged against contiguous packed K/V, one batch per page size: pages shuffled over
    # the whole cache (a long-running engine's worst case), then each sequence's pages in
    # order (a fresh prefill's): the same page lookups, without the addresses' scatter.
    # Timed in alternation for ROUNDS rounds (clock drift hits all alike); the ratio is
    # of the medians, the spread the range of the per-round ratios.
    pages = [int(x) for x in args.pages.split(",")] if "paged" in groups else []
    for page in pages:
        lens = [rng.randint(512, 8192) for _ in range(16)]
        cu, q, k, v = packed_inputs(lens, dt)
        used = torch.tensor(lens, dtype=torch.int32, device="cuda")
        per_seq = max((x + page - 1) // page for x in lens)
        num_pages = len(lens) * per_seq
        packed = Varlen(lib, q, k, lens)
        o_ref = torch.empty_like(q)
        packed(q, k, v, o_ref, cu, cu)
        calls = {"contiguous": lambda: packed(q, k, v, o_ref, cu, cu)}
        diffs = {}
        for order in ("shuffled", "in order"):
            perm = (torch.randperm(num_pages, device="cuda") if order == "shuffled"
                    else torch.arange(num_pages, device="cuda"))
            table = perm.view(len(lens), per_seq).to(torch.int32).contiguous()
            k_cache = torch.empty(num_pages, page, HKV, D, device="cuda", dtype=dt)
            v_cache = torch.empty_like(k_cache)
            for b, x in enumerate(lens):  # the same keys, scattered into the pages
                keys = torch.arange(x, device="cuda")
                slots = table[b][keys // page].long()
                k_cache[slots, keys % page] = k[int(cu[b]):int(cu[b]) + x]
                v_cache[slots, keys % page] = v[int(cu[b]):int(cu[b]) + x]
            stride = k_cache.stride(0)
            for name, library in ((order, lib), (f"base {order}", base)):
                if library is None:
                    continue
                paged = Varlen(library, q, k_cache, lens,
                               pages=(page, num_pages, per_seq, stride, stride))
                o = torch.empty_like(q)
                paged(q, k_cache, v_cache, o, cu, None, used, table)
                diffs[name] = ((o.float() - o_ref.float()).norm() / o_ref.float().norm()).item()
                calls[name] = (lambda paged=paged, kc=k_cache, vc=v_cache, o=o, t=table:
                               paged(q, kc, vc, o, cu, None, used, t))
        times = dict(zip(calls, alternate(list(calls.values()), [()], ROUNDS, 20)))
        fl = causal_flops(lens)
        t_contiguous = statistics.median(times["contiguous"])
        for order in ("shuffled", "in order"):
            t = statistics.median(times[order])
            speed, lo, hi = ratio(times["contiguous"], times[order])
            name = f"paged, page {page} {order}, 16 seqs 512..8k (diff {diffs[order]:.0e})"
            print(f"{name:44} fa2 {fl / (t * 1e-3) / 1e12:7.1f}  contiguous "
                  f"{fl / (t_contiguous * 1e-3) / 1e12:7.1f}   fa2/contiguous "
                  f"{speed:5.3f} (rounds {lo:.3f}..{hi:.3f})", flush=True)
            rows.append(dict(case=name, fa2_tflops=fl / (t * 1e-3) / 1e12,
                             contiguous_tflops=fl / (t_contiguous * 1e-3) / 1e12,
                             ratio=t_contiguous / t))
            if base is not None:  # the same paged call on the base build, alternating
                speed, lo, hi = ratio(times[f"base {order}"], times[order])
                print(f"{'  base build, ' + order:44} fa2/base {speed:5.3f} (rounds "
                      f"{lo:.3f}..{hi:.3f}; base/contiguous "
                      f"{ratio(times['contiguous'], times['base ' + order])[0]:5.3f})",
                      flush=True)

    decode = ((1, 8192), (16, 8192), (64, 4096)) if "decode" in groups else ()
    for batch, keys in decode:  # paged decode, page 16
        rows.append(decode_row(lib, base, batch, keys, 16, dt))

    if "mixed" in groups:
        rows.append(mixed_row(lib, rng, dt))

    if args.csv:
        write_csv(args.csv, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
