#!/usr/bin/env python3
"""Training with libfa2 from Python: a small causal self-attention block whose
attention is fa2.attention (forward + fa2_backward through torch.autograd), trained a
few steps next to the same block on torch's SDPA, from the same initial weights.

    FA2_LIBRARY=build/libfa2.so python3 examples/python/train_step.py

Q, K and V are zero-copy BSHD views of one packed projection [b, s, 3, h, d]: libfa2
takes their strides as they are. Needs torch and a CUDA GPU; without them it says so
and exits 0.
"""
import copy
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "python"))

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:
    print("train_step.py needs PyTorch (and a CUDA GPU); skipping")
    sys.exit(0)
if not torch.cuda.is_available():
    print("train_step.py needs a CUDA GPU; skipping")
    sys.exit(0)

import libfa2 as fa2  # noqa: E402


class SelfAttention(nn.Module):
    def __init__(self, dim, heads, kv_heads, use_fa2):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.qkv = nn.Linear(dim, (heads + 2 * kv_heads) * self.head_dim, bias=False)
        self.out = nn.Linear(dim, dim, bias=False)
        self.use_fa2 = use_fa2

    def forward(self, x):
        b, s, _ = x.shape
        h, hkv, d = self.heads, self.kv_heads, self.head_dim
        qkv = self.qkv(x)
        q = qkv[..., :h * d].view(b, s, h, d)             # BSHD views, no copies
        k = qkv[..., h * d:(h + hkv) * d].view(b, s, hkv, d)
        v = qkv[..., (h + hkv) * d:].view(b, s, hkv, d)
        if self.use_fa2:
            o = fa2.attention(q, k, v, causal=True)         # GQA handled by libfa2
        else:
            rep = h // hkv
            o = F.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2).repeat_interleave(rep, 1),
                v.transpose(1, 2).repeat_interleave(rep, 1), is_causal=True).transpose(1, 2)
        return self.out(o.reshape(b, s, h * d))


def main():
    torch.manual_seed(0)
    dtype, dim, heads, kv_heads, b, s = torch.bfloat16, 512, 8, 2, 4, 1024
    print(f"libfa2 {fa2.library().version_string()} from {fa2.library().path}")
    ours = SelfAttention(dim, heads, kv_heads, use_fa2=True).cuda().to(dtype)
    ref = copy.deepcopy(ours)
    ref.use_fa2 = False
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-3) for m in (ours, ref)]
    x = torch.randn(b, s, dim, device="cuda", dtype=dtype)
    target = torch.randn(b, s, dim, device="cuda", dtype=dtype)
    for step in range(5):
        losses = []
        for model, opt in zip((ours, ref), opts):
            opt.zero_grad(set_to_none=True)
            loss = F.mse_loss(model(x).float(), target.float())
            loss.backward()
            opt.step()
            losses.append(loss.item())
        print(f"step {step}: loss fa2 {losses[0]:.5f}  sdpa {losses[1]:.5f}  "
              f"diff {abs(losses[0] - losses[1]):.1e}")
    g_ours, g_ref = ours.qkv.weight, ref.qkv.weight
    drift = ((g_ours.float() - g_ref.float()).norm() / g_ref.float().norm()).item()
    print(f"qkv weights after 5 steps: relative difference fa2 vs SDPA {drift:.1e}")


if __name__ == "__main__":
    main()
