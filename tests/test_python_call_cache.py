#!/usr/bin/env python3
"""The Python call cache (python/libfa2/_calls.py) on the CPU: torch tensors on the CPU
stand in for device tensors, the device checks accept them, plans are made for an H100
record, and the C launches are recorded instead of made. Checks that a repeated call is
served from the cache with the new call's pointers, that a call differing in one
property (dtype, an option, a storage shrunk under the same signature) takes the full
path and is refused as an uncached call is, and that attention's autograd Function and
the kvcache path reach the C entry points they should. The GPU twin:
cache_key_cases in tests/test_python_gpu.py.

Exit 0 passed, 1 failed, 77 skipped (no torch).

    FA2_LIBRARY=build/libfa2.so python3 tests/test_python_call_cache.py
"""
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

try:
    import torch
except ImportError:
    print("SKIP: torch is not importable (the call cache caches torch calls)")
    sys.exit(77)

import libfa2 as fa2  # noqa: E402
from libfa2 import _calls, _library, _tensors, flash_attn_interface, ops  # noqa: E402

H100 = fa2.make_device_info(9, 0, 132, 232448, 233472)
launched = []  # (C function, pointers or args) of every launch, in order


def accept_cpu_tensors():
    """The device checks accept CPU tensors (their other checks stay), plans are made
    for H100, and Launch records its calls on a CUDA device object."""
    def check_tensors(q, k, v):
        for n, t in (("q", q), ("k", k), ("v", v)):
            if t.dtype not in (torch.float16, torch.bfloat16):
                raise fa2.Fa2ShapeError(f"{n} has dtype {t.dtype}: fp16 or bf16 only")
            _tensors._check_storage(n, t)
    ops._check_tensors = flash_attn_interface._check_tensors = check_tensors
    _library._cached_device_info = lambda lib, index: H100
    check_offsets = ops._check_offsets
    flash_attn_interface._check_offsets = \
        lambda name, t, n, device: check_offsets(name, t, n, t.device)
    check_table = flash_attn_interface._check_table
    flash_attn_interface._check_table = \
        lambda table, batch, device: check_table(table, batch, table.device)
    flash_attn_interface._cached = lambda kind, n, m, device: torch.zeros(n, dtype=torch.int32)
    launch_init = _calls.Launch.__init__

    def init(self, lib, plan, function, device):
        launch_init(self, lib, plan, function, torch.device("cuda", 0))
    _calls.Launch.__init__ = init
    _calls.Launch.__call__ = lambda self, *p: launched.append((self.function, p))
    _calls.Launch.with_args = lambda self, args: launched.append((self.function, args))


