"""pytest plugin for bench/conformance/run.py: which of flash-attn's test cases run, and
how each ended.

Selection (fixed seed, so a run is reproducible from its command line), made before
pytest expands a test function's parameter grid (flash-attn's grids hold hundreds of
thousands of cases; expanding them all takes minutes):
- only the functions FA2_CONF_FUNCTIONS names (all when empty);
- deselected, whatever the function: the cases DESELECTED lists, each with its reason;
- of each function, FA2_CONF_CASES cases drawn at random (seed FA2_CONF_SEED), plus every
  case whose head dim FA2_CONF_FULL lists for it, e.g. "test_flash_attn_output:64,128".

Outcomes, written as JSON to FA2_CONF_REPORT: passed, failed, skipped (by the test
itself), and "refused": a failure whose error is libfa2 refusing by name an argument it
does not implement (rotary embeddings, cache_leftpad), counted apart.
"""
import itertools
import json
import os
import random

import pytest

# (reason, predicate on a case's parameters)
DESELECTED = [
    ("dropout: libfa2 has none (the cases decode flash-attn's dropout masks)",
     lambda params: params.get("dropout_p", 0.0) != 0.0),
]
REFUSED_MARK = "is not supported by libfa2"

_selection = {}  # function -> (cases in its grid, deselected by DESELECTED, chosen)
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
    kept = [c for c in cases if not any(rule(dict(zip(names, c))) for _, rule in DESELECTED)]
    dims = _full_grid().get(name, set())
    grid = [c for c in kept if dict(zip(names, c)).get("d") in dims]
    rest = [c for c in kept if dict(zip(names, c)).get("d") not in dims]
    rng = random.Random(f"{os.environ.get('FA2_CONF_SEED', '0')}:{name}")
    chosen = grid + rng.sample(rest, min(int(os.environ.get("FA2_CONF_CASES", "60")), len(rest)))
    _selection[name] = (len(cases), len(cases) - len(kept), len(chosen))
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
                       "deselected": [reason for reason, _ in DESELECTED]}, f, indent=1)
