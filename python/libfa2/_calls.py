"""The call cache: what a checked call decided, kept per call signature, so that a
repeated call checks storage, allocates its outputs, patches pointers and the stream, and
calls C once.

A signature is everything the checks and the plan depend on: each tensor's exact type,
shape, strides, dtype and device, and the call's options. The one property a signature
cannot hold, whether a tensor's storage still covers what its strides reach (a storage
can be resized under a view), is checked on every call. A call whose signature is not in
the cache, or whose storage check fails, takes the full path: every check, then the plan,
then a new entry (a refused call raises there, before any C call, and caches nothing).
"""
import ctypes
import sys

from ._library import _lock

_CACHE_MAX = 512
_cache = {}


_tensor_types = ()


def _plain_tensor_types():
    """(torch.Tensor, torch.nn.Parameter), once torch is imported (no tensor exists
    before)."""
    global _tensor_types
    torch = sys.modules.get("torch")
    if torch is not None:
        _tensor_types = (torch.Tensor, torch.nn.Parameter)
    return _tensor_types


def signatures(tensors):
    """The tensors' part of a call signature: per tensor its shape, strides, dtype and
    device index, () for None; None (not cacheable) when one is anything but a plain
    torch.Tensor or nn.Parameter."""
    types = _tensor_types or _plain_tensor_types()
    out = [() if t is None else (t.shape, t.stride(), t.dtype, t.get_device())
           if type(t) in types else None for t in tensors]
    return None if None in out else tuple(out)


def qkv_signature(q, k, v):
    """signatures((q, k, v)) as one flat tuple (a call without optional tensors: the
    common case, read with the fewest steps); None when not cacheable. Its length
    tells it from a signatures() tuple."""
    types = _tensor_types or _plain_tensor_types()
    if type(q) in types and type(k) in types and type(v) in types:
        return (q.shape, q.stride(), q.dtype, q.get_device(), k.shape, k.stride(), k.dtype,
                k.get_device(), v.shape, v.stride(), v.dtype, v.get_device())
    return None


def lookup(key):
    """The entry cached under key; None for a miss or an unhashable option (a list)."""
    if key is None:
        return None
    try:
        return _cache.get(key)
    except TypeError:
        return None


def _plain(x):
    """Whether x compares by value: Python scalars, strings, None, dtypes, tuples of
    those (tensor shapes too), or a Library (one object per loaded file). An option
    that is anything else (a tensor passed as a scale) keeps its call out of the cache."""
    if x is None or type(x) in (bool, int, float, str):
        return True
    if isinstance(x, tuple):
        return all(_plain(y) for y in x)
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.dtype):
        return True
    from ._library import Library
    return type(x) is Library


def store(key, entry):
    """Keeps entry under key when every part of the key compares by value (the cache
    starts over when full); returns entry."""
    if key is not None and _plain(key):
        with _lock:
            if len(_cache) >= _CACHE_MAX:
                _cache.clear()
            _cache[key] = entry
    return entry


def clear():
    """Forgets every cached call (tests; a process that loads another library)."""
    with _lock:
        _cache.clear()


def spans(*tensors):
    """(tensor index, element size, bytes its strides reach) for each given tensor with
    elements: what storages_hold checks per call (the dtype, hence the element size, is
    part of the signature)."""
    from ._tensors import _extent
    return tuple((i, t.element_size(), _extent(t.shape, t.stride()) * t.element_size())
                 for i, t in enumerate(tensors) if t is not None and t.numel())


def storages_hold(spans_, tensors):
    """Whether each tensor's storage still holds what its strides reach."""
    for i, size, span in spans_:
        t = tensors[i]
        if t.storage_offset() * size + span > t.untyped_storage().nbytes():
            return False
    return True


_cuda = None  # torch's current-device and current-stream getters, bound on first use


def _cuda_getters():
    global _cuda
    torch = sys.modules["torch"]
    _cuda = (torch._C._cuda_getDevice, torch._C._cuda_getCurrentRawStream)
    return _cuda


class Launch:
    """One C entry point bound to a plan: the plan's address and the library's check,
    the device, and its current stream looked up per call. The device is switched to
    only when it is not the current one."""

    def __init__(self, lib, plan, function, device):
        self.lib = lib
        self.plan = plan  # keeps the fa2_plan_t alive
        self.plan_ref = ctypes.byref(plan.raw)
        self.function = function
        self.c_function = getattr(lib.cdll, function)
        self.index = device.index

    def __call__(self, *pointers):
        """Calls the C function on (plan, *pointers, the device's current stream); a
        non-zero status raised."""
        current_device, current_stream = _cuda or _cuda_getters()
        if current_device() != self.index:
            with sys.modules["torch"].cuda.device(self.index):
                return self(*pointers)
        status = self.c_function(self.plan_ref, *pointers, current_stream(self.index))
        if status:
            self.lib.check(status, self.function)

    def with_args(self, args):
        """Calls fa2_forward_with / fa2_backward_with on an args struct whose stream is
        filled here."""
        current_device, current_stream = _cuda or _cuda_getters()
        if current_device() != self.index:
            with sys.modules["torch"].cuda.device(self.index):
                return self.with_args(args)
        args.stream = current_stream(self.index)
        status = self.c_function(self.plan_ref, ctypes.byref(args))
        if status:
            self.lib.check(status, self.function)

    def args_template(self, mirror):
        """A ForwardArgs or BackwardArgs as the library's init fills it, for calls to copy."""
        args = mirror()
        getattr(self.lib.cdll, self.function.replace("_with", "_args_init"))(
            ctypes.byref(args))
        return args


