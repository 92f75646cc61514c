#!/usr/bin/env python3
"""The ctypes binding (python/libfa2) without a GPU: loading, struct layouts (sizes and
field offsets against the C compiler's), and the error paths through ctypes — each
status arrives as its Fa2Error subclass carrying the library's own message — plus the
binding's own checks of tensors and layouts, made before any C call.

    FA2_LIBRARY=build/libfa2.so python3 tests/test_python_ffi.py

Registered with ctest as fa2_python_ffi (label cpu). Needs no torch and no GPU; on a
GPU machine it runs too (no kernel is launched: every call fails before a launch).
Where torch is importable, the tensor checks also run on CPU tensors (no CUDA used);
without torch those cases skip. The layout test compiles a small C program with $CC
(default cc) and skips without one.
"""
import ctypes
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
HEADER = os.path.join(REPO, "include", "fa2.h")
# The source tree's package, unless the test is to run on an installed one (pip install).
if not os.environ.get("FA2_TEST_INSTALLED_PACKAGE"):
    sys.path.insert(0, os.path.join(REPO, "python"))
import libfa2 as fa2  # noqa: E402
from libfa2 import _tensors  # noqa: E402
from libfa2.flash_attn_interface import flash_window  # noqa: E402

try:
    import torch
except ImportError:
    torch = None

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


def header_text(test):
    """include/fa2.h without its comments (skips the test when the header is absent)."""
    if not os.path.exists(HEADER):
        test.skipTest("include/fa2.h not next to this test")
    with open(HEADER) as f:
        return re.sub(r"/\*.*?\*/", "", f.read(), flags=re.S)


