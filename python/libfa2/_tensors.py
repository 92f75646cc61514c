"""Layout arithmetic and the checks on torch tensors that run before any C call."""
from ._cdefs import MAX_SPLITS
from ._library import _lock, library
from .errors import Fa2BadStride, Fa2Overlap, Fa2ShapeError
from .plans import alibi_key, make_problem

# ---------------------------------------------------------------------------------
# torch: tensors in, tensors out, autograd.
# ---------------------------------------------------------------------------------
_torch_module = None


def _torch():
    """The torch module, imported on first use (a global read after that: every tensor
    call asks)."""
    global _torch_module
    if _torch_module is None:
        try:
            import torch
        except ImportError:
            raise ImportError("fa2's tensor helpers need PyTorch; the raw-pointer API "
                              "(make_problem, plan, Plan.forward) does not") from None
        _torch_module = torch
    return _torch_module


_PLAN_CACHE_MAX = 256
_plan_cache = {}


# ---------------------------------------------------------------------------------
# Layout arithmetic on shapes and strides (no torch needed).
# ---------------------------------------------------------------------------------
def repeats_addresses(shape, strides):
    """True when two elements of a strided layout may share an address: a dim of
    extent > 1 has stride 0, or, with the dims sorted by stride, a stride does not
    clear the offsets the smaller ones reach. A layout with no elements repeats
    nothing. Exact for dense tensors and their permutations, slices and expansions;
    the rare interleaved layout it flags without a real repeat is treated as repeating."""
    if any(int(n) == 0 for n in shape):
        return False
    reach = 0  # the largest offset the dims taken so far reach
    for stride, n in sorted((int(st), int(n)) for n, st in zip(shape, strides) if int(n) > 1):
        if stride <= reach:
            return True
        reach += (n - 1) * stride
    return False


def _extent(shape, strides):
    """Elements from the first to one past the last one the strides reach (0 if none)."""
    if any(int(n) == 0 for n in shape):
        return 0
    return 1 + sum((int(n) - 1) * int(st) for n, st in zip(shape, strides))


def _dense_strides(shape):
    """The strides of a contiguous tensor of `shape` (torch's rule: size-0 and size-1
    dims count as 1)."""
    out, step = [], 1
    for n in reversed(tuple(shape)):
        out.append(step)
        step *= max(int(n), 1)
    return tuple(reversed(out))


# ---------------------------------------------------------------------------------
# Tensor checks. Every one runs before the first C call, so a refused call writes
# nothing.
# ---------------------------------------------------------------------------------
def _check_storage(name, t):
    """t's storage must hold every element t's strides reach: the C kernels read or
    write all of them (a storage resized smaller under a view, as
    untyped_storage().resize_(0) does, would be accessed past its end)."""
    end = (t.storage_offset() + _extent(t.shape, t.stride())) * t.element_size()
    if t.numel() and end > t.untyped_storage().nbytes():
        raise Fa2ShapeError(f"{name}: its strides reach {end} bytes into its storage, "
                            f"which holds {t.untyped_storage().nbytes()}")


def _check_tensors(q, k, v):
    torch = _torch()
    for n, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise Fa2ShapeError(f"{n} is a {type(t).__name__}, not a torch.Tensor")
        if not t.is_cuda:
            raise Fa2ShapeError(f"{n} is on {t.device}, not on a CUDA device")
        if t.dtype not in (torch.float16, torch.bfloat16):
            raise Fa2ShapeError(f"{n} has dtype {t.dtype}: fp16 or bf16 only")
        if t.dim() != 4:
            raise Fa2ShapeError(f"{n} has shape {tuple(t.shape)}: expected 4 dims "
                                "[batch, seqlen, heads, head_dim]")
    if not (q.dtype == k.dtype == v.dtype):
        raise Fa2ShapeError(f"dtypes differ: q {q.dtype}, k {k.dtype}, v {v.dtype}")
    if not (q.device == k.device == v.device):
        raise Fa2ShapeError(f"devices differ: q {q.device}, k {k.device}, v {v.device}")
    for n, t in (("q", q), ("k", k), ("v", v)):
        _check_storage(n, t)


