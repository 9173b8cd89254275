#!/usr/bin/env python
"""Run ChainerMN's own unit tests under mpiexec on mnframe and on Chainer's chainermn, file by file, in one run.

    python scripts/chainermn_suite.py DIR                  # both sides, one table
    python scripts/chainermn_suite.py DIR --side mnframe   # one side only
    python scripts/chainermn_suite.py DIR --per-test       # every test in its own mpiexec

DIR is Chainer 7.8.1's ``tests/chainermn_tests``. It is not in this repository,
nor in Chainer's PyPI sdist (which has no tests): take it from Chainer's git
sources, e.g. ``git -C chainer archive v7.8.1 tests/chainermn_tests | tar -x``
in a clone of github.com/chainer/chainer (``mock`` must be installed: the test
extra has it).

Each test file runs alone under ``mpiexec -n N`` (default 2) with a timeout, CPU
tests only (``-m "not slow and not gpu"``, as Chainer's CI): mnframe through
``python -m mnframe.compat -m pytest``, the peer through ``python -m pytest``.
A file's figure is rank 0's pytest summary (the tests that passed on rank 0);
a file whose rank 0 never reached its summary (a hang ended by the timeout, an
abort) counts 0 and says so. Under pytest, a test that fails on one rank only
leaves the ranks in different collectives, so it can end the file there and
hide the tests after it: ``--per-test`` runs each test in its own ``mpiexec``
(slower: one start-up per test) so every test gets its own verdict.
"""

import argparse
import collections
import concurrent.futures
import json
import os
import sys
import tempfile
from pathlib import Path

from mnframe.testing import run_mpi

SIDES = {  # side -> (label in the table, arguments before "-m pytest")
    "peer": ("chainermn", []),
    "mnframe": ("mnframe", ["-m", "mnframe.compat"]),
}
MARKS = "not slow and not gpu"

PLUGIN = """
import json, os
_results = {}
def pytest_runtest_logreport(report):
    if report.when == "call" or report.outcome != "passed":
        if _results.get(report.nodeid) != "failed":
            _results[report.nodeid] = report.outcome
def pytest_sessionfinish(session, exitstatus):
    rank = os.environ.get("PMI_RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
    with open(os.environ["MNFRAME_SUITE_OUT"] + ".rank" + rank + ".json", "w") as f:
        json.dump(_results, f)
"""


def _pytest_args(side, root, targets, extra=()):
    return [
        *SIDES[side][1],
        "-m",
        "pytest",
        "-q",
        "-p",
        "mnframe_suite_plugin",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:randomly",
        "-m",
        MARKS,
        "-c",
        os.devnull,
        "--rootdir",
        str(root),
        *extra,
        *targets,
    ]


def _env(work, out):
    return {
        "MNFRAME_SUITE_OUT": str(out),
        "PYTHONPATH": os.pathsep.join(p for p in (str(work), os.environ.get("PYTHONPATH")) if p),
    }


def run_once(side, root, targets, n, timeout, work, tag):
    """One mpiexec of pytest over ``targets``: (rank 0's {nodeid: outcome} or None, timed out?)."""
    out = work / f"{side}-{tag}"
    for r in range(n):
        Path(f"{out}.rank{r}.json").unlink(missing_ok=True)
    result = run_mpi(_pytest_args(side, root, targets), n=n, timeout=timeout, env=_env(work, out), cwd=str(root.parent))
    rank0 = Path(f"{out}.rank0.json")
    return (json.loads(rank0.read_text()) if rank0.exists() else None), result.timed_out


def collect(side, root, path, timeout, work):
    """The test ids of ``path`` that the marks select (one process, no MPI job)."""
    result = run_mpi(
        _pytest_args(side, root, [str(path)], ["--collect-only"]),
        n=1,
        timeout=timeout,
        env=_env(work, work / "collect"),
        cwd=str(root.parent),
    )
    return [line.strip() for line in result.stdout.splitlines() if "::" in line and not line.startswith(" ")]


def run_file(side, path, root, args, work):
    """{"passed": rank 0's passed count, "outcomes": rank 0's outcomes, "note": why a figure is partial}."""
    tag = str(path.relative_to(root)).replace(os.sep, "_")
    if not args.per_test:
        outcomes, timed_out = run_once(side, root, [str(path)], args.n, args.timeout, work, tag)
        note = "" if outcomes is not None else ("timeout, no summary" if timed_out else "no summary")
        outcomes = outcomes or {}
    else:
        outcomes, missing = {}, 0
        for i, test in enumerate(collect(side, root, path, args.timeout, work)):
            got, _ = run_once(side, root, [str(root / test)], args.n, args.timeout, work, f"{tag}-{i}")
            if got:
                outcomes.update(got)
            else:
                missing += 1
                outcomes[test] = "no summary"
        note = f"{missing} test(s) without a summary" if missing else ""
    passed = sum(1 for o in outcomes.values() if o == "passed")
    return {"passed": passed, "outcomes": outcomes, "note": note}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tests", type=Path, help="Chainer 7.8.1's tests/chainermn_tests directory")
    parser.add_argument("--side", choices=["both", *SIDES], default="both", help="which side(s) to run (default both)")
    parser.add_argument("-n", type=int, default=2, help="ranks (default 2)")
    parser.add_argument("--timeout", type=int, default=300, help="seconds per mpiexec (default 300)")
    parser.add_argument("--per-test", action="store_true", help="run every test in its own mpiexec")
    parser.add_argument("-j", "--jobs", type=int, default=1, help="test files run at the same time (default 1)")
    parser.add_argument("--json", type=Path, help="also write every file's outcomes per side here")
    args = parser.parse_args()
    if not args.tests.is_dir():
        parser.error(f"{args.tests} is not a directory")
    root = args.tests.resolve()
    sides = list(SIDES) if args.side == "both" else [args.side]
    labels = [SIDES[s][0] for s in sides]
    print(f"| file | {' | '.join(labels)} | notes |")
    print(f"| --- | {' | '.join('---:' for _ in sides)} | --- |", flush=True)
    totals, report = collections.Counter(), {}
    with tempfile.TemporaryDirectory(prefix="mnframe-suite-") as tmp:
        work = Path(tmp)
        (work / "mnframe_suite_plugin.py").write_text(PLUGIN)
        paths = sorted(root.rglob("test_*.py"))
        with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:  # each job: its own mpiexec
            futures = {(p, side): pool.submit(run_file, side, p, root, args, work) for p in paths for side in sides}
        for path in paths:
            rel = str(path.relative_to(root))
            row = {side: futures[(path, side)].result() for side in sides}
            report[rel] = {SIDES[s][0]: row[s] for s in sides}
            totals.update({side: row[side]["passed"] for side in sides})
            notes = "; ".join(f"{SIDES[s][0]}: {row[s]['note']}" for s in sides if row[s]["note"])
            print(f"| {rel} | {' | '.join(str(row[s]['passed']) for s in sides)} | {notes} |", flush=True)
    print(f"| **total** (rank 0 passed, {args.n} ranks) | {' | '.join(f'**{totals[s]}**' for s in sides)} | |")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
