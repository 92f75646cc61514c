"""FlashAttention-2's Python interface on libfa2: flash-attn's names, argument order and
return values, so that porting is one import line:

    from libfa2.flash_attn_interface import flash_attn_func, flash_attn_with_kvcache

What differs (docs/ffi.md): dropout, rotary embeddings and cache_leftpad are refused by
name; return_attn_probs returns (out, softmax_lse, None), as flash-attn does without
dropout. Windows follow flash-attn's rules (an edge >= seqlen_k is unlimited, causal
sets the right edge to 0); the C API keeps its own strict checks.
"""
from . import _calls
from ._cdefs import MAX_WINDOW
from ._library import _lock
from ._tensors import _check_score_tensors, _check_tensors, _torch, alibi_stride
from .errors import Fa2ShapeError
from .ops import (_check_offsets, _custom_ops, _forward, _tracked, _varlen_forward,
                  _varlen_plan, attention_with_lse, cache_write, paged_forward, paged_plan)

__all__ = [
    "flash_attn_func", "flash_attn_kvpacked_func", "flash_attn_qkvpacked_func",
    "flash_attn_varlen_func", "flash_attn_varlen_kvpacked_func",
    "flash_attn_varlen_qkvpacked_func", "flash_attn_with_kvcache", "flash_window",
]


def flash_window(window_size, causal, seqlen_k):
    """flash-attn's window rules as the C API's fields: an edge >= seqlen_k (the longest
    key sequence) is unlimited (-1); causal sets the right edge to 0. Returns (causal,
    window_left, window_right)."""
    left, right = (int(w) for w in window_size)
    left = -1 if left >= seqlen_k or left > MAX_WINDOW else left
    right = -1 if right >= seqlen_k or right > MAX_WINDOW else right
    if causal:
        right = 0
    # the C API: causal is window_right = 0 with no left edge
    if right == 0 and left < 0:
        return True, -1, -1
    return False, left, right


def _refuse(function, dropout_p=0.0, **unsupported):
    """flash-attn arguments libfa2 does not implement, refused by name before any tensor
    is touched."""
    if dropout_p:
        raise Fa2ShapeError(f"{function}: dropout_p={dropout_p!r}: libfa2 has no dropout "
                            "(use 0.0)")
    for name, value in unsupported.items():
        if value is not None:
            raise Fa2ShapeError(f"{function}: {name} is not supported by libfa2 (pass None)")


def _probs(out, lse, return_attn_probs):
    """flash-attn's returns: out, or (out, softmax_lse, S_dmask) with S_dmask None, as
    flash-attn gives it without dropout."""
    return (out, lse, None) if return_attn_probs else out


def _padded(tensors, softmax_scale):
    """flash-attn's handling of a head dim that is not a multiple of 8: the tensors
    zero-padded to one (a copy; autograd slices their gradients back), the scale from the
    true head dim. Returns (tensors, softmax_scale, head_dim) or, when no padding is
    needed, the tensors as they are."""
    d = tensors[0].shape[-1]
    pad = (-d) % 8
    if pad == 0:
        return tensors, softmax_scale, d
    torch = _torch()
    padded = tuple(None if t is None else torch.nn.functional.pad(t, [0, pad])
                   for t in tensors)
    return padded, d ** -0.5 if softmax_scale is None else softmax_scale, d


def _plain_layout(q, k, v):
    """Whether ops.forward takes these tensors as they are: BSHD, with a head dim that is
    a multiple of 8 and of stride 1. (Others take attention_with_lse, which pads or
    copies.)"""
    return (q.dim() == 4 and k.dim() == 4 and v.dim() == 4 and q.shape[3] % 8 == 0 and
            q.stride(3) == 1 and k.stride(3) == 1 and v.stride(3) == 1)


def _tensor(name, t):
    torch = _torch()
    if not isinstance(t, torch.Tensor):
        raise Fa2ShapeError(f"{name} is a {type(t).__name__}, not a torch.Tensor")
    return t


