"""Problems, plans and calls on raw device pointers (no torch needed)."""
import ctypes
import sys

from ._cdefs import VARLEN_CHECK_NAMES, BackwardArgs, ForwardArgs, _i64, _struct_repr
from ._library import library
from .errors import Fa2BadMetadata, Fa2ShapeError


def _strides3(name, strides):
    """(batch, seq, head) strides from a 4-tuple whose last entry is 1, or a 3-tuple."""
    strides = tuple(int(s) for s in strides)
    if len(strides) == 4:
        if strides[3] != 1:
            raise Fa2ShapeError(f"{name}: the head_dim stride is {strides[3]}, it must be 1")
        return strides[:3]
    if len(strides) == 3:
        return strides
    raise Fa2ShapeError(f"{name}: strides {strides} are not 3 or 4 values")


def make_problem(dtype, q_shape, k_shape, v_shape=None, o_shape=None, *, q_strides=None,
                 k_strides=None, v_strides=None, o_strides=None, causal=False,
                 window=(-1, -1), softmax_scale=None, deterministic=False, softcap=0.0,
                 alibi=False, sinks=False, lib=None):
    """An fa2_problem_t from BSHD shapes [batch, seq, heads, head_dim] and strides in
    elements (4 values with the last = 1, or 3: batch, seq, head; None = contiguous
    BSHD). Shapes must agree (q with o, k with v, batch and head_dim everywhere), else
    Fa2ShapeError; everything else is left to fa2_plan, which validates it. softcap,
    alibi, sinks: the score variants (include/fa2.h); alibi False, True ([heads_q] slopes)
    or the slopes' batch stride (an int: [batch, heads_q] rows that far apart)."""
    lib = lib or library()
    shapes = {"q": q_shape, "k": k_shape, "v": k_shape if v_shape is None else v_shape,
              "o": q_shape if o_shape is None else o_shape}
    for n, s in shapes.items():
        if len(s) != 4:
            raise Fa2ShapeError(f"{n} has shape {tuple(s)}: expected 4 dims "
                                "[batch, seqlen, heads, head_dim]")
    shapes = {n: tuple(int(x) for x in s) for n, s in shapes.items()}
    q, k, v, o = shapes["q"], shapes["k"], shapes["v"], shapes["o"]
    if v != k:
        raise Fa2ShapeError(f"k has shape {k} but v has {v}: they must match")
    if o != q:
        raise Fa2ShapeError(f"q has shape {q} but o has {o}: they must match")
    if k[0] != q[0]:
        raise Fa2ShapeError(f"q has batch {q[0]} but k has {k[0]}")
    if k[3] != q[3]:
        raise Fa2ShapeError(f"q has head_dim {q[3]} but k has {k[3]}")
    p = lib.problem_init(dtype, q[0], q[1], k[1], q[2], k[2], q[3])
    for n, st in (("q", q_strides), ("k", k_strides), ("v", v_strides), ("o", o_strides)):
        if st is not None:
            b, s_, h = _strides3(n, st)
            setattr(p, f"{n}_batch_stride", b)
            setattr(p, f"{n}_seq_stride", s_)
            setattr(p, f"{n}_head_stride", h)
    p.causal = int(bool(causal))
    p.window_left, p.window_right = int(window[0]), int(window[1])
    p.softmax_scale = 0.0 if softmax_scale is None else float(softmax_scale)
    p.deterministic = int(bool(deterministic))
    _set_score_variants(p, softcap, alibi, sinks)
    return p


def alibi_key(alibi):
    """`alibi` as the problem's fields say it: -1 off (None or False), else the slopes'
    batch stride (True: 0, one [heads_q] set for every sequence; an int: [batch, heads_q]
    rows that many floats apart)."""
    if alibi is None or alibi is False:
        return -1
    return 0 if alibi is True else int(alibi)


