#!/usr/bin/env python3
"""Serving with libfa2 from Python, the way an engine's attention layer runs:

1. prefill: the new prompts' keys and values go into a paged KV cache
   (libfa2.cache_write), then their attention runs as one packed variable-length
   batch over the pages (flash_attn_varlen_func with block_table=);
2. decode: each step appends every sequence's new key and value to its pages and
   attends over the cache in one call (flash_attn_with_kvcache with k=, v=), captured
   once in a CUDA graph and replayed with new tokens and lengths.

Each phase is checked against a float32 reference on the keys gathered from the pages.

    FA2_LIBRARY=build/libfa2.so python3 examples/python/serve_step.py

Needs torch and a CUDA GPU; without them it says so and exits 77 (skipped).
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "python"))

try:
    import torch
except ImportError:
    print("serve_step.py needs PyTorch (and a CUDA GPU); skipping")
    sys.exit(77)
if not torch.cuda.is_available():
    print("serve_step.py needs a CUDA GPU; skipping")
    sys.exit(77)

import libfa2 as fa2  # noqa: E402
from libfa2.flash_attn_interface import (flash_attn_varlen_func,  # noqa: E402
                                         flash_attn_with_kvcache)

HEADS_Q, HEADS_KV, HEAD_DIM = 16, 4, 128
PAGE, PAGES_PER_SEQ = 16, 64          # at most 1024 keys per sequence
PROMPTS = [37, 512, 1, 300]           # the new requests' prompt lengths
DECODE_STEPS = 8
DTYPE = torch.bfloat16


def reference(q, k, v):
    """Causal (bottom-right) GQA attention in float32: q [sq, hq, d], k/v [sk, hkv, d]."""
    group = HEADS_Q // HEADS_KV
    qf = q.float().transpose(0, 1)
    kf = k.float().transpose(0, 1).repeat_interleave(group, 0)
    vf = v.float().transpose(0, 1).repeat_interleave(group, 0)
    s = qf @ kf.transpose(-1, -2) / HEAD_DIM ** 0.5
    sq, sk = q.shape[0], k.shape[0]
    i = torch.arange(sq, device=q.device)[:, None] + (sk - sq)
    j = torch.arange(sk, device=q.device)[None, :]
    s = s.masked_fill(j > i, float("-inf"))
    return (torch.softmax(s, -1) @ vf).transpose(0, 1)


def rel(x, ref):
    return ((x.float() - ref).norm() / ref.norm()).item()


class PagedCache:
    """The engine's KV cache: a pool of pages, each sequence's page table, its length."""

    def __init__(self, batch):
        num_pages = batch * PAGES_PER_SEQ + 8
        self.k = torch.zeros(num_pages, PAGE, HEADS_KV, HEAD_DIM, device="cuda", dtype=DTYPE)
        self.v = torch.zeros_like(self.k)
        # pages handed out in a shuffled order, as a long-running engine's would be
        order = torch.randperm(num_pages, device="cuda")[:batch * PAGES_PER_SEQ]
        self.table = order.view(batch, PAGES_PER_SEQ).to(torch.int32).contiguous()
        self.lengths = torch.zeros(batch, dtype=torch.int32, device="cuda")

    def slots(self, b, start, n):
        """The cache slots (page * PAGE + row) of sequence b's keys start .. start+n-1."""
        pos = torch.arange(start, start + n, device="cuda")
        return (self.table[b][pos // PAGE].long() * PAGE + pos % PAGE).to(torch.int32)

    def keys(self, b):
        pos = torch.arange(int(self.lengths[b]), device="cuda")
        pages = self.table[b][pos // PAGE].long()
        return self.k[pages, pos % PAGE], self.v[pages, pos % PAGE]


def prefill(cache):
    """The prompts' K/V into the pages, then their attention as one packed batch."""
    total = sum(PROMPTS)
    q = torch.randn(total, HEADS_Q, HEAD_DIM, device="cuda", dtype=DTYPE)
    k = torch.randn(total, HEADS_KV, HEAD_DIM, device="cuda", dtype=DTYPE)
    v = torch.randn_like(k)
    cu = torch.tensor([0] + list(torch.tensor(PROMPTS).cumsum(0)), dtype=torch.int32,
                      device="cuda")
    slots = torch.cat([cache.slots(b, 0, n) for b, n in enumerate(PROMPTS)])
    fa2.cache_write(k, v, slots, cache.k, cache.v, PAGES_PER_SEQ, PAGES_PER_SEQ * PAGE)
    cache.lengths.copy_(torch.tensor(PROMPTS, dtype=torch.int32))
    o = flash_attn_varlen_func(q, cache.k, cache.v, cu, cu, max(PROMPTS), PAGES_PER_SEQ * PAGE,
                               causal=True, block_table=cache.table)
    worst = max(rel(o[cu[b]:cu[b + 1]], reference(q[cu[b]:cu[b + 1]], *cache.keys(b)))
                for b in range(len(PROMPTS)))
    print(f"prefill: {len(PROMPTS)} prompts of {PROMPTS} tokens, paged K/V (pages of {PAGE}):"
          f" worst relative error {worst:.1e}")
    return worst


def decode(cache):
    """Decode steps: one new token per sequence, appended and attended in one call,
    captured in a CUDA graph that every step replays with new inputs."""
    batch = len(PROMPTS)
    q = torch.zeros(batch, 1, HEADS_Q, HEAD_DIM, device="cuda", dtype=DTYPE)
    k_new = torch.zeros(batch, 1, HEADS_KV, HEAD_DIM, device="cuda", dtype=DTYPE)
    v_new = torch.zeros_like(k_new)

    def step():
        return flash_attn_with_kvcache(q, cache.k, cache.v, k=k_new, v=v_new,
                                       cache_seqlens=cache.lengths, block_table=cache.table,
                                       causal=True)

    # Warm up outside the graph (plans, and the small index tensors the call keeps), on a
    # side stream as torch's graph capture wants; the warm-up writes garbage rows past each
    # sequence's length, which the real steps overwrite.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = step()

    worst = 0.0
    for _ in range(DECODE_STEPS):
        q.copy_(torch.randn_like(q))
        k_new.copy_(torch.randn_like(k_new))
        v_new.copy_(torch.randn_like(v_new))
        graph.replay()                   # writes the new K/V, then attention over them
        cache.lengths += 1               # the engine's bookkeeping, after the step
        for b in range(batch):
            worst = max(worst, rel(out[b], reference(q[b], *cache.keys(b))))
    print(f"decode: {DECODE_STEPS} graph replays, {batch} sequences now "
          f"{cache.lengths.tolist()} tokens long: worst relative error {worst:.1e}")
    return worst


def main():
    torch.manual_seed(0)
    print(f"{fa2.build_info()}\nlibrary: {fa2.library().path}")
    cache = PagedCache(len(PROMPTS))
    worst = max(prefill(cache), decode(cache))
    ok = worst < 2e-2  # bf16 rounding of the output alone is about 4e-3
    print(f"serve_step: {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