# ---- dense batches -------------------------------------------------------------
def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False,
                    window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                    deterministic=False, return_attn_probs=False, *, sinks=None):
    """flash_attn.flash_attn_func: q [batch, seqlen_q, heads_q, d], k and v [batch,
    seqlen_k, heads_kv, d], differentiable. Returns out, or with return_attn_probs
    (out, softmax_lse [batch, heads_q, seqlen_q] float32, None). alibi_slopes: float32
    [heads_q]. sinks (keyword-only, libfa2's): float32 [heads_q] attention-sink logits."""
    if dropout_p:
        _refuse("flash_attn_func", dropout_p)
    tensor = _torch().Tensor
    if not (isinstance(q, tensor) and isinstance(k, tensor) and isinstance(v, tensor)):
        for name, t in (("q", q), ("k", k), ("v", v)):
            _tensor(name, t)
    if type(window_size) is tuple and window_size == (-1, -1):
        causal, left, right = bool(causal), -1, -1  # flash_window's answer for no window
    else:
        causal, left, right = flash_window(window_size, causal,
                                           k.shape[1] if k.dim() == 4 else 0)
    if not _tracked(q, k, v, sinks) and not _torch().compiler.is_compiling():
        # nothing to record: the cached forward call (a cached signature had a plain layout)
        res = _forward((q, k, v, None, None, alibi_slopes, sinks),
                       (return_attn_probs, causal, (left, right), softmax_scale,
                        deterministic, 0, softcap, None), lambda: _plain_layout(q, k, v))
        if res is not None:
            return (res[0], res[1], None) if return_attn_probs else res
    (q, k, v), softmax_scale, d = _padded((q, k, v), softmax_scale)
    out, lse = attention_with_lse(q, k, v, causal=causal, window=(left, right),
                                  softmax_scale=softmax_scale, deterministic=deterministic,
                                  softcap=softcap, alibi_slopes=alibi_slopes, sinks=sinks)
    if d != out.shape[-1]:
        out = out[..., :d]
    return (out, lse, None) if return_attn_probs else out


def flash_attn_qkvpacked_func(qkv, dropout_p=0.0, softmax_scale=None, causal=False,
                              window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                              deterministic=False, return_attn_probs=False):
    """flash_attn.flash_attn_qkvpacked_func: qkv [batch, seqlen, 3, heads, d]. Q, K and V
    go to the library as strided views of qkv (no copy); their gradients land in qkv."""
    qkv = _tensor("qkv", qkv)
    if qkv.dim() != 5 or qkv.shape[2] != 3:
        raise Fa2ShapeError(f"qkv has shape {tuple(qkv.shape)}: expected [batch, seqlen, 3, "
                            "heads, head_dim]")
    return flash_attn_func(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], dropout_p, softmax_scale,
                           causal, window_size, softcap, alibi_slopes, deterministic,
                           return_attn_probs)


def flash_attn_kvpacked_func(q, kv, dropout_p=0.0, softmax_scale=None, causal=False,
                             window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                             deterministic=False, return_attn_probs=False):
    """flash_attn.flash_attn_kvpacked_func: q [batch, seqlen_q, heads_q, d], kv [batch,
    seqlen_k, 2, heads_kv, d] (strided views, no copy)."""
    kv = _tensor("kv", kv)
    if kv.dim() != 5 or kv.shape[2] != 2:
        raise Fa2ShapeError(f"kv has shape {tuple(kv.shape)}: expected [batch, seqlen_k, 2, "
                            "heads_kv, head_dim]")
    return flash_attn_func(q, kv[:, :, 0], kv[:, :, 1], dropout_p, softmax_scale, causal,
                           window_size, softcap, alibi_slopes, deterministic,
                           return_attn_probs)


