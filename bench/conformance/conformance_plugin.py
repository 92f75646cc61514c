"""pytest plugin for bench/conformance/run.py: which of flash-attn's test cases run, and
how each ended.

Selection (fixed seed, so a run is reproducible from its command line):
- deselected, whatever the function: the cases below (DESELECTED), each with its reason;
- of each remaining test function, FA2_CONF_CASES cases drawn at random (seed
  FA2_CONF_SEED); every case where FA2_CONF_FULL names the function and the head dim,
  e.g. "test_flash_attn_output:64,128".

Outcomes, written as JSON to FA2_CONF_REPORT: passed, failed, skipped (by the test
itself), and "refused": a failure whose error is libfa2 refusing by name an argument it
does not implement (rotary embeddings, cache_leftpad), counted apart.
"""
import json
import os
import random

# (reason, predicate on the case's parameters)
DESELECTED = [
    ("dropout: libfa2 has none (the cases decode flash-attn's dropout masks)",
     lambda params: params.get("dropout_p", 0.0) != 0.0),
]
REFUSED_MARK = "is not supported by libfa2"


def _params(item):
    callspec = getattr(item, "callspec", None)
    return dict(callspec.params) if callspec else {}


def _full_grid():
    """{function: head dims whose every case runs} from FA2_CONF_FULL."""
    out = {}
    for entry in filter(None, os.environ.get("FA2_CONF_FULL", "").split(";")):
        function, dims = entry.split(":")
        out[function] = {int(d) for d in dims.split(",")}
    return out


def pytest_pycollect_makeitem(collector, name, obj):
    """Test functions left out by FA2_CONF_FUNCTIONS are not even expanded into their
    cases (flash-attn's grids hold hundreds of thousands)."""
    functions = set(filter(None, os.environ.get("FA2_CONF_FUNCTIONS", "").split(",")))
    if functions and name.startswith("test_") and name not in functions:
        return []
    return None


def pytest_collection_modifyitems(session, config, items):
    per_case = int(os.environ.get("FA2_CONF_CASES", "60"))
    rng = random.Random(int(os.environ.get("FA2_CONF_SEED", "0")))
    functions = set(filter(None, os.environ.get("FA2_CONF_FUNCTIONS", "").split(",")))
    full = _full_grid()
    by_function, deselected = {}, []
    for item in items:
        name = item.originalname or item.name
        params = _params(item)
        if (functions and name not in functions) or \
                any(rule(params) for _, rule in DESELECTED):
            deselected.append(item)
            continue
        by_function.setdefault(name, []).append(item)
    keep = []
    for name, cases in by_function.items():
        grid = [c for c in cases if _params(c).get("d") in full.get(name, ())]
        rest = [c for c in cases if c not in grid]
        keep += grid + rng.sample(rest, min(per_case, len(rest)))
    chosen = set(map(id, keep))
    deselected += [i for i in items if id(i) not in chosen and i not in deselected]
    items[:] = [i for i in items if id(i) in chosen]
    config.hook.pytest_deselected(items=deselected)


_outcomes = {}


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
        counts.setdefault("first_failures", [])
        if len(counts["first_failures"]) < 3:
            counts["first_failures"].append(
                (report.nodeid.split("::")[-1], str(report.longrepr).splitlines()[-1][:300]))


def pytest_sessionfinish(session, exitstatus):
    path = os.environ.get("FA2_CONF_REPORT")
    if path:
        with open(path, "w") as f:
            json.dump({"outcomes": _outcomes,
                       "deselected": [reason for reason, _ in DESELECTED]}, f, indent=1)
