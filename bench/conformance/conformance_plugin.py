"""pytest plugin for bench/conformance/run.py: which of flash-attn's test cases run, and
how each ended.

Selection (fixed seed, so a run is reproducible from its command line), made before
pytest expands a test function's parameter grid (flash-attn's grids hold hundreds of
thousands of cases; expanding them all takes minutes):
- only the functions FA2_CONF_FUNCTIONS names (all when empty);
- left out, whatever the function: the cases LEFT_OUT lists, each with its reason
  (dropout, which libfa2 does not have; cases the test function skips itself);
- refused by name: the cases REFUSED lists (arguments libfa2 refuses by name, e.g.
  rotary embeddings), sampled apart: FA2_CONF_REFUSED_CASES of them run, to show the
  refusal;
- of the rest of each function, FA2_CONF_CASES cases drawn at random (seed
  FA2_CONF_SEED), plus every case whose head dim FA2_CONF_FULL lists for it, e.g.
  "test_flash_attn_output:64,128";
- FA2_CONF_SHARD="i/n": only every n-th chosen case from the i-th (run.py --jobs runs
  n such processes side by side).

Outcomes, written as JSON to FA2_CONF_REPORT: passed, failed, skipped (by the test
itself), and "refused": a failure whose error is libfa2 refusing by name an argument it
does not implement (rotary embeddings, cache_leftpad), counted apart.
"""
import itertools
import json
import os
import random

import pytest

# (reason, predicate on a case's parameters): cases that do not run at all.
LEFT_OUT = [
    ("dropout: libfa2 has none (the cases decode flash-attn's dropout masks)",
     lambda params: params.get("dropout_p", 0.0) != 0.0),
    # test_flash_attn_kvcache skips these itself (its first lines): not drawn, so that
    # the cases drawn run
    ("cases test_flash_attn_kvcache skips itself",
     lambda params: "new_kv" in params and (
         (params["seqlen_q"] > params["seqlen_k"] and params["new_kv"])
         or (not params["new_kv"] and params["rotary_fraction"] > 0.0)
         or (params["has_batch_idx"] and params["paged_kv_block_size"] is not None)
         or (params["has_leftpad"] and params["paged_kv_block_size"] is not None))),
]
# (argument, predicate): cases that pass an argument libfa2 refuses by name.
REFUSED = [
    ("rotary embeddings", lambda params: params.get("rotary_fraction", 0.0) > 0.0),
    ("cache_leftpad", lambda params: bool(params.get("has_leftpad", False))),
]
REFUSED_MARK = "is not supported by libfa2"

_selection = {}  # function -> counts of its grid, left out, refused, chosen
_outcomes = {}


def _full_grid():
    """{function: head dims whose every case runs} from FA2_CONF_FULL."""
    out = {}
    for entry in filter(None, os.environ.get("FA2_CONF_FULL", "").split(";")):
        function, dims = entry.split(":")
        out[function] = {int(d) for d in dims.split(",")}
    return out


def _grid(marks):
    """The cartesian product of parametrize marks: (argument names, [value tuples])."""
    names, axes = [], []
    for mark in marks:
        argnames, argvalues = mark.args[0], mark.args[1]
        these = [n.strip() for n in argnames.split(",")] if isinstance(argnames, str) \
            else list(argnames)
        values = []
        for v in argvalues:
            if hasattr(v, "values") and hasattr(v, "marks"):  # pytest.param(...)
                values.append(tuple(v.values))
            else:
                values.append(tuple(v) if len(these) > 1 else (v,))
        names += these
        axes.append(values)
    return names, [sum(combo, ()) for combo in itertools.product(*axes)]


def _sample(name, obj):
    """Replaces obj's parametrize marks by one mark over the chosen cases."""
    marks = [m for m in getattr(obj, "pytestmark", []) if m.name == "parametrize"]
    if not marks:
        return
    names, cases = _grid(marks)
    params = [dict(zip(names, c)) for c in cases]
    kept = [(c, p) for c, p in zip(cases, params)
            if not any(rule(p) for _, rule in LEFT_OUT)]
    refused = [c for c, p in kept if any(rule(p) for _, rule in REFUSED)]
    runnable = [(c, p) for c, p in kept if not any(rule(p) for _, rule in REFUSED)]
    dims = _full_grid().get(name, set())
    grid = [c for c, p in runnable if p.get("d") in dims]
    rest = [c for c, p in runnable if p.get("d") not in dims]
    rng = random.Random(f"{os.environ.get('FA2_CONF_SEED', '0')}:{name}")
    chosen = grid + rng.sample(rest, min(int(os.environ.get("FA2_CONF_CASES", "60")), len(rest)))
    chosen += rng.sample(refused, min(int(os.environ.get("FA2_CONF_REFUSED_CASES", "10")),
                                      len(refused)))
    shard, shards = (int(x) for x in os.environ.get("FA2_CONF_SHARD", "0/1").split("/"))
    _selection[name] = {"grid": len(cases), "left_out": len(cases) - len(kept),
                        "refused_grid": len(refused), "chosen": len(chosen)}
    chosen = chosen[shard::shards]
    others = [m for m in getattr(obj, "pytestmark", []) if m.name != "parametrize"]
    obj.pytestmark = others + [pytest.mark.parametrize(",".join(names), chosen).mark]


def pytest_pycollect_makeitem(collector, name, obj):
    if not name.startswith("test_") or not callable(obj):
        return None
    functions = set(filter(None, os.environ.get("FA2_CONF_FUNCTIONS", "").split(",")))
    if functions and name not in functions:
        return []  # not expanded at all
    _sample(name, obj)
    return None


def pytest_runtest_logreport(report):
    if report.when != "call" and not (report.when == "setup" and report.outcome != "passed"):
        return
    function = report.nodeid.split("::")[-1].split("[")[0]
    outcome = report.outcome
    if outcome == "skipped" and "empty parameter set" in str(report.longrepr):
        return  # a --jobs process whose share of a small grid is empty
    if outcome == "failed" and REFUSED_MARK in str(report.longrepr):
        outcome = "refused"
    counts = _outcomes.setdefault(function, {})
    counts[outcome] = counts.get(outcome, 0) + 1
    if outcome == "failed":
        first = counts.setdefault("first_failures", [])
        if len(first) < 3:
            first.append((report.nodeid.split("::")[-1],
                          str(report.longrepr).splitlines()[-1][:300]))


def pytest_sessionfinish(session, exitstatus):
    path = os.environ.get("FA2_CONF_REPORT")
    if path:
        with open(path, "w") as f:
            json.dump({"outcomes": _outcomes, "selection": _selection,
                       "left_out": [reason for reason, _ in LEFT_OUT],
                   "refused": [arg for arg, _ in REFUSED]}, f, indent=1)