# ---- packed variable-length batches --------------------------------------------
def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                           dropout_p=0.0, softmax_scale=None, causal=False,
                           window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                           deterministic=False, return_attn_probs=False, block_table=None, *,
                           seqused_k=None, out=None, return_lse=False, sinks=None):
    """flash_attn.flash_attn_varlen_func: q [total_q, heads_q, d], k and v [total_k,
    heads_kv, d] (CUDA, fp16/bf16), cu_seqlens_q / cu_seqlens_k int32 [batch + 1] offsets
    on q's device, max_seqlen_q / max_seqlen_k the longest sequences (host ints: the
    plan's bounds). Differentiable. Returns out [total_q, heads_q, d], or with
    return_attn_probs (out, softmax_lse [heads_q, total_q] float32, None).

    block_table (int32 [batch, pages_per_seq]): k and v are a paged cache [num_pages,
    page_size, heads_kv, d] and sequence b's keys are its first cu_seqlens_k[b + 1] -
    cu_seqlens_k[b] rows (forward only: no autograd). libfa2's keyword-only extras:
    seqused_k (int32 [batch], the keys each sequence uses), out (written in place; not
    with autograd), return_lse (out, lse), sinks (float32 [heads_q])."""
    if dropout_p:
        _refuse("flash_attn_varlen_func", dropout_p)
    # A repeated call without autograd or pages: the cached call (docs/ffi.md).
    key = None
    if block_table is None:
        tensors = (q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, alibi_slopes, sinks, out)
        sigs = _calls.signatures(tensors)
        if sigs is not None and sigs[0] != () and not _tracked(q, k, v, sinks):
            key = ("varlen", sigs, max_seqlen_q, max_seqlen_k, softmax_scale, causal,
                   window_size, softcap, deterministic, return_attn_probs, return_lse)
            call = _calls.lookup(key)
            if call is not None and _calls.storages_hold(call.spans, tensors):
                o, lse = call.run(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, None,
                                  alibi_slopes, sinks, out)
                return (o, lse) if return_lse else _probs(o, lse, return_attn_probs)
    torch = _torch()
    for n, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.dim() != (4 if n != "q" and block_table
                                                          is not None else 3):
            want = "[num_pages, page_size, heads_kv, head_dim]" if n != "q" and \
                block_table is not None else "[total, heads, head_dim]"
            raise Fa2ShapeError(f"{n}: expected a tensor {want}")
    batch = cu_seqlens_q.numel() - 1 if isinstance(cu_seqlens_q, torch.Tensor) else 0
    if batch < 1:
        raise Fa2ShapeError("cu_seqlens_q: expected batch + 1 >= 2 offsets")
    _check_offsets("cu_seqlens_q", cu_seqlens_q, batch + 1, q.device)
    _check_offsets("cu_seqlens_k", cu_seqlens_k, batch + 1, q.device)
    if seqused_k is not None:
        _check_offsets("seqused_k", seqused_k, batch, q.device)
    _check_score_tensors(alibi_slopes, sinks, q.shape[1], q.device, batch)
    causal, left, right = flash_window(window_size, causal, int(max_seqlen_k))
    if out is not None:
        _check_varlen_out(out, q)
    (q, k, v), softmax_scale, d = _padded((q, k, v), softmax_scale)
    if out is not None and d != q.shape[-1]:  # written through a padded copy
        result = flash_attn_varlen_func(
            q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, 0.0,
            softmax_scale, causal, (left, right), softcap, alibi_slopes, deterministic,
            return_attn_probs, block_table, seqused_k=seqused_k, return_lse=return_lse,
            sinks=sinks)
        o = result[0] if isinstance(result, tuple) else result
        out.copy_(o[..., :d])
        return (out,) + tuple(result[1:]) if isinstance(result, tuple) else out
    q3 = q if q.stride(-1) == 1 else q.contiguous()
    if block_table is not None:
        _check_tensors(q3.unsqueeze(0), k, v)
        _check_table(block_table, batch, q.device)
        if seqused_k is None:
            seqused_k = cu_seqlens_k[1:] - cu_seqlens_k[:-1]
        o, lse = paged_forward(q3, k, v, cu_seqlens_q, seqused_k, block_table,
                               int(max_seqlen_q), int(max_seqlen_k), causal=causal,
                               window=(left, right), softmax_scale=softmax_scale,
                               softcap=softcap, alibi_slopes=alibi_slopes, sinks=sinks,
                               out=out, return_lse=True)
    else:
        q4, k4, v4 = (t.unsqueeze(0) if t.stride(-1) == 1 else t.contiguous().unsqueeze(0)
                      for t in (q3, k, v))
        _check_tensors(q4, k4, v4)
        common = (q4[0], k4[0], v4[0], cu_seqlens_q, cu_seqlens_k, seqused_k,
                  int(max_seqlen_q), int(max_seqlen_k), causal)
        options = (None if softmax_scale is None else float(softmax_scale),
                   bool(deterministic), float(softcap), alibi_slopes, sinks)
        tracked = _tracked(q, k, v, sinks)
        if out is not None and tracked:
            raise Fa2ShapeError("flash_attn_varlen_func: out= writes in place, which "
                                "autograd cannot track: use it under torch.no_grad()")
        if tracked or torch.compiler.is_compiling():
            o, lse = _custom_ops().varlen_fwd(*common, left, right, *options)
        elif key is not None and d == q.shape[-1] and k.shape[0] > 0 and \
                q.stride(-1) == k.stride(-1) == v.stride(-1) == 1:
            returns_lse = bool(return_lse) or bool(return_attn_probs)
            call = _calls.store(key, _calls.PackedCall(
                _varlen_plan(q, k, v, batch, int(max_seqlen_q), int(max_seqlen_k), causal,
                             (left, right), options[0], options[1], options[2],
                             alibi_stride(alibi_slopes), sinks is not None, o3=out),
                q, (q.shape[1], q.shape[0]) if returns_lse else None, (None, None, None),
                alibi_slopes is not None or sinks is not None, _calls.spans(q, k, v, out)))
            o, lse = call.run(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, None,
                              alibi_slopes, sinks, out)
        else:
            o, lse = _varlen_forward(*common, (left, right), *options, out=out)
    if d != o.shape[-1]:
        o = o[..., :d]
    if return_lse:
        return o, lse
    return _probs(o, lse, return_attn_probs)


