#!/usr/bin/env python3
"""libfa2.flash_attn_interface called the way FlashAttention-2 2.8 documents its
functions: positional and keyword forms, return_attn_probs / return_softmax_lse and
their LSE layouts, window rules (causal with a window, edges past seqlen_k), packed
QKV, varlen with block_table and out=, and flash_attn_with_kvcache with an int
cache_seqlens, k= / v= appended into contiguous and paged caches, cache_batch_idx.
Every output against a float32 reference on fresh random inputs; the refusals by name.

Exit 0 all passed, 1 a failure, 77 skipped (no torch or no CUDA device). Run as ctest
fa2_flash_attn_interface_gpu (label gpu), or:

    FA2_LIBRARY=build/libfa2.so python3 tests/test_flash_attn_interface_gpu.py
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

try:
    import torch
except ImportError:
    print("SKIP: torch is not importable (pip install torch to run this test)")
    sys.exit(77)
if not torch.cuda.is_available():
    print("SKIP: torch sees no CUDA device")
    sys.exit(77)

import libfa2 as fa2  # noqa: E402
from libfa2.flash_attn_interface import (  # noqa: E402
    flash_attn_func, flash_attn_kvpacked_func, flash_attn_qkvpacked_func,
    flash_attn_varlen_func, flash_attn_varlen_kvpacked_func, flash_attn_varlen_qkvpacked_func,
    flash_attn_with_kvcache)

# bf16/fp16 outputs against float32: rounding alone gives ~4e-3; the bound leaves room for
# the kernels' own fp32 accumulation order. The LSE is fp32 arithmetic throughout.
TOL, LSE_TOL = 2e-2, 2e-3
results = []


def reference(q, k, v, causal=False, window=(-1, -1), scale=None, slopes=None):
    """flash-attn's semantics in float32 for one dense batch: q [b, sq, hq, d], k/v
    [b, sk, hkv, d]; window edges bottom-right aligned, an edge >= sk unlimited, causal
    = right edge 0; ALiBi slopes [hq] or [b, hq]: score - slope |i + sk - sq - j|.
    Returns (o [b, sq, hq, d], lse [b, hq, sq]); rows that see no key give o = 0,
    lse = -inf."""
    b, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    qf, kf, vf = (t.float().transpose(1, 2) for t in (q, k, v))
    kf, vf = (t.repeat_interleave(hq // hkv, dim=1) for t in (kf, vf))
    s = qf @ kf.transpose(-1, -2) * (d ** -0.5 if scale is None else scale)
    left, right = window
    right = 0 if causal else right
    i = torch.arange(sq, device=q.device)[:, None] + (sk - sq)
    j = torch.arange(sk, device=q.device)[None, :]
    if slopes is not None:
        s = s - slopes.float().view(-1, hq, 1, 1) * (i - j).abs()
    keep = torch.ones(sq, sk, dtype=torch.bool, device=q.device)
    if 0 <= left < sk:
        keep &= j >= i - left
    if 0 <= right < sk:
        keep &= j <= i + right
    s = s.masked_fill(~keep, float("-inf"))
    lse = torch.logsumexp(s, -1)
    p = torch.softmax(s, -1).nan_to_num(0.0)
    return (p @ vf).transpose(1, 2), lse


def rel(x, ref):
    x, ref = x.float(), ref.float()
    return ((x - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def lse_err(x, ref):
    finite = torch.isfinite(ref)
    if not torch.equal(torch.isfinite(x), finite):
        return float("inf")
    return (x[finite] - ref[finite]).abs().max().item() if finite.any() else 0.0


def check(label, fn):
    """Runs fn(), which returns a list of (name, error, bound); one line per case."""
    try:
        errors = fn()
        torch.cuda.synchronize()
        ok = all(e <= bound for _, e, bound in errors)
        detail = "  ".join(f"{n} {e:.1e}" for n, e, _ in errors)
    except Exception as e:  # a refusal or a crash is a failure of this case
        ok, detail = False, f"{type(e).__name__}: {e}"
    results.append(ok)
    print(f"{'PASS' if ok else 'FAIL'} {label}  {detail}", flush=True)


def rand(*shape, dtype=torch.bfloat16):
    return torch.randn(*shape, device="cuda", dtype=dtype)


def dense_forms():
    q, k, v = rand(2, 300, 8, 128), rand(2, 333, 2, 128), rand(2, 333, 2, 128)

    def positional():
        # flash_attn_func(q, k, v, dropout_p, softmax_scale, causal)
        o = flash_attn_func(q, k, v, 0.0, 0.1, True)
        return [("o", rel(o, reference(q, k, v, True, scale=0.1)[0]), TOL)]
    check("flash_attn_func(q, k, v, 0.0, 0.1, True) GQA 8:2 sq<sk", positional)

    def probs():
        out, lse, s_dmask = flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
        o_ref, lse_ref = reference(q, k, v, True)
        assert s_dmask is None and tuple(lse.shape) == (2, 8, 300), (s_dmask, lse.shape)
        return [("o", rel(out, o_ref), TOL), ("lse [b, hq, sq]", lse_err(lse, lse_ref), LSE_TOL)]
    check("flash_attn_func return_attn_probs=True -> (out, lse, None)", probs)

    for window in ((64, 64), (1000, 1000), (32, -1), (-1, 5)):
        def windowed(window=window):
            o = flash_attn_func(q, k, v, causal=True, window_size=window)
            return [("o", rel(o, reference(q, k, v, True, window)[0]), TOL)]
        check(f"flash_attn_func causal=True window_size={window}", windowed)

    def qkvpacked():
        qkv = rand(2, 200, 3, 4, 64).requires_grad_()
        out = flash_attn_qkvpacked_func(qkv, 0.0, None, True)
        ref_in = qkv.detach().clone().requires_grad_()
        ref = reference(ref_in[:, :, 0], ref_in[:, :, 1], ref_in[:, :, 2], True)[0]
        g = torch.randn_like(ref)
        out.backward(g.to(out.dtype))
        ref.backward(g)
        return [("o", rel(out, ref), TOL), ("dqkv", rel(qkv.grad, ref_in.grad), TOL)]
    check("flash_attn_qkvpacked_func qkv [b, s, 3, h, d] + backward", qkvpacked)

    def kvpacked():
        qq, kv = rand(2, 100, 8, 64), rand(2, 150, 2, 2, 64)
        out = flash_attn_kvpacked_func(qq, kv, causal=False)
        return [("o", rel(out, reference(qq, kv[:, :, 0], kv[:, :, 1])[0]), TOL)]
    check("flash_attn_kvpacked_func kv [b, s, 2, hkv, d]", kvpacked)


def alibi_and_odd_head_dims():
    """ALiBi slopes [batch, heads_q] (flash-attn's other form) on the dense forward and
    backward, the packed and paged forwards and the decode kernel; head dims that are not
    a multiple of 8, padded as flash-attn pads them."""
    q, k, v = rand(3, 200, 8, 128), rand(3, 260, 2, 128), rand(3, 260, 2, 128)
    slopes = torch.rand(3, 8, device="cuda") * 0.3

    def dense():
        qq, kk, vv = (t.clone().requires_grad_() for t in (q, k, v))
        out = flash_attn_func(qq, kk, vv, causal=True, alibi_slopes=slopes)
        ref_in = [t.detach().clone().requires_grad_() for t in (q, k, v)]
        ref = reference(*ref_in, True, slopes=slopes)[0]
        g = torch.randn_like(ref)
        out.backward(g.to(out.dtype))
        ref.backward(g)
        return [("o", rel(out, ref), TOL)] + [
            (n, rel(t.grad, r.grad), TOL) for n, t, r in zip("qkv", (qq, kk, vv), ref_in)]
    check("flash_attn_func alibi_slopes [batch, heads] + backward", dense)

    def varlen():
        cu_q = torch.tensor([0, 1, 70, 200], dtype=torch.int32, device="cuda")
        cu_k = torch.tensor([0, 60, 130, 260], dtype=torch.int32, device="cuda")
        q3, k3, v3 = q.view(-1, 8, 128)[:200], k.view(-1, 2, 128)[:260], v.view(-1, 2, 128)[:260]
        out = flash_attn_varlen_func(q3, k3, v3, cu_q, cu_k, 130, 130, causal=True,
                                     alibi_slopes=slopes)
        worst = max(rel(out[cu_q[b]:cu_q[b + 1]][None], reference(
            q3[cu_q[b]:cu_q[b + 1]][None], k3[cu_k[b]:cu_k[b + 1]][None],
            v3[cu_k[b]:cu_k[b + 1]][None], True, slopes=slopes[b:b + 1])[0]) for b in range(3))
        return [("o", worst, TOL)]
    check("flash_attn_varlen_func alibi_slopes [batch, heads]", varlen)

    def decode(paged):
        lens = [1, 100, 259]
        k_cache, v_cache = rand(3, 272, 2, 128), rand(3, 272, 2, 128)
        table = None
        if paged:  # pages of 16 in reverse order
            table = torch.arange(3 * 17, device="cuda").flip(0).view(3, 17).to(torch.int32)
            k_pages, v_pages = torch.empty_like(k_cache), torch.empty_like(v_cache)
            for b in range(3):
                for p in range(17):
                    page = int(table[b, p])
                    k_pages.view(51, 16, 2, 128)[page] = k_cache[b, 16 * p:16 * p + 16]
                    v_pages.view(51, 16, 2, 128)[page] = v_cache[b, 16 * p:16 * p + 16]
        qd = rand(3, 1, 8, 128)
        seqlens = torch.tensor(lens, dtype=torch.int32, device="cuda")
        kc = k_pages.view(51, 16, 2, 128) if paged else k_cache
        vc = v_pages.view(51, 16, 2, 128) if paged else v_cache
        out = flash_attn_with_kvcache(qd, kc, vc, cache_seqlens=seqlens, block_table=table,
                                      causal=True, alibi_slopes=slopes)
        worst = max(rel(out[b:b + 1], reference(qd[b:b + 1], k_cache[b:b + 1, :n],
                                                v_cache[b:b + 1, :n], True,
                                                slopes=slopes[b:b + 1])[0])
                    for b, n in enumerate(lens))
        return [("o", worst, TOL)]
    check("flash_attn_with_kvcache alibi_slopes [batch, heads] (decode kernel)",
          lambda: decode(False))
    check("flash_attn_with_kvcache alibi_slopes [batch, heads], paged (decode kernel)",
          lambda: decode(True))

    def widest_stride():
        # the largest batch stride fa2_plan accepts (2^31 - 1 floats: an 8 GiB buffer)
        stride = 2 ** 31 - 1
        store = torch.zeros(stride + 8, device="cuda")
        wide = store.as_strided((2, 8), (stride, 1))
        wide.copy_(torch.rand(2, 8, device="cuda") * 0.3)
        qq, kk, vv = q[:2, :64], k[:2, :80], v[:2, :80]
        out = flash_attn_func(qq, kk, vv, causal=True, alibi_slopes=wide)
        ref = reference(qq, kk, vv, True, slopes=wide.clone())[0]
        del store
        return [("o", rel(out, ref), TOL)]
    check("flash_attn_func alibi_slopes batch stride 2^31 - 1 (the limit)", widest_stride)

    for d in (59, 111):
        def odd(d=d):
            qq, kk, vv = (rand(2, 150, h, d).requires_grad_() for h in (4, 2, 2))
            out = flash_attn_func(qq, kk, vv, causal=True)
            ref_in = [t.detach().clone().requires_grad_() for t in (qq, kk, vv)]
            ref = reference(*ref_in, True)[0]
            g = torch.randn_like(ref)
            out.backward(g.to(out.dtype))
            ref.backward(g)
            assert out.shape[-1] == d
            return [("o", rel(out, ref), TOL)] + [
                (n, rel(t.grad, r.grad), TOL) for n, t, r in zip("qkv", (qq, kk, vv), ref_in)]
        check(f"flash_attn_func head_dim={d} (padded to a multiple of 8) + backward", odd)

        def odd_cache(d=d):
            k_cache, v_cache = rand(2, 64, 2, d), rand(2, 64, 2, d)
            qd, k_new, v_new = rand(2, 2, 4, d), rand(2, 2, 2, d), rand(2, 2, 2, d)
            seqlens = torch.tensor([5, 40], dtype=torch.int32, device="cuda")
            out = flash_attn_with_kvcache(qd, k_cache, v_cache, k_new, v_new,
                                          cache_seqlens=seqlens, causal=True)
            written = max((k_cache[b, n:n + 2] - k_new[b]).abs().max().item()
                          for b, n in enumerate((5, 40)))
            worst = max(rel(out[b:b + 1], reference(qd[b:b + 1], k_cache[b:b + 1, :n + 2],
                                                    v_cache[b:b + 1, :n + 2], True)[0])
                        for b, n in enumerate((5, 40)))
            return [("o", worst, TOL), ("cache rows written", written, 0.0)]
        check(f"flash_attn_with_kvcache head_dim={d}, k=/v= appended", odd_cache)


def varlen_forms():
    lens_k = [5, 17, 410]
    cu_q = torch.tensor([0, 1, 18, 318], dtype=torch.int32, device="cuda")
    cu_k = torch.tensor([0, 5, 22, 432], dtype=torch.int32, device="cuda")
    q, k, v = rand(318, 8, 128), rand(432, 2, 128), rand(432, 2, 128)

    def per_sequence(o, lse, causal, window=(-1, -1), kk=None, vv=None):
        errs, lse_worst = [], 0.0
        for b in range(3):
            qs = q[cu_q[b]:cu_q[b + 1]][None]
            ks = (kk[b] if kk is not None else k[cu_k[b]:cu_k[b + 1]])[None]
            vs = (vv[b] if vv is not None else v[cu_k[b]:cu_k[b + 1]])[None]
            o_ref, l_ref = reference(qs, ks, vs, causal, window)
            errs.append(rel(o[cu_q[b]:cu_q[b + 1]][None], o_ref))
            if lse is not None:
                lse_worst = max(lse_worst, lse_err(lse[:, cu_q[b]:cu_q[b + 1]], l_ref[0]))
        return [("o", max(errs), TOL)] + ([("lse [hq, total_q]", lse_worst, LSE_TOL)]
                                           if lse is not None else [])

    def positional():
        out, lse, none = flash_attn_varlen_func(q, k, v, cu_q, cu_k, 300, 410, 0.0, None, True,
                                                (-1, -1), 0.0, None, False, True)
        assert none is None and tuple(lse.shape) == (8, 318)
        return per_sequence(out, lse, True)
    check("flash_attn_varlen_func positional, return_attn_probs=True", positional)

    def windowed():
        out = flash_attn_varlen_func(q, k, v, cu_q, cu_k, 300, 410, causal=True,
                                     window_size=(16, 16))
        return per_sequence(out, None, True, (16, -1))
    check("flash_attn_varlen_func causal=True window_size=(16, 16)", windowed)

    def out_param():
        out = torch.full_like(q, float("nan"))
        with torch.no_grad():
            got = flash_attn_varlen_func(q, k, v, cu_q, cu_k, 300, 410, causal=True, out=out)
        assert got.data_ptr() == out.data_ptr()
        return per_sequence(out, None, True)
    check("flash_attn_varlen_func out= (poisoned, written in place)", out_param)

    def paged():
        page, pages_per_seq = 16, 26
        num_pages = 3 * pages_per_seq + 5
        table = torch.randperm(num_pages, device="cuda")[:3 * pages_per_seq].view(
            3, pages_per_seq).to(torch.int32).contiguous()
        k_cache, v_cache = rand(num_pages, page, 2, 128), rand(num_pages, page, 2, 128)
        kk, vv = [], []
        for b, n in enumerate(lens_k):
            keys = torch.arange(n, device="cuda")
            pages = table[b][keys // page].long()
            kk.append(k_cache[pages, keys % page])
            vv.append(v_cache[pages, keys % page])
        out, lse, _ = flash_attn_varlen_func(q, k_cache, v_cache, cu_q, cu_k, 300, 410,
                                             causal=True, return_attn_probs=True,
                                             block_table=table)
        return per_sequence(out, lse, True, kk=kk, vv=vv)
    check("flash_attn_varlen_func block_table= (paged K/V, pages of 16)", paged)

    def qkvpacked():
        cu = torch.tensor([0, 7, 107], dtype=torch.int32, device="cuda")
        qkv = rand(107, 3, 4, 64)
        out = flash_attn_varlen_qkvpacked_func(qkv, cu, 100, causal=True)
        worst = max(rel(out[a:e][None], reference(qkv[a:e, 0][None], qkv[a:e, 1][None],
                                                  qkv[a:e, 2][None], True)[0])
                    for a, e in ((0, 7), (7, 107)))
        kv = qkv[:, 1:]
        out2 = flash_attn_varlen_kvpacked_func(qkv[:, 0], kv, cu, cu, 100, 100, causal=True)
        return [("qkvpacked o", worst, TOL), ("kvpacked o", rel(out2, out), 1e-6)]
    check("flash_attn_varlen_qkvpacked_func / kvpacked_func", qkvpacked)


def kvcache_forms():
    batch, hq, hkv, d = 3, 8, 2, 128
    lens = [0, 17, 250]

    def contiguous_int_seqlens():
        k_cache, v_cache = rand(batch, 300, hkv, d), rand(batch, 300, hkv, d)
        q = rand(batch, 1, hq, d)
        out, lse = flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=200,
                                           causal=True, return_softmax_lse=True)
        o_ref, l_ref = reference(q, k_cache[:, :200], v_cache[:, :200], True)
        assert tuple(lse.shape) == (batch, hq, 1), lse.shape
        return [("o", rel(out, o_ref), TOL), ("lse [b, hq, sq]", lse_err(lse, l_ref), LSE_TOL)]
    check("flash_attn_with_kvcache contiguous, cache_seqlens=200 (int), return_softmax_lse",
          contiguous_int_seqlens)

    def append(paged, seqlen_new):
        page = 16 if paged else 320
        pages_per_seq = 320 // page
        num_pages = batch * pages_per_seq + (3 if paged else 0)
        k_cache, v_cache = rand(num_pages, page, hkv, d), rand(num_pages, page, hkv, d)
        table = (torch.randperm(num_pages, device="cuda")[:batch * pages_per_seq]
                 .view(batch, pages_per_seq).to(torch.int32).contiguous() if paged else None)
        seqlens = torch.tensor(lens, dtype=torch.int32, device="cuda")
        q = rand(batch, seqlen_new, hq, d)
        k_new, v_new = rand(batch, seqlen_new, hkv, d), rand(batch, seqlen_new, hkv, d)
        # flash-attn's positional form: (q, k_cache, v_cache, k, v, rotary_cos, rotary_sin,
        # cache_seqlens, cache_batch_idx, cache_leftpad, block_table, softmax_scale, causal)
        out = flash_attn_with_kvcache(q, k_cache, v_cache, k_new, v_new, None, None, seqlens,
                                      None, None, table, None, True)
        worst = written = 0.0
        for b, n in enumerate(lens):
            keys = torch.arange(n + seqlen_new, device="cuda")
            pages = (table[b][keys // page] if paged else torch.full_like(keys, b)).long()
            kb, vb = k_cache[pages, keys % page], v_cache[pages, keys % page]
            written = max(written, (kb[n:] - k_new[b]).abs().max().item(),
                          (vb[n:] - v_new[b]).abs().max().item())
            worst = max(worst, rel(out[b:b + 1], reference(q[b:b + 1], kb[None], vb[None],
                                                           True)[0]))
        return [("o", worst, TOL), ("cache rows written", written, 0.0)]
    for paged in (False, True):
        for seqlen_new in (1, 3):
            check(f"flash_attn_with_kvcache k=, v= appended ({'paged, pages of 16' if paged else 'contiguous'}"
                  f", {seqlen_new} new tokens, lengths {lens})",
                  lambda paged=paged, s=seqlen_new: append(paged, s))

    def batch_idx():
        k_cache, v_cache = rand(5, 64, hkv, d), rand(5, 64, hkv, d)
        idx = torch.tensor([4, 0, 2], dtype=torch.int32, device="cuda")
        q = rand(batch, 2, hq, d)
        seqlens = torch.tensor([64, 1, 30], dtype=torch.int32, device="cuda")
        out = flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=seqlens,
                                      cache_batch_idx=idx, causal=True)
        worst = max(rel(out[b:b + 1], reference(q[b:b + 1], k_cache[r:r + 1, :n],
                                                v_cache[r:r + 1, :n], True)[0])
                    for b, (r, n) in enumerate(((4, 64), (0, 1), (2, 30))))
        return [("o", worst, TOL)]
    check("flash_attn_with_kvcache cache_batch_idx= (contiguous cache rows 4, 0, 2)", batch_idx)

    def refusals():
        q, kc = rand(1, 1, 8, 64), rand(1, 16, 2, 64)
        named = []
        for name in ("rotary_cos", "rotary_sin", "cache_leftpad"):
            try:
                flash_attn_with_kvcache(q, kc, kc, cache_seqlens=4, **{name: q})
            except fa2.Fa2ShapeError as e:
                named.append(name in str(e))
        try:
            flash_attn_func(q, kc, kc, dropout_p=0.1)
        except fa2.Fa2ShapeError as e:
            named.append("dropout_p" in str(e))
        return [("refused by name", 0.0 if named == [True] * 4 else 1.0, 0.0)]
    check("rotary, cache_leftpad, dropout refused by name", refusals)


def main():
    torch.manual_seed(0)
    print(f"libfa2 {fa2.__version__} on {fa2.library().path}")
    for group in (dense_forms, varlen_forms, kvcache_forms, alibi_and_odd_head_dims):
        group()
    failed = results.count(False)
    print(f"{len(results) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