def _set_score_variants(p, softcap, alibi, sinks):
    """The score variants' fields of a problem: softcap (0 = off), alibi (alibi_key) and
    sinks (whether their tensors come with the calls)."""
    p.softcap = float(softcap)
    stride = alibi_key(alibi)
    p.alibi, p.alibi_batch_stride = int(stride >= 0), max(stride, 0)
    p.sinks = int(bool(sinks))


def make_varlen_problem(dtype, total_q, total_k, heads_q, heads_kv, head_dim, *, batch,
                        max_seqlen_q, max_seqlen_k, q_strides=None, k_strides=None,
                        v_strides=None, o_strides=None, causal=False, window=(-1, -1),
                        softmax_scale=None, pages=None, softcap=0.0, alibi=False, sinks=False,
                        lib=None):
    """An fa2_problem_t for a packed variable-length batch (fa2_forward_varlen): Q and O
    [total_q, heads_q, head_dim], K and V [total_k, heads_kv, head_dim], strides (row,
    head) in elements (None = contiguous); at most `batch` sequences, the longest
    max_seqlen_q queries and max_seqlen_k keys. pages=(page_size, num_pages,
    pages_per_seq, k_page_stride, v_page_stride): K and V are a paged cache [num_pages,
    page_size, heads_kv, head_dim] instead (total_k 0); softcap, alibi, sinks: the score
    variants. fa2_plan validates it."""
    p = (lib or library()).problem_init(dtype, batch, max_seqlen_q, max_seqlen_k, heads_q,
                                         heads_kv, head_dim)
    p.total_q, p.total_k = int(total_q), int(total_k)
    for n, st, heads in (("q", q_strides, heads_q), ("k", k_strides, heads_kv),
                         ("v", v_strides, heads_kv), ("o", o_strides, heads_q)):
        row, head = (int(heads) * int(head_dim), int(head_dim)) if st is None else \
            (int(st[0]), int(st[1]))
        setattr(p, f"{n}_batch_stride", 0)
        setattr(p, f"{n}_seq_stride", row)
        setattr(p, f"{n}_head_stride", head)
    if pages is not None:
        page_size, num_pages, pages_per_seq, k_page, v_page = (int(x) for x in pages)
        p.page_size, p.num_pages, p.pages_per_seq = page_size, num_pages, pages_per_seq
        p.k_batch_stride, p.v_batch_stride = k_page, v_page
    p.causal = int(bool(causal))
    p.window_left, p.window_right = int(window[0]), int(window[1])
    p.softmax_scale = 0.0 if softmax_scale is None else float(softmax_scale)
    _set_score_variants(p, softcap, alibi, sinks)
    return p


# ---------------------------------------------------------------------------------
# Plans and calls on raw pointers (or torch tensors).
# ---------------------------------------------------------------------------------
def _is_tensor(x):
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def _ptr(x):
    """A device pointer from an int, None (NULL) or a torch tensor."""
    if x is None:
        return None
    if _is_tensor(x):
        return x.data_ptr() or None
    return int(x)


def _stream(stream):
    """A cudaStream_t value from None (legacy default stream), an int, or a
    torch.cuda.Stream."""
    if stream is None:
        return None
    return int(getattr(stream, "cuda_stream", stream)) or None