def flash_attn_varlen_qkvpacked_func(qkv, cu_seqlens, max_seqlen, dropout_p=0.0,
                                     softmax_scale=None, causal=False, window_size=(-1, -1),
                                     softcap=0.0, alibi_slopes=None, deterministic=False,
                                     return_attn_probs=False):
    """flash_attn.flash_attn_varlen_qkvpacked_func: qkv [total, 3, heads, d]."""
    qkv = _tensor("qkv", qkv)
    if qkv.dim() != 4 or qkv.shape[1] != 3:
        raise Fa2ShapeError(f"qkv has shape {tuple(qkv.shape)}: expected [total, 3, heads, "
                            "head_dim]")
    return flash_attn_varlen_func(qkv[:, 0], qkv[:, 1], qkv[:, 2], cu_seqlens, cu_seqlens,
                                  max_seqlen, max_seqlen, dropout_p, softmax_scale, causal,
                                  window_size, softcap, alibi_slopes, deterministic,
                                  return_attn_probs)


def flash_attn_varlen_kvpacked_func(q, kv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                    max_seqlen_k, dropout_p=0.0, softmax_scale=None,
                                    causal=False, window_size=(-1, -1), softcap=0.0,
                                    alibi_slopes=None, deterministic=False,
                                    return_attn_probs=False):
    """flash_attn.flash_attn_varlen_kvpacked_func: q [total_q, heads_q, d], kv [total_k,
    2, heads_kv, d]."""
    kv = _tensor("kv", kv)
    if kv.dim() != 4 or kv.shape[1] != 2:
        raise Fa2ShapeError(f"kv has shape {tuple(kv.shape)}: expected [total_k, 2, heads_kv, "
                            "head_dim]")
    return flash_attn_varlen_func(q, kv[:, 0], kv[:, 1], cu_seqlens_q, cu_seqlens_k,
                                  max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale, causal,
                                  window_size, softcap, alibi_slopes, deterministic,
                                  return_attn_probs)


def _check_varlen_out(out, q):
    torch = _torch()
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != tuple(q.shape) or \
            out.dtype != q.dtype or out.device != q.device or out.stride(-1) != 1:
        raise Fa2ShapeError(f"out: expected a tensor of q's shape {tuple(q.shape)}, dtype "
                            f"and device, head_dim stride 1")


