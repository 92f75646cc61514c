"""torch tensors in, tensors out: forward, backward, autograd, packed batches, combine."""
import ctypes

from . import _calls

from ._cdefs import DTYPE_BF16, DTYPE_FP16, DTYPE_FP32, CombineProblem
from ._library import library
from ._tensors import (_check_gradient, _check_like, _check_lse, _check_output,
                       _check_score_tensors, _check_tensors, _dense_strides, _empty_as,
                       _lock, _lse_shape, _max_splits, _torch, alibi_stride, cached_plan,
                       plan_for, repeats_addresses)
from .errors import Fa2ShapeError
from .plans import _ptr, _stream, alibi_key, make_varlen_problem


def forward(q, k, v, *, causal=False, window=(-1, -1), softmax_scale=None, out=None,
            lse=None, return_lse=False, deterministic=False, num_splits=0, softcap=0.0,
            alibi_slopes=None, sinks=None, lib=None):
    """Attention forward on torch tensors: q [b, sq, hq, d], k/v [b, sk, hkv, d] (BSHD
    views, any strides with head_dim stride 1; sk may be 0). Runs on the current
    stream of q's device. Returns o (new, or `out`), and the LSE float32 [b, hq, sq]
    (new, or `lse`) when return_lse=True or `lse` is given. `out` must have q's
    shape, dtype and device, a head_dim stride of 1, other strides multiples of 8 and
    one address per element; `lse` must be contiguous float32 on q's device. Checked
    before any C call: a refused call writes nothing. num_splits (as flash-attn's): 0
    lets the planner split each sequence's keys over blocks when the decode kernel runs
    (at most 16 query tokens: docs/api.md "Decode"; the workspace is allocated
    here), 1 never splits, n at most n. softcap (0 = off), alibi_slopes and sinks
    (float32 [heads_q] on q's device): the score variants as include/fa2.h defines them;
    the LSE returned includes the sink. A repeated call signature (docs/ffi.md, "Repeated
    calls") skips the checks that depend on it only."""
    return _forward((q, k, v, out, lse, alibi_slopes, sinks),
                    (return_lse, causal, window, softmax_scale, deterministic, num_splits,
                     softcap, lib))


def _forward(tensors, options, takes_new=None):
    """forward() on tensors (q, k, v, out, lse, alibi_slopes, sinks) and options
    (return_lse, causal, window, softmax_scale, deterministic, num_splits, softcap, lib):
    the cached call of the signature, made first if there is none. takes_new(): asked
    only then; when it says False, nothing runs and None is returned (the caller has
    another path for such calls)."""
    q, k, v, out, lse, alibi_slopes, sinks = tensors
    sig = _calls.qkv_signature(q, k, v) if (out is None and lse is None and alibi_slopes is None
                                            and sinks is None) else _forward_signature(tensors)
    key = None if sig is None else ("forward", sig, options)
    call = _calls.lookup(key)
    if call is None or not _calls.storages_hold(call.spans, tensors):
        if takes_new is not None and not takes_new():
            return None
        (return_lse, causal, window, softmax_scale, deterministic, num_splits, softcap,
         lib) = options
        call = _calls.store(key, _forward_call(
            *tensors, return_lse=return_lse, causal=causal, window=window,
            softmax_scale=softmax_scale, deterministic=deterministic, num_splits=num_splits,
            softcap=softcap, lib=lib))
    o, lse = call.run(*tensors)
    return (o, lse) if call.returns_lse else o


def _forward_signature(tensors):
    """The tensors' part of a dense forward's signature (None: not cacheable)."""
    sigs = _calls.signatures(tensors)
    return None if sigs is None or sigs[0] == () else sigs


def _forward_call(q, k, v, out, lse, alibi_slopes, sinks, *, return_lse, causal, window,
                  softmax_scale, deterministic, num_splits, softcap, lib):
    """Every check of a dense forward (raising before any C call), its plan, and the
    ForwardCall that runs it."""
    _check_tensors(q, k, v)
    _check_score_tensors(alibi_slopes, sinks, q.shape[2], q.device, q.shape[0])
    max_splits = _max_splits(num_splits)
    if out is not None:
        _check_output("out", out, q.shape, q.dtype, q.device)
    if lse is not None:
        _check_lse("lse", lse, q)
    p = plan_for(q, k, v, out, causal=causal, window=window, softmax_scale=softmax_scale,
                 deterministic=deterministic, max_splits=max_splits, softcap=softcap,
                 alibi=alibi_stride(alibi_slopes), sinks=sinks is not None, lib=lib)
    returns_lse = bool(return_lse) or lse is not None
    return _calls.ForwardCall(
        p, q, out, _lse_shape(q) if returns_lse else None, kv_from_q=k.shape[1] == 0,
        variants=alibi_slopes is not None or sinks is not None, returns_lse=returns_lse,
        spans_=_calls.spans(q, k, v, out, lse, alibi_slopes, sinks))


