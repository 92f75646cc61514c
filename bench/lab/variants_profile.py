#!/usr/bin/env python3
"""One forward each of the plain, softcap and ALiBi plans, for a profiler (variants_compare's
1 x 8k GQA 32:8 shape: bf16, d = 128, causal). Under Nsight Compute (bench/gpu_check.sh,
FA2_PROFILE=1):
    ncu --kernel-name regex:fwd_sm90 --page raw --csv --log-file ncu.csv ... \\
        python3 bench/lab/variants_profile.py --lib build/libfa2.so
The kernels come in that order: plain, softcap, ALiBi. `--summary ncu.csv` prints, per
kernel, its time, each pipe's and the issue slots' use, and its largest warp stalls.
Against a library built with the phase trace (`git apply bench/lab/phase_trace.patch`,
then FA2_PHASE_TRACE 1 in kernels/common/phase_trace.cuh) each forward prints its traced
block's stamps; `--trace LOG` sums them up per kernel and math
warpgroup: median clocks per tile and of each phase, and what runs beside each softmax phase."""
import argparse
import csv
import os
import re
import statistics
import sys

NAMES = ("plain", "softcap", "alibi")


def profile(lib_path, seqlen):
    import torch

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    from sdpa_compare import load_library  # noqa: E402
    from variants_compare import plan_with  # noqa: E402

    lib = load_library(lib_path)
    torch.manual_seed(0)
    s, dt = seqlen, torch.bfloat16
    q = torch.randn(1, s, 32, 128, device="cuda", dtype=dt)
    k = torch.randn(1, s, 8, 128, device="cuda", dtype=dt)
    v = torch.randn_like(k)
    o = torch.empty_like(q)
    slopes = torch.rand(32, device="cuda") * 0.25
    for fields in ({}, dict(softcap=30.0), dict(alibi=1)):
        plan = plan_with(lib, q, k, True, **fields)
        ws = torch.empty(max(plan.workspace_bytes, 1), dtype=torch.uint8, device="cuda")
        plan.forward_with(q, k, v, o, alibi_slopes=slopes if fields.get("alibi") else None,
                          workspace=ws, stream=torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()


def summary(path):
    """ncu --page raw --csv: a header row of metric names, a row of units, a row per kernel."""
    with open(path, newline="") as f:
        rows = [r for r in csv.reader(f) if len(r) > 10]
    if len(rows) < 3:
        print(f"{path}: no kernel rows")
        return 1
    head, kernels = rows[0], rows[2:]
    col = {name: i for i, name in enumerate(head)}

    def value(row, name):
        try:
            return float(row[col[name]].replace(",", ""))
        except (KeyError, ValueError):
            return None

    pipes = [n for n in head if n.startswith("sm__") and "pipe" in n and
             n.endswith("pct_of_peak_sustained_active")]
    stalls = [n for n in head if "issue_stalled_" in n and n.endswith(".ratio")]
    for name, row in zip(NAMES, kernels):
        t = value(row, "gpu__time_duration.sum")
        print(f"profile {name:8s} time {t} ns, issue active "
              f"{value(row, 'smsp__issue_active.avg.pct_of_peak_sustained_active')} %, "
              f"registers {value(row, 'launch__registers_per_thread')}")
        # (SpeedOfLight's memory figures: whether a kernel is near L2's or DRAM's bound)
        print(f"profile   memory % of peak: L2 "
              f"{value(row, 'lts__throughput.avg.pct_of_peak_sustained_elapsed')}, DRAM "
              f"{value(row, 'dram__throughput.avg.pct_of_peak_sustained_elapsed')}, L1/shared "
              f"{value(row, 'l1tex__throughput.avg.pct_of_peak_sustained_active')}; SM clock "
              f"{value(row, 'smsp__cycles_elapsed.avg.per_second')} (ncu's clock control)")
        used = sorted(((value(row, n) or 0.0, n) for n in pipes), reverse=True)[:8]
        print("profile   pipes % of peak: " + ", ".join(
            f"{n.replace('sm__', '').split('.')[0]} {v:.1f}" for v, n in used if v > 0.5))
        top = sorted(((value(row, n) or 0.0, n) for n in stalls), reverse=True)[:6]
        print("profile   stalls (cycles per issue): " + ", ".join(
            f"{n.split('stalled_')[1].split('.')[0]} {v:.2f}" for v, n in top))
    return 0


SCORE_KINDS = {0: "plain", 1: "bounded softcap", 2: "general scores"}
TRACE = re.compile(r"trace scores (\d+) tiles (\d+) warpgroup (\d+) j (\d+): top (-?\d+) "
                   r"k (-?\d+) turn (-?\d+) issued (-?\d+) s (-?\d+) softmax (-?\d+) "
                   r"pv (-?\d+)")


def trace_summary(path):
    """Per traced kernel (in launch order) and warpgroup, medians over the traced tiles:
    the period (one top to the next), then each phase as the gap between its stamps."""
    runs, last = [], None
    with open(path) as f:
        for line in f:
            m = TRACE.search(line)
            if not m:
                continue
            kind, tiles, wg, j, top, k, turn, issued, s, soft, pv = map(int, m.groups())
            if last is None or (wg, j) <= last[1:]:
                runs.append({})
            last = (kind, wg, j)
            runs[-1].setdefault(wg, []).append((kind, tiles, top, k, turn, issued, s, soft, pv))
    if not runs:
        print(f"{path}: no trace lines")
        return 1
    med = statistics.median
    for run in runs:
        for wg, rows in sorted(run.items()):
            kind, tiles = rows[0][0], rows[0][1]
            period = [b[2] - a[2] for a, b in zip(rows, rows[1:])]
            gaps = {
                "k wait": [r[3] for r in rows],
                "turn wait": [r[4] - r[3] for r in rows],
                "issue": [r[5] - r[4] for r in rows],
                "S wait": [r[6] - r[5] for r in rows],
                "softmax": [r[7] - r[6] for r in rows],
                "PV wait": [r[8] - r[7] for r in rows],
            }
            print(f"trace {SCORE_KINDS.get(kind, kind)} (block of {tiles} tiles) warpgroup {wg}: "
                  f"period {med(period):.0f} clocks; " +
                  ", ".join(f"{n} {med(v):.0f}" for n, v in gaps.items()))
        overlaps(run)
    return 0


def overlaps(run):
    """What runs beside each warpgroup's softmax phase: the clocks of it (median over the
    traced tiles) during which the other warpgroup issues its products (its turn taken to
    both issued) or is in its own softmax phase, and the clocks it runs alone. The stamps'
    tops share one origin, the phases are offsets from their tile's top."""
    if len(run) != 2:
        return

    def spans(rows, start, end):
        return [(r[2] + r[start], r[2] + r[end]) for r in rows]

    def beside(a, others):
        return sum(max(0, min(a[1], b[1]) - max(a[0], b[0])) for b in others)

    med = statistics.median
    wgs = sorted(run)
    for wg in wgs:
        other = run[wgs[1] if wg == wgs[0] else wgs[0]]
        issue, softmax = spans(other, 4, 5), spans(other, 6, 7)
        mine = spans(run[wg], 6, 7)
        by_issue = [beside(a, issue) for a in mine]
        by_softmax = [beside(a, softmax) for a in mine]
        alone = [a[1] - a[0] - i - m for a, i, m in zip(mine, by_issue, by_softmax)]
        print(f"trace   warpgroup {wg}'s softmax beside the other's issue {med(by_issue):.0f}, "
              f"beside its softmax {med(by_softmax):.0f}, alone {med(alone):.0f} clocks")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default=os.environ.get("FA2_LIBRARY", "build/libfa2.so"))
    ap.add_argument("--seqlen", type=int, default=8192)
    ap.add_argument("--summary", help="print the summary of an ncu raw CSV and exit")
    ap.add_argument("--trace", help="sum up a FA2_PHASE_TRACE run's output and exit")
    args = ap.parse_args()
    if args.summary:
        return summary(args.summary)
    if args.trace:
        return trace_summary(args.trace)
    profile(args.lib, args.seqlen)
    return 0


if __name__ == "__main__":
    sys.exit(main())