def _check_table(table, batch, device):
    torch = _torch()
    if not isinstance(table, torch.Tensor) or table.dtype != torch.int32 or \
            table.dim() != 2 or table.shape[0] != batch or not table.is_contiguous() or \
            table.device != device:
        raise Fa2ShapeError(f"block_table: expected a contiguous int32 [batch = {batch}, "
                            "pages_per_seq] tensor on q's device")


# ---- KV caches -----------------------------------------------------------------
def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None,
                            rotary_sin=None, cache_seqlens=None, cache_batch_idx=None,
                            cache_leftpad=None, block_table=None, softmax_scale=None,
                            causal=False, window_size=(-1, -1), softcap=0.0,
                            rotary_interleaved=True, alibi_slopes=None, num_splits=0,
                            return_softmax_lse=False, *, check_metadata=False, sinks=None):
    """flash_attn.flash_attn_with_kvcache (forward only): q [batch, seqlen_q, heads_q, d];
    k_cache / v_cache [batch_cache, seqlen_cache, heads_kv, d], or with block_table (int32
    [batch, pages_per_seq]) a paged cache [num_pages, page_size, heads_kv, d] (any page
    size). k, v [batch, seqlen_new, heads_kv, d]: written into the cache at positions
    cache_seqlens[b] .. (through fa2_cache_write) before attention over cache_seqlens[b]
    + seqlen_new keys; rows that do not fit the cache are dropped. cache_seqlens: an int
    or int32 [batch] (None: the whole cache). cache_batch_idx (int32 [batch], contiguous
    cache only): the cache row of each sequence. Causal masks and windows are bottom-right
    aligned. Returns out like q, and with return_softmax_lse the LSE float32 [batch,
    heads_q, seqlen_q]. num_splits: 0 lets the planner split the keys, 1 never splits,
    n at most n. libfa2's keyword-only extras: check_metadata=True synchronizes and
    raises Fa2BadMetadata naming a sequence whose lengths or page ids failed the GPU's
    check (such a sequence's rows are otherwise left unwritten); sinks."""
    if rotary_cos is not None or rotary_sin is not None or cache_leftpad is not None:
        _refuse("flash_attn_with_kvcache", rotary_cos=rotary_cos, rotary_sin=rotary_sin,
                cache_leftpad=cache_leftpad)
    # A repeated call without new rows: the cached call (docs/ffi.md, "Repeated calls").
    key = None
    if k is None and v is None and not check_metadata:
        tensors = (q, k_cache, v_cache, block_table, cache_batch_idx, cache_seqlens,
                   alibi_slopes, sinks)
        if (block_table is None and cache_batch_idx is None and alibi_slopes is None and
                sinks is None):  # the common case's shorter signature
            sigs = _calls.qkv_signature(q, k_cache, v_cache)
            lens = _calls.signatures((cache_seqlens,))
            sigs = None if sigs is None or lens is None else sigs + lens
        else:
            sigs = _calls.signatures(tensors)
        if sigs is not None and sigs[0] != ():
            key = ("kvcache", sigs, softmax_scale, causal, window_size, softcap, num_splits,
                   return_softmax_lse)
            call = _calls.lookup(key)
            if call is not None and _calls.storages_hold(call.spans, tensors):
                return _kvcache_result(call, q, k_cache, v_cache, block_table,
                                       cache_batch_idx, cache_seqlens, alibi_slopes, sinks)
    torch = _torch()
    q = _tensor("q", q)
    if q.dim() != 4:
        raise Fa2ShapeError("q: expected a 4-dim tensor [batch, seqlen_q, heads, head_dim]")
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        if not isinstance(t, torch.Tensor) or t.dim() != 4:
            raise Fa2ShapeError(f"{name}: expected a tensor [num_pages, page_size, heads_kv, "
                                "head_dim]")
    if k_cache.shape != v_cache.shape:
        raise Fa2ShapeError(f"k_cache has shape {tuple(k_cache.shape)}, v_cache "
                            f"{tuple(v_cache.shape)}: they must match")
    if (k is None) != (v is None):
        raise Fa2ShapeError("flash_attn_with_kvcache: pass k and v together")
    batch, seqlen_q = q.shape[0], q.shape[1]
    q3 = (q if q.is_contiguous() else q.contiguous()).view(batch * seqlen_q, q.shape[2],
                                                             q.shape[3])
    _check_tensors(q3.unsqueeze(0), k_cache, v_cache)
    _check_score_tensors(alibi_slopes, sinks, q.shape[2], q.device, batch)
    table = _page_table(block_table, cache_batch_idx, k_cache, batch, q.device)
    page_size = k_cache.shape[1]
    capacity = table.shape[1] * page_size
    if cache_seqlens is None:
        if k is not None:
            raise Fa2ShapeError("flash_attn_with_kvcache: k and v need cache_seqlens (where "
                                "the new rows go)")
        seqused = _constant(batch, capacity, q.device)
    elif isinstance(cache_seqlens, int):
        seqused = torch.full((batch,), cache_seqlens, dtype=torch.int32, device=q.device)
    else:
        _check_offsets("cache_seqlens", cache_seqlens, batch, q.device)
        seqused = cache_seqlens
    if k is not None:
        seqused = _append(k, v, seqused, table, k_cache, v_cache, batch, capacity)
    causal, left, right = flash_window(window_size, causal, capacity)
    if key is not None and q.is_contiguous() and q.shape[-1] % 8 == 0:
        p = paged_plan(q3, k_cache, v_cache, table, seqlen_q, capacity, causal=causal,
                       window=(left, right), softmax_scale=softmax_scale, softcap=softcap,
                       alibi_slopes=alibi_slopes, sinks=sinks, num_splits=num_splits)
        call = _calls.store(key, _calls.PackedCall(
            p, q, (q.shape[2], batch * seqlen_q) if return_softmax_lse else None,
            (_uniform_offsets(batch, seqlen_q, q.device), seqused if cache_seqlens is None
             else None, table if block_table is None and cache_batch_idx is None else None),
            alibi_slopes is not None or sinks is not None, _calls.spans(q, k_cache, v_cache)))
        return _kvcache_result(call, q, k_cache, v_cache, block_table, cache_batch_idx,
                               cache_seqlens, alibi_slopes, sinks)
    # a head dim that is not a multiple of 8: padded copies of q and the caches
    (q3, k_cache, v_cache), softmax_scale, d = _padded((q3, k_cache, v_cache), softmax_scale)
    result = paged_forward(q3, k_cache, v_cache, _uniform_offsets(batch, seqlen_q, q.device),
                           seqused, table, seqlen_q, capacity, causal=causal,
                           window=(left, right), softmax_scale=softmax_scale, softcap=softcap,
                           alibi_slopes=alibi_slopes, sinks=sinks, num_splits=num_splits,
                           return_lse=bool(return_softmax_lse), check_metadata=check_metadata)
    o, lse = result if return_softmax_lse else (result, None)
    o = o[..., :d].view(q.shape)
    if not return_softmax_lse:
        return o
    # [heads_q, batch * seqlen_q] -> flash-attn's [batch, heads_q, seqlen_q]
    return o, lse.view(q.shape[2], batch, seqlen_q).transpose(0, 1).contiguous()