def backward(d_o, q, k, v, o, lse, *, causal=False, window=(-1, -1), softmax_scale=None,
             deterministic=False, dq=None, dk=None, dv=None, softcap=0.0, alibi_slopes=None,
             sinks=None, lib=None):
    """Attention backward on torch tensors: returns (dq, dk, dv) shaped like q, k, v,
    and with sinks also dsinks (float32 [heads_q]): (dq, dk, dv, dsinks). The score
    variants (softcap, alibi_slopes, sinks) as the forward had them.
    `o` and `lse` come from forward(..., return_lse=True) with the same options; o and
    d_o have q's shape, dtype and device. dO is copied to O's strides when its own
    differ.

    fa2_backward writes dQ, dK, dV with Q's, K's and V's strides. An input whose
    strides repeat an address (an expanded tensor, e.g. k0.expand(2, ...)) goes to the
    library as a contiguous copy, and its gradient is a full-shape tensor with the
    copy's strides: sum it over the broadcast dims (autograd does, for expand). A
    given dq, dk or dv must have the strides the library writes (its input's, or the
    copy's) and one address per element, else Fa2Overlap / Fa2ShapeError before any C
    call. With seqlen_k = 0, dq is zero and dk, dv have no elements."""
    return _backward((d_o, q, k, v, o, lse, dq, dk, dv, alibi_slopes, sinks),
                     (causal, window, softmax_scale, deterministic, softcap, lib))


def _backward(tensors, options):
    """backward() on tensors (d_o, q, k, v, o, lse, dq, dk, dv, alibi_slopes, sinks) and
    options (causal, window, softmax_scale, deterministic, softcap, lib): the cached call
    of the signature, made first if there is none."""
    d_o, q, k, v, o, lse, dq, dk, dv, alibi_slopes, sinks = tensors
    if (dq is None and dk is None and dv is None and alibi_slopes is None and
            sinks is None):
        qkv = _calls.qkv_signature(q, k, v)
        rest = _calls.qkv_signature(d_o, o, lse)
        sigs = None if qkv is None or rest is None else qkv + rest
    else:
        sigs = _calls.signatures(tensors)
    key = None if sigs is None else ("backward", sigs, options)
    call = _calls.lookup(key)
    if call is None or not _calls.storages_hold(call.spans, tensors):
        causal, window, softmax_scale, deterministic, softcap, lib = options
        call = _calls.store(key, _backward_call(
            *tensors, causal=causal, window=window, softmax_scale=softmax_scale,
            deterministic=deterministic, softcap=softcap, lib=lib))
    return call.run(*tensors)


class _NoKeysBackward:
    """seqlen_k = 0: dQ = 0 and dK, dV are empty, and every row is the sink's alone,
    with O = 0: dsinks = 0. fa2_backward would need non-NULL dK and dV pointers that
    overlap nothing, for no work: not called."""

    def __init__(self, spans_):
        self.spans = spans_

    def run(self, d_o, q, k, v, o, lse, dq, dk, dv, alibi_slopes, sinks):
        torch = _torch()
        dq = _empty_as(q).zero_() if dq is None else dq.zero_()
        dk = _empty_as(k) if dk is None else dk
        dv = _empty_as(v) if dv is None else dv
        return (dq, dk, dv) + (() if sinks is None else (torch.zeros_like(sinks),))


