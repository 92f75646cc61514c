#!/usr/bin/env python3
"""One paged-prefill forward and the same batch with contiguous packed K/V, once each,
for a profiler (varlen_compare's paged case: 16 sequences of 512..8k, bf16, d = 128,
GQA 32:8, causal, page 16 shuffled). Under Nsight Compute:
    ncu --kernel-name regex:fwd_sm90 --section WarpStateStats ... \\
        python3 bench/lab/paged_profile.py --lib build/libfa2.so
The contiguous call's kernel comes first, the paged one second. With --equal N S:
instead, N sequences of length S as a packed batch and as a dense one (varlen_compare's
equal-length rows), the packed call first."""
import argparse
import os
import random
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from varlen_compare import HKV, D, Varlen, fa2lib, packed_inputs  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default=os.environ.get("FA2_LIBRARY", "build/libfa2.so"))
    ap.add_argument("--page", type=int, default=16)
    ap.add_argument("--equal", type=int, nargs=2, metavar=("N", "S"))
    args = ap.parse_args()
    lib = fa2lib.load_library(args.lib)
    rng = random.Random(0)
    torch.manual_seed(0)
    dt, page = torch.bfloat16, args.page
    if args.equal:
        return equal_lengths(lib, dt, *args.equal)
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


def equal_lengths(lib, dt, n, s):
    cu, q, k, v = packed_inputs([s] * n, dt)
    o = torch.empty_like(q)
    Varlen(lib, q, k, [s] * n)(q, k, v, o, cu, cu)
    q4, k4, v4, o4 = (t.view(n, s, *t.shape[1:]) for t in (q, k, v, o))
    problem = fa2lib.make_problem(dt, q4.shape, k4.shape, causal=True, lib=lib)
    lib.plan(problem, torch.cuda.current_device()).forward(
        q4, k4, v4, o4, stream=torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