def _kvcache_result(call, q, k_cache, v_cache, block_table, cache_batch_idx, cache_seqlens,
                    alibi_slopes, sinks):
    """Runs a cached PackedCall: out like q, and with the LSE flash-attn's [batch, heads_q,
    seqlen_q]."""
    table = block_table if block_table is not None else cache_batch_idx
    o, lse = call.run(q, k_cache, v_cache, None, None, cache_seqlens, table, alibi_slopes,
                      sinks)
    if lse is None:
        return o
    return o, lse.view(q.shape[2], q.shape[0], q.shape[1]).transpose(0, 1).contiguous()


def _page_table(block_table, cache_batch_idx, k_cache, batch, device):
    """The page table of the call: block_table, or for a contiguous cache one page per
    cache row (cache_batch_idx picks the rows)."""
    torch = _torch()
    if block_table is not None:
        if cache_batch_idx is not None:
            raise Fa2ShapeError("flash_attn_with_kvcache: cache_batch_idx with block_table: "
                                "list each sequence's pages in block_table instead")
        _check_table(block_table, batch, device)
        return block_table
    if cache_batch_idx is not None:
        if not isinstance(cache_batch_idx, torch.Tensor) or \
                cache_batch_idx.dtype != torch.int32:
            raise Fa2ShapeError("cache_batch_idx: expected an int32 tensor [batch]")
        _check_offsets("cache_batch_idx", cache_batch_idx, batch, device)
        return cache_batch_idx.view(batch, 1)
    if k_cache.shape[0] != batch:
        raise Fa2ShapeError(f"k_cache: {k_cache.shape[0]} sequences for a batch of {batch} "
                            "(without block_table or cache_batch_idx: [batch, seqlen_cache, "
                            "heads_kv, head_dim])")
    return _cached("pages", batch, 1, device)


