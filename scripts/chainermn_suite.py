#!/usr/bin/env python
"""Run ChainerMN's own unit tests under mpiexec, on mnframe (through python -m mnframe.compat) or on the peer.

    python scripts/chainermn_suite.py /tmp/chainer-tests/chainermn_tests            # on mnframe
    python scripts/chainermn_suite.py /tmp/chainer-tests/chainermn_tests --peer     # on Chainer's chainermn

The tests are not part of this repository (get them from Chainer's sources). Each
test file runs alone under ``mpiexec -n N`` with a timeout (a test that fails on one
rank often leaves the other waiting), CPU tests only (``-m "not slow and not gpu"``,
as Chainer's CI). A test counts as passed when it passed on every rank.
"""

import argparse
import collections
import json
import os
import sys
import tempfile
from pathlib import Path

from mnframe.testing import run_mpi

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


def run_file(path, root, n, timeout, peer, work):
    out = work / path.stem
    launcher = [] if peer else ["-m", "mnframe.compat"]
    env = {
        "MNFRAME_SUITE_OUT": str(out),
        "PYTHONPATH": os.pathsep.join(p for p in (str(work), os.environ.get("PYTHONPATH")) if p),
    }
    result = run_mpi(
        [
            *launcher,
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
            "not slow and not gpu",
            "-c",
            os.devnull,
            "--rootdir",
            str(root),
            str(path),
        ],
        n=n,
        timeout=timeout,
        env=env,
        cwd=str(root.parent),
    )
    ranks = [
        json.loads(Path(f"{out}.rank{r}.json").read_text()) if Path(f"{out}.rank{r}.json").exists() else None
        for r in range(n)
    ]
    counts = collections.Counter()
    tests = set().union(*[set(r) for r in ranks if r])
    for test in tests:
        outcomes = [r.get(test, "missing") if r else "missing" for r in ranks]
        counts[
            "passed" if set(outcomes) == {"passed"} else "skipped" if set(outcomes) == {"skipped"} else "failed"
        ] += 1
    if result.timed_out:
        counts["timed out files"] += 1
    elif not tests:
        counts["files with no result (collection error)"] += 1
    return counts


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tests", type=Path, help="the chainermn_tests directory")
    parser.add_argument("--peer", action="store_true", help="run on Chainer's chainermn instead of mnframe")
    parser.add_argument("-n", type=int, default=2, help="ranks (default 2)")
    parser.add_argument("--timeout", type=int, default=150, help="seconds per test file (default 150)")
    args = parser.parse_args()
    if not args.tests.is_dir():
        parser.error(f"{args.tests} is not a directory")
    total = collections.Counter()
    with tempfile.TemporaryDirectory(prefix="mnframe-suite-") as tmp:
        work = Path(tmp)
        (work / "mnframe_suite_plugin.py").write_text(PLUGIN)
        for path in sorted(args.tests.rglob("test_*.py")):
            counts = run_file(path, args.tests.resolve(), args.n, args.timeout, args.peer, work)
            total.update(counts)
            print(f"{path.relative_to(args.tests)}: {dict(counts)}", flush=True)
    print(f"TOTAL ({'peer' if args.peer else 'mnframe'}, {args.n} ranks): {dict(total)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
