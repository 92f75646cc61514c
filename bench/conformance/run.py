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
        --lib build/libfa2.so [--cases 60] [--seed 0] [--jobs 4] \\
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


def _merge(reports):
    """One report from the shards' reports: outcome counts summed, first failures
    pooled (at most 3 per function)."""
    merged = {"outcomes": {}, "selection": {}, "left_out": [], "refused": []}
    for r in reports:
        merged["selection"].update(r["selection"])
        merged["left_out"], merged["refused"] = r["left_out"], r["refused"]
        for name, counts in r["outcomes"].items():
            into = merged["outcomes"].setdefault(name, {})
            for key, value in counts.items():
                if key == "first_failures":
                    into[key] = (into.get(key, []) + value)[:3]
                else:
                    into[key] = into.get(key, 0) + value
    return merged


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--flash-attn", required=True, help="a flash-attention checkout (2.8.x)")
    ap.add_argument("--lib", default=os.environ.get("FA2_LIBRARY", "build/libfa2.so"))
    ap.add_argument("--cases", type=int, default=60, help="cases drawn per test function")
    ap.add_argument("--refused-cases", type=int, default=10,
                    help="cases drawn per function among those libfa2 refuses by name")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--full", default="", help="FUNCTION:d,d;...: every case at these dims")
    ap.add_argument("--functions", default="", help="only these test functions")
    ap.add_argument("--jobs", type=int, default=1,
                    help="pytest processes side by side, each running every n-th case")
    ap.add_argument("--timeout", type=int, default=0, help="pytest-timeout per case, s")
    ap.add_argument("pytest_args", nargs="*", help="more pytest arguments (after --)")
    args = ap.parse_args()

    tests = os.path.join(os.path.abspath(args.flash_attn), "tests", "test_flash_attn.py")
    if not os.path.exists(tests):
        sys.exit(f"no tests/test_flash_attn.py under {args.flash_attn}")
    cmd = [sys.executable, "-m", "pytest", tests, "-p", "conformance_plugin",
           "-p", "no:cacheprovider", "-q", "-rN", "--tb=line"]
    if args.timeout:
        cmd += ["-p", "pytest_timeout", f"--timeout={args.timeout}"]
    print("+", " ".join(cmd), f"({args.jobs} process{'es' if args.jobs > 1 else ''})",
          flush=True)
    runs = []
    for shard in range(args.jobs):
        report = tempfile.NamedTemporaryFile(suffix=".json", delete=False).name
        env = dict(os.environ,
                   FA2_LIBRARY=os.path.abspath(args.lib),
                   FA2_FLASH_ATTN_CHECKOUT=os.path.abspath(args.flash_attn),
                   FA2_CONF_CASES=str(args.cases),
                   FA2_CONF_REFUSED_CASES=str(args.refused_cases),
                   FA2_CONF_SEED=str(args.seed), FA2_CONF_FULL=args.full,
                   FA2_CONF_FUNCTIONS=args.functions, FA2_CONF_REPORT=report,
                   FA2_CONF_SHARD=f"{shard}/{args.jobs}",
                   PYTHONPATH=os.pathsep.join([os.path.join(HERE, "shim"), HERE,
                                               os.path.join(REPO, "python"),
                                               os.environ.get("PYTHONPATH", "")]))
        # the first process prints to the terminal, the others only their summary line
        out = None if shard == 0 else subprocess.PIPE
        runs.append((subprocess.Popen(cmd + args.pytest_args, env=env, stdout=out,
                                      stderr=subprocess.STDOUT, text=True,
                                      cwd=os.path.dirname(tests)), report))
    reports = []
    for shard, (proc, report) in enumerate(runs):
        text, _ = proc.communicate()
        if text:
            print(f"[process {shard}] " + (text.strip().splitlines() or [""])[-1])
        try:
            with open(report) as f:
                reports.append(json.load(f))
        except (OSError, ValueError):
            print(f"process {shard} wrote no report (exit {proc.returncode})")
            return 1
        finally:
            if os.path.exists(report):
                os.unlink(report)
    result = _merge(reports)

    print(f"\nflash-attn's tests against libfa2 ({args.cases} cases per function, seed "
          f"{args.seed}{', full grid ' + args.full if args.full else ''})")
    print(f"{'test function':42} {'grid':>7} {'left out':>8} {'refused':>8} {'chosen':>7} "
          f"{'passed':>7} {'failed':>7} {'refused':>8} {'skipped':>8}")
    failed = 0
    for name, sel in sorted(result["selection"].items()):
        counts = result["outcomes"].get(name, {})
        failed += counts.get("failed", 0)
        print(f"{name:42} {sel['grid']:7} {sel['left_out']:8} {sel['refused_grid']:8} "
              f"{sel['chosen']:7} {counts.get('passed', 0):7} {counts.get('failed', 0):7} "
              f"{counts.get('refused', 0):8} {counts.get('skipped', 0):8}")
        for case, line in counts.get("first_failures", []):
            print(f"    FAILED {case}: {line}")
    print("grid: the function's cases; left out, not run (" + "; ".join(result["left_out"])
          + "); refused: of the grid, the cases passing an argument libfa2 refuses by name ("
          + ", ".join(result["refused"]) + "), a few of them chosen; chosen: run; then how "
          "the chosen ended (refused: failed with libfa2's refusal by name)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