def _check_like(name, t, shape, dtype, device):
    """t is a torch tensor of `shape` and `dtype` on `device`, within its storage."""
    torch = _torch()
    if not isinstance(t, torch.Tensor):
        raise Fa2ShapeError(f"{name} is a {type(t).__name__}, not a torch.Tensor")
    if t.device != device:
        raise Fa2ShapeError(f"{name} is on {t.device}, q on {device}: they must match")
    if t.dtype != dtype:
        raise Fa2ShapeError(f"{name} has dtype {t.dtype}, expected {dtype}")
    if tuple(t.shape) != tuple(shape):
        raise Fa2ShapeError(f"{name} has shape {tuple(t.shape)}, expected {tuple(shape)}")
    _check_storage(name, t)


def _check_distinct(name, t):
    """An output needs one address per element: repeated ones would race."""
    if repeats_addresses(t.shape, t.stride()):
        raise Fa2Overlap(f"{name}: strides {t.stride()} give several elements of shape "
                         f"{tuple(t.shape)} one address; an output needs one address "
                         "per element")


def _check_output(name, t, shape, dtype, device):
    """An output the C call writes with t's own strides (forward's out=): the layout
    fa2_plan accepts for O, checked here so that the message names the argument."""
    _check_like(name, t, shape, dtype, device)
    strides = t.stride()
    if strides[-1] != 1:
        raise Fa2ShapeError(f"{name}: the head_dim stride is {strides[-1]}, it must be 1")
    if any(s < 0 or s % 8 for s in strides[:-1]):
        raise Fa2BadStride(f"{name}: strides {strides} are not all non-negative "
                           "multiples of 8 elements (16-byte rows)")
    _check_distinct(name, t)


def _lse_shape(q):
    return (q.shape[0], q.shape[2], q.shape[1])


def _check_lse(name, t, q):
    """The LSE: float32 [batch, heads_q, seqlen_q], contiguous, on q's device."""
    if t is None:
        raise Fa2ShapeError(f"{name} is None: pass the forward's LSE "
                            "(forward(..., return_lse=True))")
    _check_like(name, t, _lse_shape(q), _torch().float32, q.device)
    if not t.is_contiguous():
        raise Fa2ShapeError(f"{name} has strides {t.stride()}: it must be contiguous "
                            "[batch, heads_q, seqlen_q]")


def _check_gradient(name, g, t):
    """A caller-given dq, dk or dv for input t: t's shape, dtype and device, one
    address per element, and the strides the backward writes it with: t's, or those of
    t.contiguous() when t's repeat an address (backward() then passes that copy)."""
    _check_like(name, g, t.shape, t.dtype, t.device)
    _check_distinct(name, g)
    written = _dense_strides(t.shape) if repeats_addresses(t.shape, t.stride()) \
        else t.stride()
    if g.stride() != written:
        whose = f"{name[1:]}'s" if written == t.stride() else \
            f"those of {name[1:]}.contiguous(), as {name[1:]} repeats addresses"
        raise Fa2ShapeError(f"{name} has strides {g.stride()}; the backward writes it "
                            f"with {whose}: {written}")


def _as_c_input(q, t):
    """The tensor whose pointer and strides describe input K or V to the library.
    With seqlen_k = 0 K and V have no elements (data_ptr() may be 0), but the C API
    wants non-NULL k and v: Q stands in for them. The kernels read nothing from K/V
    when seqlen_k = 0, and the extent so described lies inside Q's."""
    return q if t.shape[1] == 0 else t


def cached_plan(key, make):
    """The plan cached under `key`, made by make() on a miss (the cache starts over when
    full)."""
    p = _plan_cache.get(key)
    if p is None:
        p = make()
        with _lock:
            if len(_plan_cache) >= _PLAN_CACHE_MAX:
                _plan_cache.clear()
            _plan_cache[key] = p
    return p