def _backward_call(d_o, q, k, v, o, lse, dq, dk, dv, alibi_slopes, sinks, *, causal, window,
                   softmax_scale, deterministic, softcap, lib):
    """Every check of a dense backward (raising before any C call), its plan, and the
    BackwardCall that runs it."""
    _check_tensors(q, k, v)
    _check_score_tensors(alibi_slopes, sinks, q.shape[2], q.device, q.shape[0])
    _check_like("o", o, q.shape, q.dtype, q.device)
    _check_like("d_o", d_o, q.shape, q.dtype, q.device)
    _check_lse("lse", lse, q)
    for name, g, t in (("dq", dq, q), ("dk", dk, k), ("dv", dv, v)):
        if g is not None:
            _check_gradient(name, g, t)
    spans_ = _calls.spans(d_o, q, k, v, o, lse, dq, dk, dv, alibi_slopes, sinks)
    if k.shape[1] == 0:
        return _NoKeysBackward(spans_)
    # Inputs that repeat addresses go as contiguous copies (only those).
    copies = tuple(repeats_addresses(t.shape, t.stride()) for t in (q, k, v))
    q_c, k_c, v_c = (t.contiguous() if c else t for t, c in zip((q, k, v), copies))
    p = plan_for(q_c, k_c, v_c, o, causal=causal, window=window,
                 softmax_scale=softmax_scale, deterministic=deterministic, softcap=softcap,
                 alibi=alibi_stride(alibi_slopes), sinks=sinks is not None, lib=lib)
    layouts = tuple((t.shape, t.stride()) for t in (q_c, k_c, v_c))
    return _calls.BackwardCall(
        p, q.device, copies, d_o.stride() != o.stride(), layouts,
        all(_torch().empty_like(t, device="meta").stride() == t.stride()
            for t in (q_c, k_c, v_c)),
        alibi_slopes is not None or sinks is not None, spans_)


_ops = None


