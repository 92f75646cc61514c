#!/usr/bin/env python3
"""One question: flash-attn's test_flash_attn_kvcache case [1-131072-64-False-False-256-
0.0-False-True-False-False-False-True-mqa-0-dtype0] (fp16, MQA 6:1, d 64, one new token
appended into a paged cache of 256-row pages, up to 131072 keys, num_splits 0) failed the
conformance run of 2026-12-06 (its output error above 3x PyTorch's fp16 error + 1e-5),
the one failure of 8,408 judged cases. This prints, per dtype and trial, the max error of
flash_attn_with_kvcache at num_splits 0, 1 and 4 and of an fp16/bf16 PyTorch reference
against a float32 one, to tell splitting, the append and plain rounding apart.

    FA2_LIBRARY=build/libfa2.so python3 bench/lab/kvcache_long_keys.py
"""
import math
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "python"))
from libfa2.flash_attn_interface import flash_attn_with_kvcache  # noqa: E402


def trial(dtype, full):
    """One draw: errors against float32 of libfa2 at num_splits 0, 1, 4 and of PyTorch."""
    dev = "cuda"
    b, hq, hk, d, sk, page = 2, 6, 1, 64, 131072, 256
    q = torch.randn(b, 1, hq, d, device=dev, dtype=dtype)
    k, v = (torch.randn(b, 1, hk, d, device=dev, dtype=dtype) for _ in range(2))
    pages = 3 * sk // page
    k_cache, v_cache = (torch.randn(pages, page, hk, d, device=dev, dtype=dtype)
                        for _ in range(2))
    table = torch.randperm(pages, dtype=torch.int32, device=dev)[:b * sk // page].view(b, -1)
    lens = torch.full((b,), sk - 1, dtype=torch.int32, device=dev) if full else \
        torch.randint(0, sk, (b,), dtype=torch.int32, device=dev)
    outs = {}
    for splits in (0, 1, 4):  # the append writes the same rows each time
        outs[splits] = flash_attn_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=lens,
                                               block_table=table, num_splits=splits)
    keys = k_cache[table.long()].view(b, sk, d).float()
    values = v_cache[table.long()].view(b, sk, d).float()
    mask = torch.arange(sk, device=dev)[None, :] < (lens + 1)[:, None]

    def attend(qq, kk, vv):
        s = torch.einsum("bqhd,bkd->bhqk", qq, kk) / math.sqrt(d)
        s = s.masked_fill(~mask[:, None, None, :], float("-inf"))
        return torch.einsum("bhqk,bkd->bqhd", torch.softmax(s, -1), vv)
    ref = attend(q.float(), keys, values)
    low = attend(q, keys.to(dtype), values.to(dtype)).float()
    errors = " ".join(f"splits={n} {(o.float() - ref).abs().max().item():.3e}"
                      for n, o in outs.items())
    print(f"{str(dtype)[6:]:8} keys {(lens + 1).tolist()}: torch {str(dtype)[6:]} "
          f"{(low - ref).abs().max().item():.3e}; libfa2 {errors}; |ref| max "
          f"{ref.abs().max().item():.3e}", flush=True)


def main():
    torch.manual_seed(0)
    for dtype in (torch.float16, torch.bfloat16):
        for i in range(4):
            trial(dtype, full=i == 0)


if __name__ == "__main__":
    main()