def plan_for(q, k, v, o=None, *, causal=False, window=(-1, -1), softmax_scale=None,
             deterministic=False, max_splits=0, softcap=0.0, alibi=False, sinks=False,
             lib=None):
    """The Plan for torch tensors (cached per shapes, strides, dtype, options, device).
    The backward uses such a plan too: dO has O's strides, dQ Q's, dK K's, dV V's.
    max_splits: fa2_problem_t.max_splits (key splits when the decode kernel runs);
    softcap, alibi, sinks: the score variants (include/fa2.h)."""
    lib = lib or library()
    o_shape, o_strides = (tuple(q.shape), None) if o is None else (tuple(o.shape), o.stride())
    k_strides, v_strides = _as_c_input(q, k).stride(), _as_c_input(q, v).stride()
    key = (id(lib), q.device.index, str(q.dtype), tuple(q.shape), q.stride(), tuple(k.shape),
           k_strides, tuple(v.shape), v_strides, o_shape, o_strides, bool(causal),
           tuple(window), softmax_scale, bool(deterministic), int(max_splits),
           float(softcap), alibi_key(alibi), bool(sinks))

    def make():
        problem = make_problem(q.dtype, q.shape, k.shape, v.shape, o_shape,
                               q_strides=q.stride(), k_strides=k_strides,
                               v_strides=v_strides, o_strides=o_strides, causal=causal,
                               window=window, softmax_scale=softmax_scale,
                               deterministic=deterministic, softcap=softcap, alibi=alibi,
                               sinks=sinks, lib=lib)
        problem.max_splits = int(max_splits)
        return lib.plan(problem, q.device.index)
    return cached_plan(key, make)


def _empty_as(t):
    """A new tensor with t's shape and strides (dense for dense t; for a strided view,
    storage spanning the view's extent)."""
    torch = _torch()
    return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device)


def _check_score_tensors(alibi_slopes, sinks, heads_q, device, batch=None):
    """The score variants' per-head tensors on q's device (or None): sinks contiguous
    float32 [heads_q]; alibi_slopes the same, or [batch, heads_q] (each row contiguous),
    as flash-attn takes them."""
    torch = _torch()
    for name, t in (("alibi_slopes", alibi_slopes), ("sinks", sinks)):
        if t is None:
            continue
        per_batch = name == "alibi_slopes" and batch is not None and \
            isinstance(t, torch.Tensor) and t.dim() == 2
        shape = (batch, heads_q) if per_batch else (heads_q,)
        if not isinstance(t, torch.Tensor) or t.dtype != torch.float32 or \
                tuple(t.shape) != shape or t.stride(-1) != 1 or t.device != device or \
                (per_batch and t.stride(0) < 0):
            want = f"[heads_q = {heads_q}]" + (f" or [batch = {batch}, heads_q]"
                                               if name == "alibi_slopes" and batch else "")
            raise Fa2ShapeError(f"{name}: expected a float32 tensor {want} on q's device, "
                                "last dim contiguous")


def alibi_stride(alibi_slopes):
    """The plan's alibi for these slopes (plans.alibi_key): None without slopes, 0 for
    [heads_q], the batch stride for [batch, heads_q] (0 when batch is 1)."""
    if alibi_slopes is None:
        return None
    if alibi_slopes.dim() == 1 or alibi_slopes.shape[0] == 1:
        return 0
    return int(alibi_slopes.stride(0))


def _max_splits(num_splits):
    """flash-attn's num_splits (0: the planner decides, n >= 1: at most n) as
    fa2_problem_t.max_splits."""
    n = int(num_splits)
    if n < 0 or n > MAX_SPLITS:
        raise Fa2ShapeError(f"num_splits={n} is out of range [0, {MAX_SPLITS}]")
    return MAX_SPLITS if n == 0 else n

