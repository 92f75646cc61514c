#!/usr/bin/env python3
"""The ctypes binding (python/fa2.py) without a GPU: loading, struct layouts, and the
error paths through ctypes — each status arrives as its Fa2Error subclass carrying the
library's own message.

    FA2_LIBRARY=build/libfa2.so python3 tests/test_python_ffi.py

Registered with ctest as fa2_python_ffi (label cpu). Needs no torch and no GPU; on a
GPU machine it runs too (no kernel is launched: every call fails before a launch).
"""
import ctypes
import os
import re
import sys
import threading
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import fa2  # noqa: E402

# An H100/H200 described by hand: fa2_plan is pure host code.
H200 = dict(cc_major=9, cc_minor=0, sm_count=132, smem_per_block_optin=232448,
            smem_per_sm=233472)
ALIGNED = 0x10000  # fake, 16-byte aligned device pointers: checks come before launches


def device():
    return fa2.make_device_info(**H200)


def problem(**kw):
    shapes = dict(q_shape=(2, 256, 8, 64), k_shape=(2, 256, 2, 64))
    shapes.update(kw)
    return fa2.make_problem("bf16", **shapes)


class Loading(unittest.TestCase):
    def test_library_found_and_version(self):
        lib = fa2.library()
        self.assertTrue(os.path.exists(lib.path) or os.sep not in lib.path)
        v = fa2.version()
        self.assertEqual(v, 100 * (v // 100) + v % 100)
        self.assertRegex(lib.version_string(), r"^\d+\.\d+\.\d+$")

    def test_struct_sizes_match_library(self):
        p = problem()
        self.assertEqual(p.struct_size, ctypes.sizeof(fa2.Problem))
        plan = fa2.plan(p, device())
        self.assertEqual(plan.struct_size, ctypes.sizeof(fa2.PlanStruct))
        self.assertEqual(plan.problem.struct_size, ctypes.sizeof(fa2.Problem))

    def test_struct_fields_match_header(self):
        # Same names in the same order as include/fa2.h: equal sizes alone would not
        # catch a renamed field (the Problem mirror once ended in "bwd_arch").
        header = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "include",
                              "fa2.h")
        if not os.path.exists(header):
            self.skipTest("include/fa2.h not next to this test")
        with open(header) as f:
            text = re.sub(r"/\*.*?\*/", "", f.read(), flags=re.S)
        for mirror, c_name in ((fa2.Problem, "fa2_problem_t"), (fa2.DeviceInfo,
                               "fa2_device_info_t"), (fa2.PlanStruct, "fa2_plan_t")):
            body = re.search(r"typedef struct %s \{(.*?)\} %s;" % (c_name, c_name), text,
                             re.S).group(1)
            names = [n.strip() for decl in body.split(";") if decl.strip()
                     for n in decl.split(None, 1)[1].split(",")]
            self.assertEqual([n for n, _ in mirror._fields_], names, c_name)

    def test_explicit_path_and_missing_path(self):
        lib = fa2.load_library(fa2.library().path)
        self.assertIs(lib, fa2.library())
        with self.assertRaises(fa2.Fa2LibraryNotFound):
            fa2.load_library("/nonexistent/libfa2.so")


class Planning(unittest.TestCase):
    def test_plan_fields(self):
        plan = fa2.plan(problem(causal=True), device())
        self.assertEqual(plan.head_dim_bucket, 64)
        self.assertEqual(plan.problem.causal, 1)
        self.assertAlmostEqual(plan.problem.softmax_scale, 64 ** -0.5, places=6)
        self.assertEqual(plan.block_m % 16, 0)
        self.assertGreater(plan.bwd_workspace_bytes, 0)
        self.assertEqual(plan.bwd_supported, 1)

    def test_kernel_family(self):
        # 90 (Hopper wgmma) only on cc 9.0 (and only in an sm_90a build, so either value
        # there), forward and backward in both modes, the same family each time; 80
        # elsewhere.
        a100 = fa2.make_device_info(8, 0, 108, 166912, 167936)
        for det in (0, 1):
            p = problem()
            p.deterministic = det
            plan = fa2.plan(p, a100)
            self.assertEqual((plan.fwd_arch, plan.bwd_arch), (80, 80))
            plan = fa2.plan(p, device())
            self.assertIn(plan.fwd_arch, (80, 90))
            self.assertIn(plan.bwd_arch, (80, 90))
            if det == 0:
                default_bwd_arch = plan.bwd_arch
            else:
                self.assertEqual(plan.bwd_arch, default_bwd_arch)
            self.assertIn(f"fwd_arch={plan.fwd_arch}, bwd_arch={plan.bwd_arch}", repr(plan))
        self.assertNotIn("arch", repr(plan.problem))

    def test_strides_pass_through(self):
        # BHSD storage viewed as BSHD: seq stride d, head stride s*d.
        b, s, h, d = 2, 128, 4, 64
        st = (h * s * d, d, s * d, 1)
        p = fa2.make_problem("fp16", (b, s, h, d), (b, s, h, d), q_strides=st, k_strides=st,
                             v_strides=st[:3], o_strides=st)
        plan = fa2.plan(p, device())
        self.assertEqual((plan.problem.q_batch_stride, plan.problem.q_seq_stride,
                          plan.problem.q_head_stride), st[:3])
        self.assertEqual(plan.problem.v_head_stride, s * d)


class Errors(unittest.TestCase):
    def expect(self, cls, fragment, fn, *args, **kw):
        with self.assertRaises(cls) as cm:
            fn(*args, **kw)
        e = cm.exception
        self.assertIsInstance(e, fa2.Fa2Error)
        self.assertIn(fragment, e.message)
        self.assertIn(fragment, str(e))
        if e.status is not None:
            # The message is the library's own, still readable through fa2_last_error().
            self.assertEqual(e.message, fa2.library().last_error())
            self.assertEqual(e.status_name, fa2.library().status_string(e.status).split(":")[0])
        return e

    def test_bad_head_dim(self):
        e = self.expect(fa2.Fa2UnsupportedHeadDim, "head_dim=300 is not supported",
                        fa2.plan, problem(q_shape=(2, 256, 8, 300), k_shape=(2, 256, 2, 300)),
                        device())
        self.assertEqual(e.status, fa2.FA2_ERROR_UNSUPPORTED_HEAD_DIM)
        self.assertEqual(e.function, "fa2_plan")
        self.assertIn("[FA2_ERROR_UNSUPPORTED_HEAD_DIM]", str(e))

    def test_head_dim_not_multiple_of_8(self):
        self.expect(fa2.Fa2UnsupportedHeadDim, "head_dim=60",
                    fa2.plan, problem(q_shape=(1, 16, 1, 60), k_shape=(1, 16, 1, 60)), device())

    def test_heads_mismatch(self):
        self.expect(fa2.Fa2HeadsMismatch, "heads_q=6 is not a multiple of heads_kv=4",
                    fa2.plan, problem(q_shape=(1, 64, 6, 64), k_shape=(1, 64, 4, 64)), device())

    def test_mismatched_shapes_caught_by_binding(self):
        for kw, frag in ((dict(v_shape=(2, 100, 2, 64)), "v has"),
                         (dict(o_shape=(2, 256, 8, 128)), "o has"),
                         (dict(k_shape=(3, 256, 2, 64)), "batch"),
                         (dict(k_shape=(2, 256, 2, 128)), "head_dim"),
                         (dict(q_shape=(2, 256, 64)), "4 dims")):
            with self.subTest(**kw):
                e = self.expect(fa2.Fa2ShapeError, frag, problem, **kw)
                self.assertIsInstance(e, ValueError)
                self.assertIsNone(e.status)

    def test_invalid_sizes(self):
        self.expect(fa2.Fa2InvalidSize, "batch=0", fa2.plan,
                    problem(q_shape=(0, 16, 1, 64), k_shape=(0, 16, 1, 64)), device())
        self.expect(fa2.Fa2InvalidSize, "seqlen_q=0", fa2.plan,
                    problem(q_shape=(1, 0, 1, 64), k_shape=(1, 16, 1, 64)), device())

    def test_bad_stride(self):
        self.expect(fa2.Fa2BadStride, "q_seq_stride=12", fa2.plan,
                    problem(q_strides=(256 * 12, 12, 64, 1)), device())
        self.expect(fa2.Fa2ShapeError, "head_dim stride", problem,
                    q_strides=(256 * 8 * 64, 8 * 64, 64, 2))

    def test_bad_dtype_window_scale(self):
        p = problem()
        p.dtype = 7
        self.expect(fa2.Fa2UnsupportedDtype, "dtype=7", fa2.plan, p, device())
        with self.assertRaises(fa2.Fa2ShapeError):
            fa2.make_problem("float32", (1, 16, 1, 64), (1, 16, 1, 64))
        self.expect(fa2.Fa2BadWindow, "window_right=5 conflicts with causal=1", fa2.plan,
                    problem(causal=True, window=(-1, 5)), device())
        self.expect(fa2.Fa2BadScale, "softmax_scale=-1", fa2.plan,
                    problem(softmax_scale=-1.0), device())

    def test_old_device(self):
        old = fa2.make_device_info(7, 5, 40, 65536)
        self.expect(fa2.Fa2UnsupportedDevice, "compute capability 7.5", fa2.plan, problem(), old)

    def test_struct_size_not_set(self):
        p = problem()
        p.struct_size = 8
        self.expect(fa2.Fa2StructSize, "problem->struct_size=8", fa2.plan, p, device())

    def test_null_problem(self):
        self.expect(fa2.Fa2NullPointer, "problem is NULL", fa2.plan, None, device())

    def test_forward_null_pointers(self):
        plan = fa2.plan(problem(), device())
        self.expect(fa2.Fa2NullPointer, "q is NULL", plan.forward, None, ALIGNED, ALIGNED, ALIGNED)
        self.expect(fa2.Fa2NullPointer, "o is NULL", plan.forward, ALIGNED, ALIGNED, ALIGNED, 0)

    def test_backward_null_pointers_and_workspace(self):
        plan = fa2.plan(problem(), device())
        a = ALIGNED
        self.expect(fa2.Fa2NullPointer, "lse is NULL", plan.backward,
                    a, a, a, a, a, None, a, a, a, a)
        self.expect(fa2.Fa2NullPointer, "dv is NULL", plan.backward,
                    a, a, a, a, a, a, a, a, None, a)
        self.expect(fa2.Fa2Workspace, "workspace is NULL", plan.backward,
                    a, a, a, a, a, a, a, a, a, None)
        self.expect(fa2.Fa2Workspace, "workspace_bytes=16", plan.backward,
                    a, a, a, a, a, a, a, a, a, a, workspace_bytes=16)

    def test_misaligned(self):
        plan = fa2.plan(problem(), device())
        self.expect(fa2.Fa2Misaligned, "is not 16-byte aligned", plan.forward,
                    ALIGNED, ALIGNED + 2, ALIGNED, ALIGNED)

    def test_forged_plan(self):
        plan = fa2.plan(problem(), device())
        plan.raw.struct_size = 1
        self.expect(fa2.Fa2StructSize, "plan->struct_size=1", plan.forward,
                    ALIGNED, ALIGNED, ALIGNED, ALIGNED)

    def test_device_query_errors(self):
        # No device at all (CPU machine), or an index past the last device: NO_DEVICE.
        self.expect(fa2.Fa2NoDevice, "", fa2.device_info, 1 << 20)
        try:
            info = fa2.device_info(0)
        except fa2.Fa2NoDevice as e:
            self.assertTrue(e.message)  # the CUDA runtime's reason, e.g. no driver
        else:
            self.assertEqual(info.struct_size, ctypes.sizeof(fa2.DeviceInfo))

    def test_every_status_has_a_class(self):
        for code, name in fa2.STATUS_NAMES.items():
            if code == 0:
                continue
            e = fa2.exception_for(code, "m", "f")
            self.assertEqual(e.status, code)
            self.assertIsNot(type(e), fa2.Fa2Error)
            self.assertTrue(fa2.status_string(code).startswith(name + ":"), name)
        self.assertIs(type(fa2.exception_for(99, "m")), fa2.Fa2Error)

    def test_message_is_per_thread(self):
        try:
            fa2.plan(problem(q_shape=(2, 256, 8, 300), k_shape=(2, 256, 2, 300)), device())
        except fa2.Fa2UnsupportedHeadDim:
            pass
        seen = []
        t = threading.Thread(target=lambda: seen.append(fa2.library().last_error()))
        t.start()
        t.join()
        self.assertEqual(seen, [""])
        self.assertIn("head_dim=300", fa2.library().last_error())


if __name__ == "__main__":
    print(f"fa2.py on {fa2.library().path} (libfa2 {fa2.library().version_string()})")
    unittest.main(verbosity=2)