def empty_output(q, like_q):
    """A new O for q (O has q's shape, dtype and device): torch.empty_like(q) when that is
    contiguous (like_q: q is), the cheapest allocation from Python; else contiguous."""
    return sys.modules["torch"].empty_like(q) if like_q else q.new_empty(q.shape)


def pointer(t):
    """A tensor's device address, 0 (NULL) for None."""
    return 0 if t is None else t.data_ptr()


class ForwardCall:
    """A checked dense forward: allocates O (unless given), the LSE (when returned) and
    the workspace, then one fa2_forward, or fa2_forward_with when the score variants
    pass tensors."""

    def __init__(self, plan, q, out, lse_shape, kv_from_q, variants, returns_lse, spans_):
        self.returns_lse = returns_lse
        self.spans = spans_
        self.o_like_q = q.is_contiguous()  # torch.empty_like(q) is then a contiguous O
        self.lse_shape = lse_shape  # None: no LSE unless one is given
        self.kv_from_q = kv_from_q  # no key row: Q's pointer stands in for K and V
        self.workspace_bytes = int(plan.workspace_bytes)
        self.variants = variants
        self.launch = Launch(plan.lib, plan, "fa2_forward_with" if variants else "fa2_forward",
                             q.device)
        if variants:
            from ._cdefs import ForwardArgs
            self.args = self.launch.args_template(ForwardArgs)

    def run(self, q, k, v, out, lse, alibi_slopes, sinks):
        torch = sys.modules["torch"]
        if out is None:
            out = empty_output(q, self.o_like_q)
        if lse is None and self.lse_shape is not None:
            lse = q.new_empty(self.lse_shape, dtype=torch.float32)
        n = self.workspace_bytes
        workspace = q.new_empty(n, dtype=torch.uint8) if n else None
        if self.kv_from_q:
            k = v = q
        if not self.variants:
            self.launch(q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), pointer(lse),
                        pointer(workspace), n)
        else:
            args = type(self.args).from_buffer_copy(self.args)
            args.q, args.k, args.v, args.o = (q.data_ptr(), k.data_ptr(), v.data_ptr(),
                                              out.data_ptr())
            args.lse, args.workspace, args.workspace_bytes = pointer(lse), pointer(workspace), n
            args.alibi_slopes, args.sinks = pointer(alibi_slopes), pointer(sinks)
            self.launch.with_args(args)
        return out, lse


class BackwardCall:
    """A checked dense backward: contiguous copies of the inputs whose strides repeat an
    address, dO in O's strides, the gradients (unless given) and the workspace, then one
    fa2_backward (fa2_backward_with when the score variants pass tensors)."""

    def __init__(self, plan, device, copies, copy_d_o, grad_layouts, grads_like, variants,
                 spans_):
        self.spans = spans_
        self.copies = copies          # (q, k, v): passed as .contiguous() copies
        self.copy_d_o = copy_d_o      # dO's strides differ from O's
        self.grad_layouts = grad_layouts  # (shape, strides) of dq, dk, dv
        self.grads_like = grads_like  # torch.empty_like of q, k, v gives those layouts
        self.variants = variants
        self.workspace_bytes = max(int(plan.bwd_workspace_bytes), 16)
        self.launch = Launch(plan.lib, plan, "fa2_backward_with" if variants
                             else "fa2_backward", device)
        if variants:
            from ._cdefs import BackwardArgs
            self.args = self.launch.args_template(BackwardArgs)

    def run(self, d_o, q, k, v, o, lse, dq, dk, dv, alibi_slopes, sinks):
        torch = sys.modules["torch"]
        cq, ck, cv = self.copies
        q, k, v = (q.contiguous() if cq else q, k.contiguous() if ck else k,
                   v.contiguous() if cv else v)
        if dq is None and dk is None and dv is None and self.grads_like:
            grads = (torch.empty_like(q), torch.empty_like(k), torch.empty_like(v))
        else:
            grads = tuple(g if g is not None else q.new_empty_strided(shape, strides)
                          for g, (shape, strides) in zip((dq, dk, dv), self.grad_layouts))
        if self.copy_d_o:
            d_o = o.new_empty_strided(o.shape, o.stride()).copy_(d_o)
        n = self.workspace_bytes
        workspace = q.new_empty(n, dtype=torch.uint8)
        dsinks = None if sinks is None else torch.empty_like(sinks)
        if not self.variants:
            self.launch(q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), d_o.data_ptr(),
                        lse.data_ptr(), grads[0].data_ptr(), grads[1].data_ptr(),
                        grads[2].data_ptr(), workspace.data_ptr(), n)
            return grads
        args = type(self.args).from_buffer_copy(self.args)
        args.q, args.k, args.v, args.o = q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr()
        args.d_o, args.lse = d_o.data_ptr(), lse.data_ptr()
        args.dq, args.dk, args.dv = (g.data_ptr() for g in grads)
        args.alibi_slopes, args.sinks, args.dsinks = (pointer(alibi_slopes), pointer(sinks),
                                                      pointer(dsinks))
        args.workspace, args.workspace_bytes = workspace.data_ptr(), n
        self.launch.with_args(args)
        return grads + (() if dsinks is None else (dsinks,))