class Loading(unittest.TestCase):
    def test_library_found_and_version(self):
        lib = fa2.library()
        self.assertTrue(os.path.exists(lib.path) or os.sep not in lib.path)
        v = fa2.version()
        self.assertEqual(v, 100 * (v // 100) + v % 100)
        self.assertRegex(lib.version_string(), r"^\d+\.\d+\.\d+$")
        major, minor, patch = (int(x) for x in lib.version_string().split("."))
        self.assertEqual(v, major * 10000 + minor * 100 + patch)
        # the header is the one source of the version; the library must agree with it
        with open(os.path.join(os.path.dirname(__file__), "..", "include", "fa2.h")) as f:
            header = f.read()
        parts = [int(re.search(rf"#define FA2_VERSION_{p} (\d+)", header).group(1))
                 for p in ("MAJOR", "MINOR", "PATCH")]
        self.assertEqual([major, minor, patch], parts)
        self.assertEqual(fa2.__version__, lib.version_string())  # package = library
        info = fa2.build_info()
        self.assertIn("libfa2 " + lib.version_string(), info)
        self.assertRegex(info, r"CUDA runtime \d+\.\d+; GPU code ")

    def test_struct_sizes_match_library(self):
        p = problem()
        self.assertEqual(p.struct_size, ctypes.sizeof(fa2.Problem))
        plan = fa2.plan(p, device())
        self.assertEqual(plan.struct_size, ctypes.sizeof(fa2.PlanStruct))
        self.assertEqual(plan.problem.struct_size, ctypes.sizeof(fa2.Problem))

    def test_struct_fields_match_header(self):
        # Same names in the same order as include/fa2.h: equal sizes alone would not
        # catch a renamed field (the Problem mirror once ended in "bwd_arch").
        text = header_text(self)
        for c_name, mirror in fa2.STRUCT_MIRRORS.items():
            body = re.search(r"typedef struct %s \{(.*?)\} %s;" % (c_name, c_name), text,
                             re.S).group(1)
            # "type name, name" or "const type *name": the names after the type
            names = [n.strip().lstrip("*").strip() for decl in body.split(";") if decl.strip()
                     for n in re.sub(r"^\s*(?:const\s+)?\w+\s*", "", decl).split(",")]
            self.assertEqual([n for n, _ in mirror._fields_], names, c_name)

    def test_every_mirror_is_listed(self):
        # Every struct of the header has a mirror in STRUCT_MIRRORS, every mirror the
        # module declares is listed there (so the layout test covers it), and no other
        # Python file of the tree declares one of its own (bench/ once had a stale,
        # shorter plan that fa2_plan wrote past).
        c_structs = re.findall(r"typedef struct (\w+) \{", header_text(self))
        self.assertEqual(sorted(c_structs), sorted(fa2.STRUCT_MIRRORS))
        declared = {v for v in vars(fa2).values()
                    if isinstance(v, type) and issubclass(v, (ctypes.Structure, ctypes.Union))}
        self.assertEqual(declared, set(fa2.STRUCT_MIRRORS.values()))
        # the one file that mirrors the C structs (_cdefs.py), installed or in the tree
        own = {os.path.realpath(os.path.join(os.path.dirname(fa2.__file__), "_cdefs.py")),
               os.path.realpath(os.path.join(REPO, "python", "libfa2", "_cdefs.py"))}
        for path in glob.glob(os.path.join(REPO, "**", "*.py"), recursive=True):
            if os.path.realpath(path) in own or os.sep + "build" in path[len(REPO):]:
                continue
            with open(path, errors="replace") as f:
                found = re.findall(r"class \w+\((?:ctypes\.)?(?:Structure|Union)\)", f.read())
            self.assertEqual(found, [], f"{path} declares its own ctypes struct: "
                             "import python/libfa2 instead")

    def test_struct_layout_matches_c(self):
        # sizeof and every field's offset and size, nested structs included, as the C
        # compiler lays out include/fa2.h.
        cc = shutil.which(os.environ.get("CC") or "cc")
        if not cc or not os.path.exists(HEADER):
            self.skipTest("no C compiler or no include/fa2.h")
        lines, expected = [], {}
        for c_name, mirror in fa2.STRUCT_MIRRORS.items():
            lines.append(f'printf("{c_name} sizeof %zu %zu\\n", sizeof({c_name}), '
                         f'_Alignof({c_name}));')
            expected[f"{c_name} sizeof"] = (ctypes.sizeof(mirror), ctypes.alignment(mirror))
            for field, _ in mirror._fields_:
                lines.append(f'printf("{c_name} {field} %zu %zu\\n", offsetof({c_name}, '
                             f'{field}), sizeof((({c_name} *)0)->{field}));')
                desc = getattr(mirror, field)
                expected[f"{c_name} {field}"] = (desc.offset, desc.size)
        src = ("#include <stddef.h>\n#include <stdio.h>\n#include \"fa2.h\"\n"
               "int main(void) {\n" + "\n".join(lines) + "\nreturn 0;\n}\n")
        env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
        with tempfile.TemporaryDirectory() as tmp:
            with open(os.path.join(tmp, "layout.c"), "w") as f:
                f.write(src)
            exe = os.path.join(tmp, "layout")
            subprocess.run([cc, "-std=c11", "-I", os.path.dirname(HEADER), "-o", exe,
                            os.path.join(tmp, "layout.c")], check=True, env=env)
            out = subprocess.run([exe], check=True, env=env, capture_output=True,
                                 text=True).stdout
        got = {}
        for line in out.splitlines():
            c_name, field, a, b = line.split()
            got[f"{c_name} {field}"] = (int(a), int(b))
        self.assertEqual(got, expected)

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

    def test_describe(self):
        # The C line, whole (its length queried first); a forged plan raises
        a100 = fa2.make_device_info(8, 0, 108, 166912, 167936)
        text = fa2.plan(problem(), a100).describe()
        self.assertTrue(text.startswith("forward: the mma.sync kernel"), text)
        self.assertIn("backward: ", text)
        self.assertTrue(text.endswith("."), text)
        plan = fa2.plan(problem(), device())
        plan.raw.block_m += 16
        with self.assertRaises(fa2.Fa2Error) as cm:
            plan.describe()
        self.assertIn("fa2_plan_describe", str(cm.exception))

    def test_plan_records_its_device(self):
        plan = fa2.plan(problem(), device())
        self.assertEqual(plan.device.struct_size, ctypes.sizeof(fa2.DeviceInfo))
        for field, value in H200.items():
            self.assertEqual(getattr(plan.device, field), value, field)
        self.assertNotIn("device", repr(plan))  # nested structs keep their own repr

    def test_seqlen_k_0_plans(self):
        # Empty K/V are accepted (O = 0, LSE = -inf); torch's strides for them are fine.
        plan = fa2.plan(problem(k_shape=(2, 0, 2, 64)), device())
        self.assertEqual(plan.problem.seqlen_k, 0)

    def test_repeated_addresses_in_o_refused(self):
        # O with a zero batch stride: two batches would write one address.
        st = (0, 8 * 64, 64, 1)
        self.assertTrue(fa2.repeats_addresses((2, 256, 8, 64), st))
        with self.assertRaises(fa2.Fa2Overlap) as cm:
            fa2.plan(problem(o_strides=st), device())
        self.assertEqual(cm.exception.function, "fa2_plan")

    def test_broadcast_inputs_have_no_backward(self):
        # K broadcast over the batch (stride 0): the forward runs, the backward cannot
        # write dK with K's strides, and the plan says so.
        plan = fa2.plan(problem(k_strides=(0, 2 * 64, 64, 1)), device())
        self.assertEqual((plan.bwd_supported, plan.bwd_status), (0, fa2.FA2_ERROR_OVERLAP))
        plan = fa2.plan(problem(), device())
        self.assertEqual((plan.bwd_supported, plan.bwd_status), (1, 0))

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

    def test_status_codes_and_limits_match_header(self):
        text = header_text(self)
        codes = {int(v): n for n, v in re.findall(r"\b(FA2_(?:SUCCESS|ERROR_\w+)) = (\d+)", text)}
        self.assertEqual(codes, fa2.STATUS_NAMES)
        for code, name in codes.items():
            self.assertEqual(getattr(fa2, name), code)
        checks = {int(v): n for n, v in re.findall(r"\b(FA2_VARLEN_\w+) = (\d+)", text)}
        self.assertEqual(checks, fa2.VARLEN_CHECK_NAMES)
        for code, name in checks.items():
            self.assertEqual(getattr(fa2, name), code)
        limits = dict(re.findall(r"#define FA2_((?:MAX|MIN)_\w+) ([0-9.e+-]+)f?", text))
        self.assertEqual(set(limits), {"MAX_SEQLEN", "MAX_WINDOW", "MAX_SOFTMAX_SCALE",
                                       "MAX_COMBINE_PARTS", "MAX_SPLITS", "MAX_SOFTCAP",
                                       "MIN_SOFTCAP"})
        for name, value in limits.items():
            self.assertEqual(getattr(fa2, name), float(value), name)

    def test_new_status_classes(self):
        for cls, code in ((fa2.Fa2Overlap, 17), (fa2.Fa2BadPlan, 18),
                          (fa2.Fa2DeviceMismatch, 19), (fa2.Fa2Reserved, 20),
                          (fa2.Fa2Unsupported, 21), (fa2.Fa2BadMetadata, 22)):
            e = fa2.exception_for(code, "m", "fa2_forward")
            self.assertIs(type(e), cls)
            self.assertIn(f"[{fa2.STATUS_NAMES[code]}]", str(e))

    def test_packed_batch(self):
        """make_varlen_problem / Plan.forward_varlen: the plan, and the dense and packed
        entry points refusing each other's plans before any CUDA call."""
        packed = fa2.make_varlen_problem("bf16", 1000, 1200, 8, 2, 64, batch=4,
                                         max_seqlen_q=512, max_seqlen_k=600, causal=True)
        self.assertEqual((packed.total_q, packed.total_k, packed.q_batch_stride,
                          packed.q_seq_stride, packed.k_seq_stride), (1000, 1200, 0, 512, 128))
        plan = fa2.plan(packed, device())
        self.assertEqual(plan.bwd_supported, 1)
        a = ALIGNED
        self.expect(fa2.Fa2Unsupported, "call fa2_forward_varlen", plan.forward, a, a, a, a)
        self.expect(fa2.Fa2NullPointer, "cu_seqlens_k is NULL", plan.forward_varlen,
                    a, a, a, a, a, None)
        self.expect(fa2.Fa2Misaligned, "cu_seqlens_q", plan.forward_varlen,
                    a, a, a, a, a + 2, a)
        self.expect(fa2.Fa2Unsupported, "call fa2_backward_varlen", plan.backward,
                    a, a, a, a, a, a, a, a, a, a)
        dense = fa2.plan(problem(), device())
        self.expect(fa2.Fa2Unsupported, "call fa2_forward", dense.forward_varlen,
                    a, a, a, a, a, a)
        bad = fa2.make_varlen_problem("bf16", 100, 1200, 8, 2, 64, batch=4,
                                      max_seqlen_q=512, max_seqlen_k=600)
        self.expect(fa2.Fa2InvalidSize, "total_q=100", fa2.plan, bad, device())

    def test_paged_problem(self):
        paged = fa2.make_varlen_problem("bf16", 64, 0, 8, 2, 128, batch=4, max_seqlen_q=16,
                                        max_seqlen_k=300, pages=(16, 100, 19, 16 * 256,
                                                                 16 * 256))
        self.assertEqual((paged.page_size, paged.num_pages, paged.pages_per_seq,
                          paged.k_batch_stride), (16, 100, 19, 4096))
        plan = fa2.plan(paged, device())
        self.assertEqual(plan.bwd_status, 21)
        a = ALIGNED
        self.expect(fa2.Fa2NullPointer, "page_table is NULL", plan.forward_varlen,
                    a, a, a, a, a, None, None, a)
        self.expect(fa2.Fa2Unsupported, "has no backward", plan.backward,
                    a, a, a, a, a, a, a, a, a, a)
        # flash-attn's arguments libfa2 does not implement, refused by name before any
        # tensor is looked at
        for name in ("rotary_cos", "rotary_sin", "cache_leftpad"):
            with self.assertRaises(fa2.Fa2ShapeError) as cm:
                fa2.flash_attn_with_kvcache(None, None, None, **{name: object()})
            self.assertIn(f"{name} is not supported", str(cm.exception))

    def test_call_args(self):
        """fa2_forward_with / fa2_backward_with: the checks of their own (the rest is
        fa2_forward's and fa2_backward's): args NULL or not from the init call, a score
        variant's tensor for a plan without it, a packed plan's metadata for a dense one;
        and the score variants' problem fields, refused by fa2_plan in this version."""
        lib = fa2.library()
        c = lib.cdll
        plan = fa2.plan(problem(), device())
        fwd, bwd = fa2.ForwardArgs(), fa2.BackwardArgs()
        c.fa2_forward_args_init(ctypes.byref(fwd))
        c.fa2_backward_args_init(ctypes.byref(bwd))
        self.assertEqual(fwd.struct_size, ctypes.sizeof(fa2.ForwardArgs))
        self.assertEqual(bwd.struct_size, ctypes.sizeof(fa2.BackwardArgs))

        def status(run, args, plan=plan):
            return run(ctypes.byref(plan.raw), args), lib.last_error()
        self.assertEqual(status(c.fa2_forward_with, None)[0], fa2.FA2_ERROR_NULL_POINTER)
        bad = fa2.ForwardArgs()
        code, msg = status(c.fa2_forward_with, ctypes.byref(bad))
        self.assertEqual(code, fa2.FA2_ERROR_STRUCT_SIZE)
        self.assertIn("fa2_forward_args_init", msg)
        fwd.q = fwd.k = fwd.v = fwd.o = ALIGNED
        fwd.alibi_slopes = ALIGNED
        code, msg = status(c.fa2_forward_with, ctypes.byref(fwd))
        self.assertEqual(code, fa2.FA2_ERROR_UNSUPPORTED)
        self.assertIn("problem.alibi=0", msg)
        fwd.alibi_slopes, fwd.cu_seqlens_q = None, ALIGNED
        code, msg = status(c.fa2_forward_with, ctypes.byref(fwd))
        self.assertEqual(code, fa2.FA2_ERROR_UNSUPPORTED)
        self.assertIn("dense plan", msg)
        bwd.q = bwd.k = bwd.v = bwd.o = bwd.d_o = bwd.lse = ALIGNED
        bwd.dq = bwd.dk = bwd.dv = ALIGNED
        bwd.dsinks = ALIGNED
        code, msg = status(c.fa2_backward_with, ctypes.byref(bwd))
        self.assertEqual(code, fa2.FA2_ERROR_UNSUPPORTED)
        self.assertIn("dsinks is given but the plan has no sinks", msg)
        bwd.dsinks, bwd.alibi_slopes = None, ALIGNED
        code, msg = status(c.fa2_backward_with, ctypes.byref(bwd))
        self.assertEqual(code, fa2.FA2_ERROR_UNSUPPORTED)
        self.assertIn("alibi_slopes is given but the plan has no ALiBi", msg)
        bwd.alibi_slopes = None
        for field, value, cls, fragment in (
                ("softcap", float("nan"), fa2.Fa2BadScale, "softcap=nan"),
                ("softcap", -1.0, fa2.Fa2BadScale, "softcap=-1"),
                ("sinks", 2, fa2.Fa2InvalidSize, "sinks=2"),
                ("reserved3", 1, fa2.Fa2Reserved, "reserved3=1")):
            p = problem()
            setattr(p, field, value)
            with self.assertRaises(cls) as cm:
                fa2.plan(p, device())
            self.assertIn(fragment, str(cm.exception), field)
        # Prefill and decode plans take them (forward only), and their calls need the
        # tensors exactly when the plan has the variant.
        for shape in ((2, 256, 8, 64), (2, 1, 8, 64)):
            scored = problem(q_shape=shape)
            scored.softcap, scored.alibi, scored.sinks = 30.0, 1, 1
            plan = fa2.plan(scored, device())
            self.assertEqual((plan.bwd_supported, plan.bwd_status), (1, fa2.FA2_SUCCESS))
        self.assertGreaterEqual(plan.splits, 1)
        a = ALIGNED
        self.expect(fa2.Fa2Unsupported, "fa2_forward_with", plan.forward, a, a, a, a)
        c.fa2_forward_args_init(ctypes.byref(fwd))
        fwd.q = fwd.k = fwd.v = fwd.o = a
        for slopes, sinks, want, fragment in (
                (None, a, fa2.FA2_ERROR_NULL_POINTER, "alibi_slopes is NULL"),
                (a, None, fa2.FA2_ERROR_NULL_POINTER, "sinks is NULL"),
                (a, a + 2, fa2.FA2_ERROR_MISALIGNED, "sinks")):
            fwd.alibi_slopes, fwd.sinks = slopes, sinks
            code, msg = status(c.fa2_forward_with, ctypes.byref(fwd), plan)
            self.assertEqual(code, want, fragment)
            self.assertIn(fragment, msg)

        # The backward of such a plan runs through fa2_backward_with only, which needs
        # the slopes, the sinks and the sinks' gradient, packed batches too.
        packed = fa2.make_varlen_problem(fa2.DTYPE_BF16, 100, 100, 8, 8, 64, batch=2,
                                         max_seqlen_q=60, max_seqlen_k=60)
        packed.sinks = 1
        self.assertEqual(fa2.plan(packed, device()).bwd_status, fa2.FA2_SUCCESS)
        self.expect(fa2.Fa2Unsupported, "fa2_backward_with", plan.backward,
                    a, a, a, a, a, a, a, a, a, a)
        c.fa2_backward_args_init(ctypes.byref(bwd))
        bwd.q = bwd.k = bwd.v = bwd.o = bwd.d_o = bwd.lse = bwd.dq = bwd.dk = bwd.dv = a
        for slopes, sinks, dsinks, want, fragment in (
                (None, a, a, fa2.FA2_ERROR_NULL_POINTER, "alibi_slopes is NULL"),
                (a, None, a, fa2.FA2_ERROR_NULL_POINTER, "sinks is NULL"),
                (a, a, None, fa2.FA2_ERROR_NULL_POINTER, "dsinks is NULL"),
                (a, a, a + 2, fa2.FA2_ERROR_MISALIGNED, "dsinks")):
            bwd.alibi_slopes, bwd.sinks, bwd.dsinks = slopes, sinks, dsinks
            code, msg = status(c.fa2_backward_with, ctypes.byref(bwd), plan)
            self.assertEqual(code, want, fragment)
            self.assertIn(fragment, msg)

    def test_num_splits(self):
        # flash-attn's meaning: 0 = the planner decides (up to MAX_SPLITS), n = at most n
        self.assertEqual(_tensors._max_splits(0), fa2.MAX_SPLITS)
        self.assertEqual(_tensors._max_splits(1), 1)
        self.assertEqual(_tensors._max_splits(fa2.MAX_SPLITS), fa2.MAX_SPLITS)
        for bad in (-1, fa2.MAX_SPLITS + 1):
            with self.assertRaises(fa2.Fa2ShapeError) as cm:
                _tensors._max_splits(bad)
            self.assertIn(f"num_splits={bad}", str(cm.exception))

    def test_varlen_refusals_before_any_tensor(self):
        for kw, fragment in ((dict(dropout_p=0.1), "dropout_p=0.1"),):
            with self.assertRaises(fa2.Fa2ShapeError) as cm:
                fa2.flash_attn_varlen_func(None, None, None, None, None, 1, 1, **kw)
            self.assertIn(fragment, str(cm.exception))
            self.assertIn("flash_attn_varlen_func", str(cm.exception))

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


class FlashAttnShaped(unittest.TestCase):
    """flash_attn_func refuses what libfa2 does not do before touching any tensor (None
    stands in for the tensors: nothing may look at them); softcap and ALiBi it does."""

    def test_refusals_name_the_argument(self):
        with self.assertRaises(fa2.Fa2ShapeError) as cm:
            fa2.flash_attn_func(None, None, None, dropout_p=0.1)
        self.assertIn("dropout_p", str(cm.exception))
        # dropout_p as the fourth positional argument, as flash_attn_func has it
        with self.assertRaises(fa2.Fa2ShapeError):
            fa2.flash_attn_func(None, None, None, 0.5)

    def test_flash_attn_window_rules(self):
        """flash-attn's windows as the C API's fields: (causal, left, right). An edge at
        or past seqlen_k is unlimited; causal sets the right edge to 0; a right edge of 0
        with no left edge is the C API's causal."""
        for window, causal, seqlen_k, want in (
                ((-1, -1), False, 100, (False, -1, -1)),
                ((-1, -1), True, 100, (True, -1, -1)),
                ((10, 10), True, 100, (False, 10, 0)),
                ((10, 10), False, 100, (False, 10, 10)),
                ((100, 5), False, 100, (False, -1, 5)),
                ((99, 100), False, 100, (False, 99, -1)),
                ((200, 200), True, 100, (True, -1, -1)),
                ((-1, 0), False, 100, (True, -1, -1)),
                ((0, 0), False, 100, (False, 0, 0))):
            self.assertEqual(flash_window(window, causal, seqlen_k), want, (window, causal))

    def test_flash_attn_names_and_order(self):
        """libfa2.flash_attn_interface has flash-attn 2.8's public functions with its
        positional parameters in its order (libfa2's extras are keyword-only)."""
        import inspect
        import libfa2.flash_attn_interface as fai
        common = ["dropout_p", "softmax_scale", "causal", "window_size", "softcap",
                  "alibi_slopes", "deterministic", "return_attn_probs"]
        varlen = ["cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q", "max_seqlen_k"]
        want = {
            "flash_attn_func": ["q", "k", "v"] + common,
            "flash_attn_qkvpacked_func": ["qkv"] + common,
            "flash_attn_kvpacked_func": ["q", "kv"] + common,
            "flash_attn_varlen_func": ["q", "k", "v"] + varlen + common + ["block_table"],
            "flash_attn_varlen_qkvpacked_func": ["qkv", "cu_seqlens", "max_seqlen"] + common,
            "flash_attn_varlen_kvpacked_func": ["q", "kv"] + varlen + common,
            "flash_attn_with_kvcache": [
                "q", "k_cache", "v_cache", "k", "v", "rotary_cos", "rotary_sin",
                "cache_seqlens", "cache_batch_idx", "cache_leftpad", "block_table",
                "softmax_scale", "causal", "window_size", "softcap", "rotary_interleaved",
                "alibi_slopes", "num_splits", "return_softmax_lse"],
        }
        for name, params in want.items():
            sig = inspect.signature(getattr(fai, name))
            positional = [p.name for p in sig.parameters.values()
                          if p.kind == p.POSITIONAL_OR_KEYWORD]
            self.assertEqual(positional, params, name)
            self.assertIs(getattr(fa2, name), getattr(fai, name))

    def test_attention_options_are_keyword_only(self):
        # attention(q, k, v, 0.0) would otherwise read flash_attn_func's dropout_p as causal
        with self.assertRaises(TypeError):
            fa2.attention(None, None, None, 0.0)


class Layouts(unittest.TestCase):
    """repeats_addresses: which strided layouts give two elements one address (plain
    Python on shapes and strides, what the tensor checks are made of)."""

    def test_common_layouts(self):
        b, s_, h, d = 2, 128, 8, 64
        distinct = {
            "bshd": (s_ * h * d, h * d, d, 1),
            "bhsd": (h * s_ * d, d, s_ * d, 1),
            "q of packed qkv": (s_ * 3 * h * d, 3 * h * d, d, 1),
            "padded rows": (s_ * h * 72, h * 72, 72, 1),
        }
        for name, st in distinct.items():
            self.assertFalse(fa2.repeats_addresses((b, s_, h, d), st), name)
        repeating = {
            "batch expanded": (0, h * d, d, 1),
            "seq expanded": (s_ * h * d, 0, d, 1),
            "heads expanded": (s_ * d, d, 0, 1),
            "heads overlapping rows": (s_ * h * d, h * d, 8, 1),
            "seq and head strides equal": (s_ * h * d, d, d, 1),
        }
        for name, st in repeating.items():
            self.assertTrue(fa2.repeats_addresses((b, s_, h, d), st), name)
        # Size-1 dims never repeat, whatever their stride; no elements, no addresses.
        self.assertFalse(fa2.repeats_addresses((1, s_, 1, d), (0, d, 0, 1)))
        self.assertFalse(fa2.repeats_addresses((b, 0, h, d), (0, 0, 0, 1)))

    def test_never_misses_a_repeat(self):
        # Against enumeration of every address, on small random layouts.
        import itertools
        import random
        rng = random.Random(0)
        for _ in range(3000):
            shape = [rng.randint(0, 4) for _ in range(rng.randint(1, 4))]
            strides = [rng.randint(0, 12) for _ in shape]
            offsets = [sum(i * st for i, st in zip(index, strides))
                       for index in itertools.product(*(range(n) for n in shape))]
            if len(set(offsets)) != len(offsets):
                self.assertTrue(fa2.repeats_addresses(shape, strides), (shape, strides))
            self.assertEqual(_tensors._extent(shape, strides), max(offsets) + 1 if offsets else 0)


class NoLibrary:
    """A lib= that fails the test on any use: the call must be refused before C."""

    def __getattr__(self, name):
        raise AssertionError(f"the library was used ({name}) before the checks refused")


@unittest.skipIf(torch is None, "torch is not importable")
class TensorChecks(unittest.TestCase):
    """The binding's checks of out=, lse, o, d_o and gradient tensors, on CPU tensors
    (the device they must match is q's, here the CPU): what forward() and backward()
    run before any C call. Needs torch, not CUDA."""

    shape = (2, 16, 4, 64)

    def setUp(self):
        self.q = torch.zeros(self.shape, dtype=torch.bfloat16)
        self.cpu = self.q.device

    def refused(self, cls, fragment, fn, *args):
        with self.assertRaises(cls) as cm:
            fn(*args)
        self.assertIn(fragment, str(cm.exception))
        return cm.exception

    def check_out(self, t):
        return _tensors._check_output("out", t, self.shape, torch.bfloat16, self.cpu)

    def test_out_refused(self):
        b, s_, h, d = self.shape
        base = torch.full((b * s_ * 260,), 7, dtype=torch.bfloat16)
        small = torch.full(self.shape, 7, dtype=torch.bfloat16)
        small.untyped_storage().resize_(100)  # a view over a storage shrunk under it
        cases = [
            # the reported bug: a uint8 out of the same byte count was written past
            (fa2.Fa2ShapeError, "out has dtype torch.uint8",
             torch.full((b, s_, h, 2 * d), 7, dtype=torch.uint8)),
            (fa2.Fa2ShapeError, "out has shape (2, 16, 4, 72)",
             torch.full((b, s_, h, 72), 7, dtype=torch.bfloat16)),
            (fa2.Fa2ShapeError, "out is on meta",
             torch.empty(self.shape, dtype=torch.bfloat16, device="meta")),
            (fa2.Fa2ShapeError, "out: the head_dim stride is 2",
             torch.full((b, s_, h, 2 * d), 7, dtype=torch.bfloat16)[..., ::2]),
            (fa2.Fa2BadStride, "out: strides (4160, 260, 64, 1)",
             base.as_strided(self.shape, (s_ * 260, 260, d, 1))),
            (fa2.Fa2Overlap, "out: strides (0, 256, 64, 1)",
             torch.full((1, s_, h, d), 7, dtype=torch.bfloat16).expand(self.shape)),
            (fa2.Fa2Overlap, "one address per element",
             base.as_strided(self.shape, (s_ * h * d, h * d, 8, 1))),
            (fa2.Fa2ShapeError, "out: its strides reach 16384 bytes into its storage, "
             "which holds 100", small),
            (fa2.Fa2ShapeError, "out is a list", [0.0]),
        ]
        for cls, fragment, t in cases:
            with self.subTest(fragment):
                self.refused(cls, fragment, self.check_out, t)
        self.assertTrue(bool((base == 7).all()))
        self.assertEqual(small.untyped_storage().nbytes(), 100)

    def test_out_accepted(self):
        b, s_, h, d = self.shape
        self.assertIsNone(self.check_out(torch.empty(self.shape, dtype=torch.bfloat16)))
        bhsd = torch.empty(b, h, s_, d, dtype=torch.bfloat16).transpose(1, 2)
        self.assertIsNone(self.check_out(bhsd))

    def test_lse_refused(self):
        b, s_, h, _ = self.shape
        cases = [
            (fa2.Fa2ShapeError, "lse is None", None),
            (fa2.Fa2ShapeError, "lse has dtype torch.float16",
             torch.zeros(b, h, s_, dtype=torch.float16)),
            (fa2.Fa2ShapeError, "lse has shape (2, 16, 4)", torch.zeros(b, s_, h)),
            (fa2.Fa2ShapeError, "lse has strides (64, 1, 4)",
             torch.zeros(b, s_, h).transpose(1, 2)),
            (fa2.Fa2ShapeError, "lse is on meta", torch.zeros(b, h, s_, device="meta")),
        ]
        for cls, fragment, t in cases:
            with self.subTest(fragment):
                self.refused(cls, fragment, _tensors._check_lse, "lse", t, self.q)
        self.assertIsNone(_tensors._check_lse("lse", torch.zeros(b, h, s_), self.q))

    def test_backward_inputs_refused(self):
        # o and d_o: q's shape, dtype and device (checked by _check_like in backward()).
        for name, t, fragment in (
                ("o", torch.zeros(self.shape, dtype=torch.float16), "o has dtype"),
                ("d_o", torch.zeros(self.shape, dtype=torch.float32), "d_o has dtype"),
                ("o", torch.zeros(self.shape, dtype=torch.bfloat16, device="meta"),
                 "o is on meta"),
                ("d_o", torch.zeros(2, 16, 4, 128, dtype=torch.bfloat16), "d_o has shape")):
            with self.subTest(fragment):
                self.refused(fa2.Fa2ShapeError, fragment, _tensors._check_like, name, t,
                             self.shape, torch.bfloat16, self.cpu)

    def test_gradient_checks(self):
        b, s_, h, d = self.shape
        k = torch.zeros(self.shape, dtype=torch.bfloat16)
        k_broadcast = torch.zeros(1, s_, h, d, dtype=torch.bfloat16).expand(self.shape)
        cases = [
            # a given gradient that repeats addresses would race: refused as an overlap
            (fa2.Fa2Overlap, "dk: strides (0, 256, 64, 1)", k_broadcast,
             torch.full((1, s_, h, d), 7, dtype=torch.bfloat16).expand(self.shape)),
            (fa2.Fa2ShapeError, "dk has dtype torch.float32", k,
             torch.zeros(self.shape)),
            (fa2.Fa2ShapeError, "dk is on meta", k,
             torch.zeros(self.shape, dtype=torch.bfloat16, device="meta")),
            (fa2.Fa2ShapeError, "with k's: (4096, 256, 64, 1)", k,
             torch.zeros(b, h, s_, d, dtype=torch.bfloat16).transpose(1, 2)),
            (fa2.Fa2ShapeError, "those of k.contiguous()", k_broadcast,
             torch.zeros(b, h, s_, d, dtype=torch.bfloat16).transpose(1, 2)),
        ]
        for cls, fragment, t, g in cases:
            with self.subTest(fragment):
                self.refused(cls, fragment, _tensors._check_gradient, "dk", g, t)
        # Accepted: t's strides, or for a broadcast t those of its contiguous copy.
        self.assertIsNone(_tensors._check_gradient("dk", torch.zeros_like(k), k))
        self.assertIsNone(_tensors._check_gradient("dk", torch.zeros(self.shape,
                                                                dtype=torch.bfloat16),
                                              k_broadcast))

    def test_empty_keys_described_by_q(self):
        # seqlen_k = 0: K and V may have a NULL data_ptr(); Q stands in for them, with
        # Q's strides, and fa2_plan accepts the problem so described.
        q = torch.zeros(2, 50, 4, 64, dtype=torch.bfloat16)
        k = torch.empty(2, 0, 2, 64, dtype=torch.bfloat16)
        self.assertIs(_tensors._as_c_input(q, k), q)
        self.assertIs(_tensors._as_c_input(q, q), q)
        st = _tensors._as_c_input(q, k).stride()
        p = fa2.make_problem("bf16", q.shape, k.shape, k_strides=st, v_strides=st)
        plan = fa2.plan(p, device())
        self.assertEqual(plan.problem.seqlen_k, 0)

    def test_refused_before_the_library(self):
        q = torch.zeros(self.shape, dtype=torch.bfloat16)
        with self.assertRaises(fa2.Fa2ShapeError):
            fa2.forward(q, q, q, out=torch.zeros(self.shape, dtype=torch.uint8),
                        lib=NoLibrary())
        with self.assertRaises(fa2.Fa2ShapeError):
            fa2.backward(q, q, q, q, q, None, lib=NoLibrary())


if __name__ == "__main__":
    print(f"libfa2 {fa2.__version__} on {fa2.library().path} (libfa2 {fa2.library().version_string()})")
    unittest.main(verbosity=2)
