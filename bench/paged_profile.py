#!/usr/bin/env python3
"""One paged-prefill forward and the same batch with contiguous packed K/V, once each,
for a profiler (varlen_compare's paged case: 16 sequences of 512..8k, bf16, d = 128,
GQA 32:8, causal, page 16 shuffled). Under Nsight Compute:
    ncu --kernel-name regex:fwd_sm90 --section WarpStateStats ... \\
        python3 bench/paged_profile.py --lib build/libfa2.so
The contiguous call's kernel comes first, the paged one second."""
import argparse
import os
import random
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from varlen_compare import HKV, D, Varlen, fa2lib, packed_inputs  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default=os.environ.get("FA2_LIBRARY", "build/libfa2.so"))
    ap.add_argument("--page", type=int, default=16)
    args = ap.parse_args()
    lib = fa2lib.load_library(args.lib)
    rng = random.Random(0)
    torch.manual_seed(0)
    dt, page = torch.bfloat16, args.page
    lens = [rng.randint(512, 8192) for _ in range(16)]
    cu, q, k, v = packed_inputs(lens, dt)
    used = torch.tensor(lens, dtype=torch.int32, device="cuda")
    per_seq = max((x + page - 1) // page for x in lens)
    num_pages = len(lens) * per_seq
    table = torch.randperm(num_pages, device="cuda").view(len(lens), per_seq).to(torch.int32)
    k_cache = torch.randn(num_pages, page, HKV, D, device="cuda", dtype=dt)
    v_cache = torch.randn_like(k_cache)
    stride = k_cache.stride(0)
    packed = Varlen(lib, q, k, lens)
    paged = Varlen(lib, q, k_cache, lens, pages=(page, num_pages, per_seq, stride, stride))
    o = torch.empty_like(q)
    packed(q, k, v, o, cu, cu)
    paged(q, k_cache, v_cache, o, cu, None, used, table.contiguous())
    torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