_status_sinks = []  # every sink made (never freed: a captured graph may hold an address)


def status_sink(q, nbytes):
    """The address of a buffer of at least nbytes on q's device that packed forwards
    without key splits take as their workspace. Such a workspace receives only the
    per-sequence metadata verdicts (kernels/common/varlen_check.cuh), which no kernel of
    the call reads back and nothing else reads here (check_metadata allocates its own),
    so calls on any stream may share one: no allocation per call. 0 (allocate per call)
    while the stream is being captured into a CUDA graph: a sink is made outside."""
    torch = sys.modules["torch"]
    if q.is_cuda and torch.cuda.is_current_stream_capturing():
        return 0
    with _lock:
        for sink in reversed(_status_sinks):
            if sink.device == q.device and sink.numel() >= nbytes:
                return sink.data_ptr()
        sink = q.new_empty(max(nbytes, 4096), dtype=torch.uint8)
        _status_sinks.append(sink)
        return sink.data_ptr()


class PackedCall:
    """A checked packed or paged forward (flash_attn_varlen_func without autograd,
    flash_attn_with_kvcache without new rows): O (new in q's shape, or given), the LSE
    [heads_q, total_q] when returned, the workspace, then one fa2_forward_varlen
    (fa2_forward_with with the score variants' tensors). Offsets, a page table or key
    counts the call does not pass are the constant tensors cached at the first call
    (`defaults`: cu_seqlens_q, seqused_k, page_table)."""

    def __init__(self, plan, q, lse_shape, defaults, variants, spans_):
        self.spans = spans_
        self.o_like_q = q.is_contiguous()  # torch.empty_like(q) is then a contiguous O
        self.lse_shape = lse_shape
        self.defaults = defaults
        self.variants = variants
        self.workspace_bytes = int(plan.workspace_bytes)
        # without key splits the workspace holds only the metadata verdicts: a shared sink
        self.sink = status_sink(q, self.workspace_bytes) \
            if self.workspace_bytes and plan.splits <= 1 else 0
        self.launch = Launch(plan.lib, plan, "fa2_forward_with" if variants
                             else "fa2_forward_varlen", q.device)
        if variants:
            from ._cdefs import ForwardArgs
            self.args = self.launch.args_template(ForwardArgs)

    def run(self, q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, page_table, alibi_slopes,
            sinks, out=None):
        torch = sys.modules["torch"]
        cu_q, used, table = self.defaults
        cu_seqlens_q = cu_q if cu_seqlens_q is None else cu_seqlens_q
        seqused_k = used if seqused_k is None else seqused_k
        page_table = table if page_table is None else page_table
        if out is None:
            out = empty_output(q, self.o_like_q)
        lse = None if self.lse_shape is None else \
            q.new_empty(self.lse_shape, dtype=torch.float32)
        n = self.workspace_bytes
        scratch = q.new_empty(n, dtype=torch.uint8) if n and not self.sink else None
        workspace = self.sink or pointer(scratch)
        if not self.variants:
            self.launch(q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), pointer(lse),
                        cu_seqlens_q.data_ptr(), pointer(cu_seqlens_k), pointer(seqused_k),
                        pointer(page_table), workspace, n)
        else:
            args = type(self.args).from_buffer_copy(self.args)
            args.q, args.k, args.v, args.o = q.data_ptr(), k.data_ptr(), v.data_ptr(), \
                out.data_ptr()
            args.lse, args.cu_seqlens_q = pointer(lse), cu_seqlens_q.data_ptr()
            args.cu_seqlens_k, args.seqused_k = pointer(cu_seqlens_k), pointer(seqused_k)
            args.page_table = pointer(page_table)
            args.alibi_slopes, args.sinks = pointer(alibi_slopes), pointer(sinks)
            args.workspace, args.workspace_bytes = workspace, n
            self.launch.with_args(args)
        return out, lse