def _append(k, v, seqused, table, k_cache, v_cache, batch, capacity):
    """Writes k, v [batch, seqlen_new, heads_kv, d] into the cache after each sequence's
    seqused keys; returns the new key counts. Slots past a sequence's pages are -1
    (dropped); fa2_cache_write does the copy."""
    torch = _torch()
    for name, t in (("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.dim() != 4 or t.shape[0] != batch or \
                tuple(t.shape[2:]) != tuple(k_cache.shape[2:]) or t.dtype != k_cache.dtype \
                or t.device != k_cache.device:
            raise Fa2ShapeError(f"{name}: expected [batch = {batch}, seqlen_new, heads_kv, "
                                "head_dim] of the cache's dtype and device")
    if k.shape != v.shape:
        raise Fa2ShapeError(f"k has shape {tuple(k.shape)}, v {tuple(v.shape)}: they must match")
    new = k.shape[1]
    page_size = k_cache.shape[1]
    pos = seqused.view(batch, 1) + _cached("steps", new, None, k.device)
    inside = pos < capacity
    page = table.gather(1, torch.where(inside, pos, 0).div(page_size, rounding_mode="floor")
                        .long())
    slots = torch.where(inside, page * page_size + pos % page_size, -1).to(torch.int32)
    rows = batch * new
    k_rows, v_rows = (t.contiguous().view(rows, *t.shape[2:]) for t in (k, v))
    if k_cache.shape[-1] % 8 == 0:
        cache_write(k_rows, v_rows, slots.view(rows), k_cache, v_cache, table.shape[1],
                    capacity)
    else:  # rows the library cannot address (16-byte aligned): torch writes them
        keep = slots.view(rows) >= 0
        at = slots.view(rows)[keep].long()
        k_cache[at // page_size, at % page_size] = k_rows[keep]
        v_cache[at // page_size, at % page_size] = v_rows[keep]
    return (seqused + new).clamp_(max=capacity).to(torch.int32)


_cached_tensors = {}


def _cached(kind, n, m, device):
    """Small constant int32 tensors, made once per device by the first call outside
    CUDA-graph capture (replays keep their addresses): "pages", the page table [[0],
    [1], ...] of n sequences; "steps", the row [0, 1, ..., n - 1]; "offsets", [0, m, 2m,
    ..., n m]; "constant", n copies of m."""
    torch = _torch()
    key = (kind, n, m, device.index)
    t = _cached_tensors.get(key)
    if t is None:
        if torch.cuda.is_current_stream_capturing():
            raise Fa2ShapeError("flash_attn_with_kvcache: call it once outside CUDA-graph "
                                "capture first (it makes its small index tensors then)")
        if kind == "pages":
            t = torch.arange(n, dtype=torch.int32, device=device).view(n, 1)
        elif kind == "steps":
            t = torch.arange(n, dtype=torch.int32, device=device).view(1, n)
        elif kind == "offsets":
            t = torch.arange(0, (n + 1) * m, m, dtype=torch.int32, device=device)
        else:
            t = torch.full((n,), m, dtype=torch.int32, device=device)
        with _lock:
            _cached_tensors[key] = t
    return t


def _uniform_offsets(batch, seqlen_q, device):
    return _cached("offsets", batch, seqlen_q, device)


def _constant(batch, value, device):
    return _cached("constant", batch, value, device)
