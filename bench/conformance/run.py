#!/usr/bin/env python3
"""FlashAttention-2's own test suite against libfa2: the conformance test of the
flash-attn shims (libfa2.flash_attn_interface).

Runs the tests/test_flash_attn.py of a flash-attention checkout you provide (nothing of
it is copied into this repository) with the `flash_attn` names bound to libfa2
(bench/conformance/shim), a fixed-seed sample of cases per test function
(bench/conformance/conformance_plugin.py says which cases are left out and why), and prints
pass / fail / refused-by-name counts per function. Needs a GPU, PyTorch, pytest and
einops.

    python3 bench/conformance/run.py --flash-attn ~/src/flash-attention \\
        --lib build/libfa2.so [--cases 60] [--seed 0] \\
        [--full test_flash_attn_output:64,128] [--functions test_flash_attn_output,...]

Exit status 0 when no selected case failed (refusals by name are counted apart), 1
otherwise.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--flash-attn", required=True, help="a flash-attention checkout (2.8.x)")
    ap.add_argument("--lib", default=os.environ.get("FA2_LIBRARY", "build/libfa2.so"))
    ap.add_argument("--cases", type=int, default=60, help="cases drawn per test function")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--full", default="", help="FUNCTION:d,d;...: every case at these dims")
    ap.add_argument("--functions", default="", help="only these test functions")
    ap.add_argument("--timeout", type=int, default=0, help="pytest-timeout per case, s")
    ap.add_argument("pytest_args", nargs="*", help="more pytest arguments (after --)")
    args = ap.parse_args()

    tests = os.path.join(os.path.abspath(args.flash_attn), "tests", "test_flash_attn.py")
    if not os.path.exists(tests):
        sys.exit(f"no tests/test_flash_attn.py under {args.flash_attn}")
    report = tempfile.NamedTemporaryFile(suffix=".json", delete=False).name
    env = dict(os.environ,
               FA2_LIBRARY=os.path.abspath(args.lib),
               FA2_FLASH_ATTN_CHECKOUT=os.path.abspath(args.flash_attn),
               FA2_CONF_CASES=str(args.cases), FA2_CONF_SEED=str(args.seed),
               FA2_CONF_FULL=args.full, FA2_CONF_FUNCTIONS=args.functions,
               FA2_CONF_REPORT=report,
               PYTHONPATH=os.pathsep.join([os.path.join(HERE, "shim"), HERE,
                                           os.path.join(REPO, "python"),
                                           os.environ.get("PYTHONPATH", "")]))
    cmd = [sys.executable, "-m", "pytest", tests, "-p", "conformance_plugin",
           "-p", "no:cacheprovider",
           "-q", "-rN", "--tb=line"]
    if args.timeout:
        cmd += ["-p", "pytest_timeout", f"--timeout={args.timeout}"]
    print("+", " ".join(cmd), flush=True)
    subprocess.call(cmd + args.pytest_args, env=env, cwd=os.path.dirname(tests))

    with open(report) as f:
        result = json.load(f)
    os.unlink(report)
    print(f"\nflash-attn's tests against libfa2 ({args.cases} cases per function, seed "
          f"{args.seed}{', full grid ' + args.full if args.full else ''})")
    print(f"{'test function':42} {'grid':>7} {'dropout':>8} {'chosen':>7} {'passed':>7} "
          f"{'failed':>7} {'refused':>8} {'skipped':>8}")
    failed = 0
    for name, (grid, dropped, chosen) in sorted(result["selection"].items()):
        counts = result["outcomes"].get(name, {})
        failed += counts.get("failed", 0)
        print(f"{name:42} {grid:7} {dropped:8} {chosen:7} {counts.get('passed', 0):7} "
              f"{counts.get('failed', 0):7} {counts.get('refused', 0):8} "
              f"{counts.get('skipped', 0):8}")
        for case, line in counts.get("first_failures", []):
            print(f"    FAILED {case}: {line}")
    print("grid: the function's cases; dropout: left out (" + "; ".join(result["deselected"])
          + "); chosen: run")
    print("refused: a case failing with libfa2 refusing an argument by name (rotary, "
          "cache_leftpad)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
