#!/usr/bin/env python3
"""What a compiled attention kernel of the same GPU pays for logit softcap: PyTorch's
FlexAttention (Triton) with and without `cap * tanh(s / cap)` as its score_mod, on
variants_compare's 2 x 8k causal shape (16 heads, d = 128, bf16). Prints each time and the
ratio, for docs/history/performance-log.md beside libfa2's own softcap-over-plain ratio."""
import argparse
import statistics

import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seqlen", type=int, default=8192)
    ap.add_argument("--cap", type=float, default=30.0)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=10)
    args = ap.parse_args()
    torch.manual_seed(0)
    b, h, s, d = 2, 16, args.seqlen, 128
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    mask = create_block_mask(lambda b, h, qi, ki: qi >= ki, None, None, s, s)
    cap = args.cap

    def softcap(score, b, h, qi, ki):
        return cap * torch.tanh(score / cap)

    attend = torch.compile(flex_attention)
    calls = {"plain": lambda: attend(q, k, v, block_mask=mask),
             f"softcap {cap:g}": lambda: attend(q, k, v, score_mod=softcap, block_mask=mask)}
    for call in calls.values():
        call()  # compile
    torch.cuda.synchronize()
    times = {name: [] for name in calls}
    for _ in range(args.rounds):  # alternating, so that both see the same clocks
        for name, call in calls.items():
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(args.iters):
                call()
            end.record()
            torch.cuda.synchronize()
            times[name].append(start.elapsed_time(end) / args.iters)
    flops = 4 * b * h * s * s * d / 2  # causal: half the blocks
    base = statistics.median(times["plain"])
    for name, t in times.items():
        med = statistics.median(t)
        print(f"flex {name:12s} {med * 1e3:8.1f} us  {flops / med / 1e9:6.1f} TFLOP/s  "
              f"{med / base:.3f} x plain")


if __name__ == "__main__":
    main()