class CallCache(unittest.TestCase):
    def setUp(self):
        _calls.clear()
        launched.clear()
        torch.manual_seed(0)
        self.q, self.k, self.v = (torch.randn(2, 64, 4, 64, dtype=torch.bfloat16)
                                  for _ in range(3))

    def test_repeat_is_a_hit_with_the_new_pointers(self):
        q, k, v = self.q, self.k, self.v
        fa2.forward(q, k, v)
        self.assertEqual(len(_calls._cache), 1)
        q2 = q.clone()  # the same signature, another tensor
        o = fa2.forward(q2, k, v)
        self.assertEqual(len(_calls._cache), 1)
        function, pointers = launched[-1]
        self.assertEqual(function, "fa2_forward")
        self.assertEqual(pointers[:4], (q2.data_ptr(), k.data_ptr(), v.data_ptr(),
                                        o.data_ptr()))

    def test_options_and_layouts_are_part_of_the_signature(self):
        q, k, v = self.q, self.k, self.v
        fa2.forward(q, k, v)
        fa2.forward(q, k, v, causal=True)
        fa2.forward(q, k, v, return_lse=True)
        fa2.forward(q.transpose(1, 2).contiguous().transpose(1, 2), k, v)
        self.assertEqual(len(_calls._cache), 4)

    def test_neighbours_are_refused_as_uncached_calls_are(self):
        q, k, v = self.q, self.k, self.v
        out = torch.zeros_like(q)
        fa2.forward(q, k, v, out=out)
        out.untyped_storage().resize_(100)  # the same signature, a storage too small
        with self.assertRaisesRegex(fa2.Fa2ShapeError, "which holds 100"):
            fa2.forward(q, k, v, out=out)
        with self.assertRaisesRegex(fa2.Fa2ShapeError, "fp16 or bf16 only"):
            fa2.forward(q.float(), k, v)
        with self.assertRaisesRegex(fa2.Fa2ShapeError, r"num_splits=1000 is out of range"):
            fa2.forward(q, k, v, num_splits=1000)
        self.assertEqual(len(launched), 1)  # the refused calls launched nothing

    def test_unhashable_or_tensor_options_are_not_cached(self):
        q, k, v = self.q, self.k, self.v
        fa2.forward(q, k, v, window=[8, 8])
        fa2.forward(q, k, v, softmax_scale=torch.tensor(0.125))
        self.assertEqual(len(_calls._cache), 0)
        self.assertEqual(len(launched), 2)

    def test_score_variant_tensors_go_through_the_args_struct(self):
        sinks = torch.randn(4)
        fa2.forward(self.q, self.k, self.v, sinks=sinks)
        fa2.forward(self.q, self.k, self.v, sinks=sinks)
        function, args = launched[-1]
        self.assertEqual(function, "fa2_forward_with")
        self.assertEqual(args.sinks, sinks.data_ptr())

    def test_backward_copies_what_repeats_addresses(self):
        q, k, v = self.q, self.k, self.v
        o, lse = fa2.forward(q, k, v, return_lse=True)
        d_o = q.transpose(1, 2).contiguous().transpose(1, 2)  # other strides than O's
        for _ in range(2):
            dq, dk, dv = fa2.backward(d_o, q, k[:1].expand(2, -1, -1, -1), v, o, lse)
        self.assertEqual(launched[-1][0], "fa2_backward")
        self.assertEqual(dk.stride(), (16384, 256, 64, 1))  # the contiguous copy's
        self.assertEqual(dq.stride(), q.stride())

    def test_attention_is_an_autograd_function(self):
        qg, kg, vg = (t.clone().requires_grad_() for t in (self.q, self.k, self.v))
        out = fa2.attention(qg, kg, vg)
        self.assertEqual(type(out.grad_fn).__name__, "AttentionBackward")
        out.backward(torch.ones_like(out))
        self.assertEqual(launched[-1][0], "fa2_backward")
        with torch.no_grad():
            self.assertIsNone(fa2.attention(qg, kg, vg).grad_fn)

    def test_flash_attn_func_routes(self):
        q, k, v = self.q, self.k, self.v
        with torch.no_grad():
            for _ in range(2):  # a plain layout: the cached forward call
                o = flash_attn_interface.flash_attn_func(q, k, v, causal=True)
            self.assertEqual(len(_calls._cache), 1)
            self.assertEqual(launched[-1], ("fa2_forward", launched[-1][1]))
            self.assertEqual(launched[-1][1][3], o.data_ptr())
            # head dim 60: no plan has it, so no cached call either; padded to 64
            q60, k60, v60 = (t[..., :60] for t in (q, k, v))
            for _ in range(2):
                o60 = flash_attn_interface.flash_attn_func(q60, k60, v60)
            self.assertEqual(tuple(o60.shape), (2, 64, 4, 60))
            self.assertEqual(o60.stride(2), 64)  # a slice of the padded O
        qg = q.clone().requires_grad_()
        out = flash_attn_interface.flash_attn_func(qg, k, v)
        self.assertEqual(type(out.grad_fn).__name__, "AttentionBackward")

    def test_packed_calls_without_splits_share_a_sink(self):
        q, k, v = (torch.randn(100, 4, 64, dtype=torch.bfloat16) for _ in range(3))
        cu = torch.tensor([0, 30, 100], dtype=torch.int32)
        fa2.flash_attn_varlen_func(q, k, v, cu, cu, 70, 70)
        fa2.flash_attn_varlen_func(q[:50], k, v, torch.tensor([0, 20, 50], dtype=torch.int32),
                                   cu, 30, 70)
        first, second = launched[-2][1], launched[-1][1]
        self.assertEqual(first[-1], 8)  # the plans' workspace: 4 bytes per sequence
        self.assertNotEqual(first[-2], 0)
        self.assertEqual(first[-2], second[-2])  # one sink, no allocation per call
        self.assertIn(first[-2], [t.data_ptr() for t in _calls._status_sinks])

    def test_kvcache_follows_new_lengths_and_tables(self):
        k_cache = torch.randn(9, 16, 2, 64, dtype=torch.bfloat16)
        v_cache = torch.randn_like(k_cache)
        q = torch.randn(4, 1, 8, 64, dtype=torch.bfloat16)
        for _ in range(2):
            table = torch.randperm(9)[:8].view(4, 2).to(torch.int32)
            lens = torch.randint(1, 33, (4,), dtype=torch.int32)
            out = fa2.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lens,
                                              block_table=table)
        self.assertEqual(len(_calls._cache), 1)
        function, pointers = launched[-1]
        self.assertEqual(function, "fa2_forward_varlen")
        self.assertEqual((pointers[3], pointers[7], pointers[8]),
                         (out.data_ptr(), lens.data_ptr(), table.data_ptr()))
        with self.assertRaisesRegex(fa2.Fa2ShapeError, "cache_seqlens"):
            fa2.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lens.long(),
                                        block_table=table)

    def test_varlen_without_autograd_is_cached(self):
        q, k, v = (torch.randn(100, 4, 64, dtype=torch.bfloat16) for _ in range(3))
        cu = torch.tensor([0, 30, 100], dtype=torch.int32)
        for _ in range(2):
            o, lse = fa2.flash_attn_varlen_func(q, k, v, cu, cu, 70, 70, return_lse=True)
        self.assertEqual(len(_calls._cache), 1)
        function, pointers = launched[-1]
        self.assertEqual(function, "fa2_forward_varlen")
        self.assertEqual(pointers[:7], (q.data_ptr(), k.data_ptr(), v.data_ptr(),
                                        o.data_ptr(), lse.data_ptr(), cu.data_ptr(),
                                        cu.data_ptr()))
        self.assertEqual(tuple(lse.shape), (4, 100))
        with self.assertRaisesRegex(fa2.Fa2ShapeError, "cu_seqlens_k"):
            fa2.flash_attn_varlen_func(q, k, v, cu, cu.long(), 70, 70)
        # autograd: the custom op (recorded here), not the cache
        custom_ops = flash_attn_interface._custom_ops

        class Ops:
            def varlen_fwd(self, q, *args):
                launched.append(("libfa2::varlen_fwd", ()))
                return torch.zeros_like(q), torch.zeros(q.shape[1], q.shape[0])
        flash_attn_interface._custom_ops = Ops
        try:
            fa2.flash_attn_varlen_func(q.clone().requires_grad_(), k, v, cu, cu, 70, 70)
        finally:
            flash_attn_interface._custom_ops = custom_ops
        self.assertEqual(launched[-1][0], "libfa2::varlen_fwd")
        self.assertEqual(len(_calls._cache), 1)


if __name__ == "__main__":
    accept_cpu_tensors()
    sys.exit(not unittest.main(exit=False, verbosity=1).result.wasSuccessful())