class Plan:
    """An fa2_plan_t and the library it came from. Fields of the C struct read as
    attributes (plan.block_m, plan.bwd_workspace_bytes, plan.fwd_arch, plan.bwd_arch,
    plan.problem.head_dim, ...)."""

    def __init__(self, lib, raw):
        self.lib = lib
        self.raw = raw

    def __getattr__(self, name):
        return getattr(self.__dict__["raw"], name)

    def __repr__(self):
        return f"<fa2.Plan {_struct_repr(self.raw)}>"

    def describe(self):
        """fa2_plan_describe: one line saying what the plan runs and why (for a log)."""
        c = self.lib.cdll
        if not hasattr(c, "fa2_plan_describe"):
            return "(this libfa2 has no fa2_plan_describe)"
        length = ctypes.c_size_t(0)
        self.lib.check(c.fa2_plan_describe(ctypes.byref(self.raw), None, 0,
                                           ctypes.byref(length)), "fa2_plan_describe")
        text = ctypes.create_string_buffer(length.value + 1)
        self.lib.check(c.fa2_plan_describe(ctypes.byref(self.raw), text, len(text),
                                           ctypes.byref(length)), "fa2_plan_describe")
        return text.value.decode()

    def forward(self, q, k, v, o, lse=None, workspace=None, workspace_bytes=None,
                stream=None):
        """fa2_forward on device pointers (ints) or torch tensors laid out as the plan's
        problem says. Asynchronous on `stream` (an int cudaStream_t, a torch stream, or
        None for the legacy default stream)."""
        if workspace_bytes is None:
            workspace_bytes = _nbytes(workspace) if _is_tensor(workspace) else 0
        self.lib.check(self.lib.cdll.fa2_forward(
            ctypes.byref(self.raw), _ptr(q), _ptr(k), _ptr(v), _ptr(o), _ptr(lse),
            _ptr(workspace), workspace_bytes, _stream(stream)), "fa2_forward")

    def forward_varlen(self, q, k, v, o, cu_seqlens_q, cu_seqlens_k, lse=None,
                       seqused_k=None, page_table=None, workspace=None, workspace_bytes=None,
                       stream=None):
        """fa2_forward_varlen for a packed plan (make_varlen_problem): the offsets, key
        counts and page table are device int32 arrays (pointers or torch tensors), read
        on the GPU only."""
        if workspace_bytes is None:
            workspace_bytes = _nbytes(workspace) if _is_tensor(workspace) else 0
        self.lib.check(self.lib.cdll.fa2_forward_varlen(
            ctypes.byref(self.raw), _ptr(q), _ptr(k), _ptr(v), _ptr(o), _ptr(lse),
            _ptr(cu_seqlens_q), _ptr(cu_seqlens_k), _ptr(seqused_k), _ptr(page_table),
            _ptr(workspace), workspace_bytes, _stream(stream)), "fa2_forward_varlen")

    def forward_with(self, q, k, v, o, lse=None, cu_seqlens_q=None, cu_seqlens_k=None,
                     seqused_k=None, page_table=None, alibi_slopes=None, sinks=None,
                     workspace=None, workspace_bytes=None, stream=None):
        """fa2_forward_with: any plan's forward, with the score variants' per-head
        tensors (float32 [heads_q], pointers or torch tensors) when the plan has them."""
        if workspace_bytes is None:
            workspace_bytes = _nbytes(workspace) if _is_tensor(workspace) else 0
        args = ForwardArgs()
        self.lib.cdll.fa2_forward_args_init(ctypes.byref(args))
        for name, value in (("q", q), ("k", k), ("v", v), ("o", o), ("lse", lse),
                            ("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k),
                            ("seqused_k", seqused_k), ("page_table", page_table),
                            ("alibi_slopes", alibi_slopes), ("sinks", sinks),
                            ("workspace", workspace)):
            setattr(args, name, _ptr(value))
        args.workspace_bytes = workspace_bytes
        args.stream = _stream(stream)
        self.lib.check(self.lib.cdll.fa2_forward_with(ctypes.byref(self.raw), ctypes.byref(args)),
                       "fa2_forward_with")

    def backward_with(self, q, k, v, o, d_o, lse, dq, dk, dv, workspace, cu_seqlens_q=None,
                      cu_seqlens_k=None, seqused_k=None, alibi_slopes=None, sinks=None,
                      dsinks=None, workspace_bytes=None, stream=None):
        """fa2_backward_with: any plan's backward, with the score variants' per-head
        tensors (float32 [heads_q]) when the plan has them, and the sinks' gradient
        dsinks (written)."""
        if workspace_bytes is None:
            workspace_bytes = _nbytes(workspace) if _is_tensor(workspace) \
                else self.raw.bwd_workspace_bytes
        args = BackwardArgs()
        self.lib.cdll.fa2_backward_args_init(ctypes.byref(args))
        for name, value in (("q", q), ("k", k), ("v", v), ("o", o), ("d_o", d_o), ("lse", lse),
                            ("dq", dq), ("dk", dk), ("dv", dv), ("cu_seqlens_q", cu_seqlens_q),
                            ("cu_seqlens_k", cu_seqlens_k), ("seqused_k", seqused_k),
                            ("alibi_slopes", alibi_slopes), ("sinks", sinks),
                            ("dsinks", dsinks), ("workspace", workspace)):
            setattr(args, name, _ptr(value))
        args.workspace_bytes = workspace_bytes
        args.stream = _stream(stream)
        self.lib.check(self.lib.cdll.fa2_backward_with(ctypes.byref(self.raw),
                                                       ctypes.byref(args)),
                       "fa2_backward_with")

    def varlen_check(self, workspace, workspace_bytes=None):
        """fa2_varlen_check: the metadata checks the last forward_varlen with this plan
        and workspace wrote (synchronous: call once that work has finished). Returns
        None when every sequence passed; raises Fa2BadMetadata naming the first sequence
        that failed and its check (also as e.sequence and e.check)."""
        if workspace_bytes is None:
            workspace_bytes = _nbytes(workspace) if _is_tensor(workspace) \
                else self.raw.workspace_bytes
        seq, check = _i64(-1), ctypes.c_int(0)
        status = self.lib.cdll.fa2_varlen_check(ctypes.byref(self.raw), _ptr(workspace),
                                                workspace_bytes, ctypes.byref(seq),
                                                ctypes.byref(check))
        try:
            self.lib.check(status, "fa2_varlen_check")
        except Fa2BadMetadata as e:
            e.sequence, e.check = seq.value, VARLEN_CHECK_NAMES.get(check.value, check.value)
            raise

    def backward_varlen(self, q, k, v, o, d_o, lse, dq, dk, dv, cu_seqlens_q, cu_seqlens_k,
                        workspace, seqused_k=None, workspace_bytes=None, stream=None):
        """fa2_backward_varlen for a packed plan, with the forward's offsets."""
        if workspace_bytes is None:
            workspace_bytes = _nbytes(workspace) if _is_tensor(workspace) \
                else self.raw.bwd_workspace_bytes
        self.lib.check(self.lib.cdll.fa2_backward_varlen(
            ctypes.byref(self.raw), _ptr(q), _ptr(k), _ptr(v), _ptr(o), _ptr(d_o), _ptr(lse),
            _ptr(dq), _ptr(dk), _ptr(dv), _ptr(cu_seqlens_q), _ptr(cu_seqlens_k),
            _ptr(seqused_k), _ptr(workspace), workspace_bytes, _stream(stream)),
            "fa2_backward_varlen")

    def backward(self, q, k, v, o, d_o, lse, dq, dk, dv, workspace, workspace_bytes=None,
                 stream=None):
        """fa2_backward: dQ, dK, dV from Q, K, V, O, dO and the forward's LSE. The
        workspace holds plan.bwd_workspace_bytes bytes (default workspace_bytes: the
        tensor's size, or plan.bwd_workspace_bytes for a raw pointer)."""
        if workspace_bytes is None:
            workspace_bytes = _nbytes(workspace) if _is_tensor(workspace) \
                else self.raw.bwd_workspace_bytes
        self.lib.check(self.lib.cdll.fa2_backward(
            ctypes.byref(self.raw), _ptr(q), _ptr(k), _ptr(v), _ptr(o), _ptr(d_o), _ptr(lse),
            _ptr(dq), _ptr(dk), _ptr(dv), _ptr(workspace), workspace_bytes,
            _stream(stream)), "fa2_backward")


def _nbytes(t):
    return t.numel() * t.element_size()


def plan(problem, device=None, lib=None):
    """fa2_plan on the default library: see Library.plan."""
    return (lib or library()).plan(problem, device)


