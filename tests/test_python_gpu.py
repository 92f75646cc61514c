#!/usr/bin/env python3
"""The Python binding on a GPU: fa2.attention (forward and autograd backward) against
torch.nn.functional.scaled_dot_product_attention computed in float32 from the same
inputs. One line per case:

    PASS bf16 b=2 sq=256 sk=256 hq=8 hkv=8 d=64 causal=0 layout=bshd  o 3.1e-03 dq 4.0e-03 dk ... dv ...

Relative error = ||x - ref|| / ||ref|| (Frobenius), bound 2e-2 for O and each gradient.
Exit 0 all passed, 1 a failure, 77 skipped (no torch or no CUDA device: ctest
SKIP_RETURN_CODE). Run as ctest fa2_python_gpu (label gpu), or by hand:

    FA2_LIBRARY=build/libfa2.so python3 tests/test_python_gpu.py
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("SKIP: torch is not importable (pip install torch to run the GPU binding test)")
    sys.exit(77)
if not torch.cuda.is_available():
    print("SKIP: torch sees no CUDA device")
    sys.exit(77)

import fa2  # noqa: E402

TOL = 2e-2


def reference(q, k, v, causal, window=(-1, -1)):
    """SDPA in float32 on [b, h, s, d] views; GQA by repeating K/V heads (autograd
    sums the copies' gradients back); causal and windows bottom-right aligned."""
    b, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    qf, kf, vf = (t.float().transpose(1, 2) for t in (q, k, v))
    if hq != hkv:
        kf = kf.repeat_interleave(hq // hkv, dim=1)
        vf = vf.repeat_interleave(hq // hkv, dim=1)
    mask = None
    left, right = window
    if causal:
        right = 0
    if left >= 0 or right >= 0:
        i = torch.arange(sq, device=q.device)[:, None] + (sk - sq)
        j = torch.arange(sk, device=q.device)[None, :]
        mask = torch.ones(sq, sk, dtype=torch.bool, device=q.device)
        if left >= 0:
            mask &= j >= i - left
        if right >= 0:
            mask &= j <= i + right
    o = F.scaled_dot_product_attention(qf, kf, vf, attn_mask=mask)
    return o.transpose(1, 2)


def rel(x, ref):
    return ((x.float() - ref.float()).norm() / ref.float().norm().clamp_min(1e-30)).item()


def make(shape, dtype, layout):
    """BSHD tensor; layout "bhsd" stores it head-major and returns the BSHD view."""
    if layout == "bhsd":
        b, s, h, d = shape
        return torch.randn(b, h, s, d, device="cuda", dtype=dtype).transpose(1, 2)
    return torch.randn(shape, device="cuda", dtype=dtype)


def case(dtype, b, sq, sk, hq, hkv, d, causal, layout="bshd", window=(-1, -1)):
    name = {torch.bfloat16: "bf16", torch.float16: "fp16"}[dtype]
    label = (f"{name} b={b} sq={sq} sk={sk} hq={hq} hkv={hkv} d={d} causal={int(causal)} "
             f"window={window[0]},{window[1]} layout={layout}")
    q = make((b, sq, hq, d), dtype, layout).requires_grad_()
    k = make((b, sk, hkv, d), dtype, layout).requires_grad_()
    v = make((b, sk, hkv, d), dtype, layout).requires_grad_()
    d_o = torch.randn(b, sq, hq, d, device="cuda", dtype=dtype)
    try:
        o = fa2.attention(q, k, v, causal=causal, window=window)
        dq, dk, dv = torch.autograd.grad(o, (q, k, v), d_o)
        torch.cuda.synchronize()
    except fa2.Fa2Error as e:
        print(f"FAIL {label}  {type(e).__name__}: {e}", flush=True)
        return False
    qr, kr, vr = (t.detach().requires_grad_() for t in (q, k, v))
    ref = reference(qr, kr, vr, causal, window)
    gq, gk, gv = torch.autograd.grad(ref, (qr, kr, vr), d_o.float())
    errs = {"o": rel(o, ref), "dq": rel(dq, gq), "dk": rel(dk, gk), "dv": rel(dv, gv)}
    finite = all(torch.isfinite(t).all().item() for t in (o, dq, dk, dv))
    ok = finite and all(e < TOL for e in errs.values())
    shown = "  ".join(f"{n} {e:.1e}" for n, e in errs.items())
    print(f"{'PASS' if ok else 'FAIL'} {label}  {shown}{'' if finite else '  NON-FINITE'}",
          flush=True)
    return ok


def main():
    torch.manual_seed(0)
    lib = fa2.library()
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    print(f"fa2.py on {lib.path} (libfa2 {lib.version_string()}), {props.name}, "
          f"torch {torch.__version__}, bound {TOL:g} (relative Frobenius error vs fp32 SDPA)")
    cases = []
    for dtype in (torch.bfloat16, torch.float16):
        for d in (64, 128):
            for causal in (False, True):
                cases.append(dict(dtype=dtype, b=2, sq=256, sk=256, hq=8, hkv=8, d=d,
                                  causal=causal))
                cases.append(dict(dtype=dtype, b=1, sq=384, sk=384, hq=8, hkv=2, d=d,
                                  causal=causal))  # GQA 4:1
    cases += [
        dict(dtype=torch.bfloat16, b=2, sq=200, sk=333, hq=4, hkv=1, d=64, causal=True),  # MQA, ragged
        dict(dtype=torch.bfloat16, b=2, sq=128, sk=256, hq=4, hkv=4, d=128, causal=False,
             layout="bhsd"),
        dict(dtype=torch.float16, b=1, sq=300, sk=300, hq=4, hkv=2, d=128, causal=False,
             window=(64, 16)),
    ]
    failed = sum(not case(**c) for c in cases)
    # The raw-pointer API on the same tensors: what fa2.attention does underneath.
    q = torch.randn(1, 128, 4, 64, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(1, 128, 4, 64, device="cuda", dtype=torch.bfloat16)
    v = torch.randn_like(k)
    o = torch.empty_like(q)
    problem = fa2.make_problem("bf16", q.shape, k.shape)
    plan = fa2.plan(problem, device=q.device.index)
    plan.forward(q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(),
                 stream=torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()
    err = rel(o, reference(q, k, v, False))
    ok = err < TOL
    failed += not ok
    print(f"{'PASS' if ok else 'FAIL'} raw pointers bf16 b=1 s=128 h=4 d=64  o {err:.1e}")
    print(f"{len(cases) + 1 - failed}/{len(cases) + 1} passed"
          + ("" if not failed else f", {failed} FAILED"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