def _custom_ops():
    """torch.ops.libfa2.fwd / bwd: forward and backward registered as torch.library
    custom ops (with fake implementations for shapes, and the backward as the forward's
    autograd formula), so that torch.compile traces attention() without a graph break.
    Built on first use, so that importing libfa2 needs no torch."""
    global _ops
    if _ops is not None:
        return _ops
    torch = _torch()
    from typing import Optional, Tuple

    with _lock:
        if _ops is not None:
            return _ops

        @torch.library.custom_op("libfa2::fwd", mutates_args=())
        def fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                window_left: int, window_right: int, softmax_scale: Optional[float],
                deterministic: bool, softcap: float, alibi_slopes: Optional[torch.Tensor],
                sinks: Optional[torch.Tensor]) -> Tuple[torch.Tensor, torch.Tensor]:
            return forward(q, k, v, causal=causal, window=(window_left, window_right),
                           softmax_scale=softmax_scale, deterministic=deterministic,
                           softcap=softcap, alibi_slopes=alibi_slopes, sinks=sinks,
                           return_lse=True)

        @fwd.register_fake
        def _(q, k, v, causal, window_left, window_right, softmax_scale, deterministic,
              softcap, alibi_slopes, sinks):
            return (q.new_empty(q.shape),
                    q.new_empty(_lse_shape(q), dtype=torch.float32))

        # dsinks: float32 [heads_q] with sinks, else an empty tensor (a custom op returns
        # tensors).
        @torch.library.custom_op("libfa2::bwd", mutates_args=())
        def bwd(d_o: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                o: torch.Tensor, lse: torch.Tensor, causal: bool, window_left: int,
                window_right: int, softmax_scale: Optional[float], deterministic: bool,
                softcap: float, alibi_slopes: Optional[torch.Tensor],
                sinks: Optional[torch.Tensor]
                ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
            grads = backward(d_o, q, k, v, o, lse, causal=causal,
                             window=(window_left, window_right), softmax_scale=softmax_scale,
                             deterministic=deterministic, softcap=softcap,
                             alibi_slopes=alibi_slopes, sinks=sinks)
            return grads if sinks is not None else grads + (q.new_empty(0, dtype=torch.float32),)

        @bwd.register_fake
        def _(d_o, q, k, v, o, lse, causal, window_left, window_right, softmax_scale,
              deterministic, softcap, alibi_slopes, sinks):
            # backward() writes each gradient with its input's strides, or dense ones
            # for an input whose strides repeat an address.
            return tuple(torch.empty_strided(t.shape, _dense_strides(t.shape) if
                                             repeats_addresses(t.shape, t.stride())
                                             else t.stride(), dtype=t.dtype,
                                             device=t.device) for t in (q, k, v)) + (
                q.new_empty(0 if sinks is None else sinks.shape[0], dtype=torch.float32),)

        def setup_context(ctx, inputs, output):
            (q, k, v, causal, window_left, window_right, softmax_scale, deterministic,
             softcap, alibi_slopes, sinks) = inputs
            o, lse = output
            ctx.save_for_backward(q, k, v, o, lse, alibi_slopes, sinks)
            ctx.mark_non_differentiable(lse)
            ctx.options = (causal, window_left, window_right, softmax_scale, deterministic,
                           softcap)

        def backward_formula(ctx, d_o, d_lse):
            q, k, v, o, lse, alibi_slopes, sinks = ctx.saved_tensors
            dq, dk, dv, dsinks = bwd(d_o, q, k, v, o, lse, *ctx.options, alibi_slopes, sinks)
            return (dq, dk, dv) + (None,) * 7 + (None if sinks is None else dsinks,)

        fwd.register_autograd(backward_formula, setup_context=setup_context)

        @torch.library.custom_op("libfa2::varlen_fwd", mutates_args=())
        def varlen_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                       cu_seqlens_q: torch.Tensor, cu_seqlens_k: torch.Tensor,
                       seqused_k: Optional[torch.Tensor], max_seqlen_q: int,
                       max_seqlen_k: int, causal: bool, window_left: int, window_right: int,
                       softmax_scale: Optional[float], deterministic: bool, softcap: float,
                       alibi_slopes: Optional[torch.Tensor], sinks: Optional[torch.Tensor]
                       ) -> Tuple[torch.Tensor, torch.Tensor]:
            return _varlen_forward(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k,
                                   max_seqlen_q, max_seqlen_k, causal,
                                   (window_left, window_right), softmax_scale, deterministic,
                                   softcap, alibi_slopes, sinks)

        @varlen_fwd.register_fake
        def _(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k,
              causal, window_left, window_right, softmax_scale, deterministic, softcap,
              alibi_slopes, sinks):
            return (q.new_empty(q.shape),
                    q.new_empty((q.shape[1], q.shape[0]), dtype=torch.float32))

        @torch.library.custom_op("libfa2::varlen_bwd", mutates_args=())
        def varlen_bwd(d_o: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                       o: torch.Tensor, lse: torch.Tensor, cu_seqlens_q: torch.Tensor,
                       cu_seqlens_k: torch.Tensor, seqused_k: Optional[torch.Tensor],
                       max_seqlen_q: int, max_seqlen_k: int, causal: bool, window_left: int,
                       window_right: int, softmax_scale: Optional[float], deterministic: bool,
                       softcap: float, alibi_slopes: Optional[torch.Tensor],
                       sinks: Optional[torch.Tensor]
                       ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
            return _varlen_backward(d_o, q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k,
                                    seqused_k, max_seqlen_q, max_seqlen_k, causal,
                                    (window_left, window_right), softmax_scale, deterministic,
                                    softcap, alibi_slopes, sinks)

        @varlen_bwd.register_fake
        def _(d_o, q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q,
              max_seqlen_k, causal, window_left, window_right, softmax_scale, deterministic,
              softcap, alibi_slopes, sinks):
            return tuple(torch.empty_strided(t.shape, t.stride(), dtype=t.dtype,
                                             device=t.device) for t in (q, k, v)) + (
                q.new_empty(0 if sinks is None else sinks.shape[0], dtype=torch.float32),)

        def varlen_setup_context(ctx, inputs, output):
            q, k, v, cu_q, cu_k, used = inputs[:6]
            alibi_slopes, sinks = inputs[-2:]
            o, lse = output
            ctx.save_for_backward(q, k, v, o, lse, cu_q, cu_k, used, alibi_slopes, sinks)
            ctx.mark_non_differentiable(lse)
            ctx.options = inputs[6:-2]

        def varlen_backward_formula(ctx, d_o, d_lse):
            q, k, v, o, lse, cu_q, cu_k, used, alibi_slopes, sinks = ctx.saved_tensors
            dq, dk, dv, dsinks = varlen_bwd(d_o, q, k, v, o, lse, cu_q, cu_k, used,
                                            *ctx.options, alibi_slopes, sinks)
            return (dq, dk, dv) + (None,) * 12 + (None if sinks is None else dsinks,)

        varlen_fwd.register_autograd(varlen_backward_formula,
                                     setup_context=varlen_setup_context)
        _ops = torch.ops.libfa2
    return _ops


def attention(q, k, v, *, causal=False, window=(-1, -1), softmax_scale=None,
              deterministic=False, softcap=0.0, alibi_slopes=None, sinks=None):
    """softmax(scale * q k^T + mask) v on BSHD torch tensors, differentiable. Options
    are keyword-only (a fourth positional argument would be flash_attn_func's dropout_p;
    see flash_attn_interface).
    q [b, sq, hq, d], k/v [b, sk, hkv, d], hq a multiple of hkv (GQA/MQA). Causal
    masks are bottom-right aligned when sq != sk (FlashAttention-2 >= 2.1). Tensors
    whose head_dim stride is not 1 are made contiguous first. Broadcast (expanded)
    inputs get correct gradients; sk = 0 gives o = 0 and dq = 0. softcap (0 = off),
    alibi_slopes and sinks (float32 [heads_q] on q's device): the score variants of
    include/fa2.h; sinks get a gradient, the slopes none."""
    return _attention(q, k, v, causal, window, softmax_scale, deterministic, softcap,
                      alibi_slopes, sinks)[0]


def attention_with_lse(q, k, v, *, causal=False, window=(-1, -1), softmax_scale=None,
                       deterministic=False, softcap=0.0, alibi_slopes=None, sinks=None):
    """attention() and its LSE float32 [b, hq, sq] (natural log, not differentiable).
    Eager calls go through a torch.autograd.Function (or straight to forward() when no
    input needs a gradient); under torch.compile, through the custom ops libfa2::fwd and
    libfa2::bwd, which it traces without a graph break."""
    return _attention(q, k, v, causal, window, softmax_scale, deterministic, softcap,
                      alibi_slopes, sinks)


def _attention(q, k, v, causal, window, softmax_scale, deterministic, softcap, alibi_slopes,
               sinks):
    torch = _torch()
    tensor = torch.Tensor
    if not (isinstance(q, tensor) and isinstance(k, tensor) and isinstance(v, tensor)):
        for name, t in (("q", q), ("k", k), ("v", v)):
            if not isinstance(t, tensor):
                raise Fa2ShapeError(f"{name} is a {type(t).__name__}, not a torch.Tensor")
    if q.dim() and q.stride(-1) != 1:
        q = q.contiguous()
    if k.dim() and k.stride(-1) != 1:
        k = k.contiguous()
    if v.dim() and v.stride(-1) != 1:
        v = v.contiguous()
    if type(window) is not tuple or window != (-1, -1):
        window = tuple(int(w) for w in window)
        if len(window) != 2:
            raise ValueError(f"window={window}: expected (left, right)")
    if torch.compiler.is_compiling():
        return _custom_ops().fwd(q, k, v, bool(causal), window[0], window[1],
                                 None if softmax_scale is None else float(softmax_scale),
                                 bool(deterministic), float(softcap), alibi_slopes, sinks)
    if _tracked(q, k, v, sinks):
        return (_function or _autograd_function()).apply(
            q, k, v, (causal, window, softmax_scale, deterministic, softcap), alibi_slopes,
            sinks)
    return _forward((q, k, v, None, None, alibi_slopes, sinks),
                    (True, causal, window, softmax_scale, deterministic, 0, softcap, None))


def _tracked(q, k, v, sinks):
    """Whether autograd records this call: grad mode on and an input that needs a
    gradient."""
    return _torch().is_grad_enabled() and (q.requires_grad or k.requires_grad or
                                           v.requires_grad or
                                           (sinks is not None and sinks.requires_grad))


_function = None


def _autograd_function():
    """attention's torch.autograd.Function (built on first use: importing libfa2 needs no
    torch). The same formula as the custom ops' registered autograd, at the host cost of
    a plain Function."""
    global _function
    if _function is not None:
        return _function
    torch = _torch()

    class Attention(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, options, alibi_slopes, sinks):
            causal, window, softmax_scale, deterministic, softcap = options
            o, lse = _forward((q, k, v, None, None, alibi_slopes, sinks),
                              (True, causal, window, softmax_scale, deterministic, 0, softcap,
                               None))
            ctx.save_for_backward(q, k, v, o, lse, alibi_slopes, sinks)
            ctx.mark_non_differentiable(lse)
            # No gradient for the LSE is ever used: None, rather than a tensor of zeros
            # allocated and filled on every backward.
            ctx.set_materialize_grads(False)
            ctx.options = options
            return o, lse

        @staticmethod
        def backward(ctx, d_o, d_lse):
            if d_o is None:  # O took no part in what is differentiated
                return (None,) * 6
            q, k, v, o, lse, alibi_slopes, sinks = ctx.saved_tensors
            grads = _backward((d_o, q, k, v, o, lse, None, None, None, alibi_slopes, sinks),
                              ctx.options + (None,))
            return grads[:3] + (None, None, grads[3] if sinks is not None else None)

    with _lock:
        if _function is None:
            _function = Attention
    return _function


def _check_offsets(name, t, n, device):
    """A device int32 vector of n values (cu_seqlens_*, seqused_k)."""
    torch = _torch()
    if not isinstance(t, torch.Tensor):
        raise Fa2ShapeError(f"{name} is a {type(t).__name__}, not a torch.Tensor")
    if t.dtype != torch.int32 or t.dim() != 1 or t.numel() != n or not t.is_contiguous():
        raise Fa2ShapeError(f"{name}: dtype {t.dtype}, shape {tuple(t.shape)}: expected a "
                            f"contiguous int32 vector of {n} values")
    if t.device != device:
        raise Fa2ShapeError(f"{name} is on {t.device}, q on {device}: they must match")


def _varlen_plan(q3, k3, v3, batch, max_seqlen_q, max_seqlen_k, causal, window,
                 softmax_scale, deterministic, softcap=0.0, alibi=False, sinks=False,
                 o3=None, pages=None, max_splits=0):
    """The cached Plan of a packed batch: q3 [total_q, hq, d], k3/v3 [total_k, hkv, d]
    (or, with pages = (page_size, num_pages, pages_per_seq), a paged cache [num_pages,
    page_size, hkv, d]), O with o3's strides (None: contiguous like q3); softcap, alibi,
    sinks: the score variants; max_splits: the decode kernel's key splits."""
    o_strides = (q3.shape[1] * q3.shape[2], q3.shape[2]) if o3 is None else o3.stride()[:2]
    key = ("varlen", q3.device.index, str(q3.dtype), tuple(q3.shape), q3.stride(),
           tuple(k3.shape), k3.stride(), v3.stride(), o_strides, batch, int(max_seqlen_q),
           int(max_seqlen_k), bool(causal), tuple(window), softmax_scale, bool(deterministic),
           float(softcap), alibi_key(alibi), bool(sinks), pages, int(max_splits))

    def make():
        lib = library()
        row = 1 if pages is not None else 0  # a paged cache's rows are its second dim
        paged = None if pages is None else tuple(pages) + (k3.stride(0), v3.stride(0))
        problem = make_varlen_problem(
            q3.dtype, q3.shape[0], 0 if pages else k3.shape[0], q3.shape[1], k3.shape[1 + row],
            q3.shape[2], batch=batch, max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k,
            q_strides=q3.stride()[:2], k_strides=k3.stride()[row:row + 2],
            v_strides=v3.stride()[row:row + 2], o_strides=o_strides, causal=causal,
            window=window, softmax_scale=softmax_scale, pages=paged, softcap=softcap,
            alibi=alibi, sinks=sinks, lib=lib)
        problem.deterministic = int(bool(deterministic))
        problem.max_splits = int(max_splits)
        return lib.plan(problem, q3.device.index)
    return cached_plan(key, make)


def _varlen_inputs(k3, v3, q3):
    """K and V pointers for the library: with no key row (data_ptr() may be 0), q stands
    in; nothing is read from it."""
    return (q3, q3) if k3.shape[0] == 0 else (k3, v3)


def _varlen_forward(q3, k3, v3, cu_q, cu_k, seqused_k, max_q, max_k, causal, window,
                    softmax_scale, deterministic, softcap=0.0, alibi_slopes=None, sinks=None,
                    out=None):
    """(o, lse) of a checked packed batch: o `out` or new and contiguous like q3, lse
    [heads_q, total_q]."""
    torch = _torch()
    p = _varlen_plan(q3, k3, v3, cu_q.numel() - 1, max_q, max_k, causal, window,
                     softmax_scale, deterministic, softcap, alibi_stride(alibi_slopes),
                     sinks is not None, o3=out)
    k_c, v_c = _varlen_inputs(k3, v3, q3)
    o = torch.empty(q3.shape, dtype=q3.dtype, device=q3.device) if out is None else out
    lse = torch.empty((q3.shape[1], q3.shape[0]), dtype=torch.float32, device=q3.device)
    # the metadata checks' record (a failed sequence is skipped; not read back here)
    workspace = torch.empty(p.workspace_bytes, dtype=torch.uint8, device=q3.device)
    with torch.cuda.device(q3.device):
        p.forward_with(q3, k_c, v_c, o, lse, cu_q, cu_k, seqused_k,
                       alibi_slopes=alibi_slopes, sinks=sinks, workspace=workspace,
                       stream=torch.cuda.current_stream(q3.device))
    return o, lse


def paged_forward(q3, k_cache, v_cache, cu_seqlens_q, seqused_k, page_table, max_seqlen_q,
                  max_seqlen_k, *, causal=False, window=(-1, -1), softmax_scale=None,
                  softcap=0.0, alibi_slopes=None, sinks=None, num_splits=0, out=None,
                  return_lse=False, check_metadata=False):
    """Attention over a paged K/V cache (forward only, no autograd): q3 [total_q, heads_q,
    d] packed queries, k_cache / v_cache [num_pages, page_size, heads_kv, d], page_table
    int32 [batch, pages_per_seq], seqused_k int32 [batch] (each sequence's key count),
    cu_seqlens_q int32 [batch + 1]; max_seqlen_q / max_seqlen_k the planned bounds.
    Returns o [total_q, heads_q, d] (`out` or new), and with return_lse the LSE float32
    [heads_q, total_q]. The metadata is checked on the GPU: a sequence that fails is
    skipped (its rows not written); check_metadata=True synchronizes and raises
    Fa2BadMetadata naming it. Callers check the tensors (flash_attn_interface)."""
    torch = _torch()
    p = paged_plan(q3, k_cache, v_cache, page_table, max_seqlen_q, max_seqlen_k, causal=causal,
                   window=window, softmax_scale=softmax_scale, softcap=softcap,
                   alibi_slopes=alibi_slopes, sinks=sinks, num_splits=num_splits, out=out)
    o = torch.empty(q3.shape, dtype=q3.dtype, device=q3.device) if out is None else out
    lse = torch.empty((q3.shape[1], q3.shape[0]), dtype=torch.float32, device=q3.device) \
        if return_lse else None
    workspace = torch.empty(p.workspace_bytes, dtype=torch.uint8, device=q3.device)
    with torch.cuda.device(q3.device):
        p.forward_with(q3, k_cache, v_cache, o, lse, cu_seqlens_q, None, seqused_k, page_table,
                       alibi_slopes, sinks, workspace=workspace,
                       stream=torch.cuda.current_stream(q3.device))
        if check_metadata:
            torch.cuda.current_stream(q3.device).synchronize()
            p.varlen_check(workspace)
    return (o, lse) if return_lse else o


def paged_plan(q3, k_cache, v_cache, page_table, max_seqlen_q, max_seqlen_k, *, causal,
               window, softmax_scale, softcap, alibi_slopes, sinks, num_splits, out=None):
    """The cached Plan of a paged forward (paged_forward's arguments)."""
    pages = (k_cache.shape[1], k_cache.shape[0], page_table.shape[1])
    return _varlen_plan(q3, k_cache, v_cache, page_table.shape[0], max_seqlen_q, max_seqlen_k,
                        causal, window, softmax_scale, False, softcap,
                        alibi_stride(alibi_slopes), sinks is not None, o3=out, pages=pages,
                        max_splits=_max_splits(num_splits))


def cache_write(k_new, v_new, slot_mapping, k_cache, v_cache, page_table_width, max_seqlen_k):
    """fa2_cache_write: rows k_new / v_new [n, heads_kv, d] (contiguous) into the paged
    cache at slot_mapping (int32 [n]; slot = page * page_size + row, -1 skips the token),
    on the current stream. page_table_width and max_seqlen_k only shape the plan the C
    call wants (a paged plan of this cache)."""
    torch = _torch()
    n, heads_kv, d = k_new.shape
    page_size, num_pages = k_cache.shape[1], k_cache.shape[0]
    lib = library()
    key = ("cache_write", k_new.device.index, str(k_new.dtype), tuple(k_cache.shape),
           k_cache.stride(), v_cache.stride(), page_table_width, int(max_seqlen_k))

    def make():
        problem = make_varlen_problem(
            k_new.dtype, 1, 0, heads_kv, heads_kv, d, batch=1, max_seqlen_q=1,
            max_seqlen_k=max_seqlen_k, k_strides=k_cache.stride()[1:3],
            v_strides=v_cache.stride()[1:3],
            pages=(page_size, num_pages, page_table_width, k_cache.stride(0),
                   v_cache.stride(0)), lib=lib)
        return lib.plan(problem, k_new.device.index)
    p = cached_plan(key, make)
    with torch.cuda.device(k_new.device):
        lib.check(lib.cdll.fa2_cache_write(
            ctypes.byref(p.raw), _ptr(k_new), _ptr(v_new), n, k_new.stride(0),
            _ptr(slot_mapping), _ptr(k_cache), _ptr(v_cache),
            _stream(torch.cuda.current_stream(k_new.device))), "fa2_cache_write")


def _varlen_backward(d_o, q3, k3, v3, o, lse, cu_q, cu_k, seqused_k, max_q, max_k, causal,
                     window, softmax_scale, deterministic, softcap=0.0, alibi_slopes=None,
                     sinks=None):
    """(dq, dk, dv, dsinks) of a packed batch, each gradient with its input's strides;
    rows no sequence uses (which the library leaves alone) are 0, their gradient;
    dsinks float32 [heads_q] (empty without sinks)."""
    torch = _torch()
    dq, dk, dv = (_empty_as(t).zero_() for t in (q3, k3, v3))
    dsinks = (q3.new_empty(0, dtype=torch.float32) if sinks is None
              else torch.zeros_like(sinks))
    if k3.shape[0] == 0:
        return dq, dk, dv, dsinks  # no key: dQ = 0, dK and dV empty, O = 0: dsinks = 0
    p = _varlen_plan(q3, k3, v3, cu_q.numel() - 1, max_q, max_k, causal, window,
                     softmax_scale, deterministic, softcap, alibi_stride(alibi_slopes),
                     sinks is not None)
    d_o = d_o.contiguous()  # O's strides (o is contiguous)
    workspace = torch.empty(max(int(p.bwd_workspace_bytes), 16), dtype=torch.uint8,
                            device=q3.device)
    with torch.cuda.device(q3.device):
        p.backward_with(q3, k3, v3, o, d_o, lse, dq, dk, dv, workspace, cu_q, cu_k, seqused_k,
                        alibi_slopes=alibi_slopes, sinks=sinks,
                        dsinks=None if sinks is None else dsinks,
                        stream=torch.cuda.current_stream(q3.device))
    return dq, dk, dv, dsinks




def combine(o_parts, lse_parts, out_dtype=None, *, return_lse=True, lib=None):
    """fa2_combine on torch tensors: N partial results of attention over separate key
    ranges, o_parts [N, rows, heads, head_dim] (float32, float16 or bfloat16, last dim
    contiguous, other strides free) and lse_parts float32 [N, heads, rows] (natural log,
    as libfa2 returns it; -inf: the part saw no key), merged into the attention over all
    the keys: o [rows, heads, head_dim] of out_dtype (default: o_parts' dtype) and, with
    return_lse, lse float32 [heads, rows]. Asynchronous on the current stream. lib: the
    Library to call (default: library())."""
    torch = _torch()
    dtypes = {torch.float32: DTYPE_FP32, torch.float16: DTYPE_FP16,
              torch.bfloat16: DTYPE_BF16}
    if not isinstance(o_parts, torch.Tensor) or o_parts.dim() != 4 or \
            o_parts.dtype not in dtypes or not o_parts.is_cuda:
        raise Fa2ShapeError("o_parts: expected a CUDA float32/float16/bfloat16 tensor "
                            "[parts, rows, heads, head_dim]")
    n, rows, heads, d = o_parts.shape
    if not isinstance(lse_parts, torch.Tensor) or lse_parts.dtype != torch.float32 or \
            tuple(lse_parts.shape) != (n, heads, rows) or lse_parts.device != o_parts.device:
        raise Fa2ShapeError(f"lse_parts: expected float32 {(n, heads, rows)} on o_parts' "
                            "device")
    out_dtype = o_parts.dtype if out_dtype is None else out_dtype
    if out_dtype not in dtypes:
        raise Fa2ShapeError(f"out_dtype={out_dtype}: float32, float16 or bfloat16")
    if o_parts.stride(-1) != 1:
        o_parts = o_parts.contiguous()
    lib = lib or library()
    p = CombineProblem()
    lib.cdll.fa2_combine_problem_init(ctypes.byref(p), dtypes[o_parts.dtype], dtypes[out_dtype],
                                      n, rows, heads, d)
    p.o_parts_part_stride, p.o_parts_row_stride, p.o_parts_head_stride = o_parts.stride()[:3]
    p.lse_parts_part_stride, p.lse_parts_head_stride, p.lse_parts_row_stride = \
        lse_parts.stride()
    o = torch.empty((rows, heads, d), dtype=out_dtype, device=o_parts.device)
    lse = torch.empty((heads, rows), dtype=torch.float32, device=o_parts.device) \
        if return_lse else None
    with torch.cuda.device(o_parts.device):
        lib.check(lib.cdll.fa2_combine(ctypes.byref(p), _ptr(o_parts), _ptr(lse_parts),
                                       _ptr(o), _ptr(lse),
                                       _stream(torch.cuda.current_stream(o_parts.device))),
                  "fa2_combine")
    return (o, lse) if return_lse else o
