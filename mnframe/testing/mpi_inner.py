"""pytest plugin inside every rank of one ``mpiexec -n N python -m pytest`` launch of the MPI suite.

The outer suite (``mnframe/testing/mpi_suite.py``) starts one launch per rank count with
``-p mnframe.testing.mpi_inner`` and the environment variable ``MNFRAME_MPI_SUITE_DIR``:

- ``ids.txt`` there lists the tests to run, in order; every rank runs exactly those, in that order.
- Before each test, each rank writes its heartbeat ``rank<r>.now`` (test id, phase, start time): the
  outer suite reads it to name a test that hangs and to kill the launch.
- After each test, every rank meets the others on a private duplicate of COMM_WORLD and rank 0
  appends one verdict for all ranks to ``results.jsonl`` (failed if any rank failed), so a failing
  test fails only itself and the launch goes on.
- A rank whose test failed writes its report to ``failed.rank<r>.json`` first. If a peer is still
  inside the test (waiting in a collective the failed rank never reached), the failed rank waits
  ``MNFRAME_MPI_SUITE_GRACE`` seconds (default 20) and aborts the launch (or the test's timeout
  kills it first): the outer suite names the test with that report and relaunches the rest.

A module's ``MPI_ENV = {...}`` is set in ``os.environ`` while its tests run.
"""

import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402

import mnframe  # noqa: E402,F401  (before any test module imports chainer: the NumPy 2 shim)

SUITE_DIR_ENV = "MNFRAME_MPI_SUITE_DIR"
GRACE_ENV = "MNFRAME_MPI_SUITE_GRACE"
_RANK_OF_OUTCOME = {"passed": 0, "skipped": 1, "failed": 2}


class _Harness:
    """Per-rank state: this rank's reports of the running test and the private communicator."""

    def __init__(self, suite_dir):
        from mpi4py import MPI

        self.MPI = MPI
        self.dir = Path(suite_dir)
        self.rank = MPI.COMM_WORLD.rank
        self.comm = MPI.COMM_WORLD.Dup()  # never used by a test: its collectives cannot mix with theirs
        self.grace = float(os.environ.get(GRACE_ENV, "20"))
        self.ids = [line for line in (self.dir / "ids.txt").read_text().splitlines() if line]
        self.reports = {}
        self.started = {}

    def heartbeat(self, nodeid, phase):
        path = self.dir / f"rank{self.rank}.now"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"id": nodeid, "phase": phase, "started": self.started.get(nodeid, time.time())}))
        os.replace(tmp, path)

    def record(self, report):
        mine = self.reports.setdefault(report.nodeid, {"outcome": "passed", "text": "", "duration": 0.0})
        mine["duration"] += report.duration
        if report.outcome == "failed" or (report.outcome == "skipped" and mine["outcome"] == "passed"):
            mine["outcome"] = report.outcome
            if report.outcome == "skipped" and isinstance(report.longrepr, tuple):
                mine["text"] = str(report.longrepr[2])
            else:
                mine["text"] += f"\n----- rank {self.rank}, {report.when} -----\n{report.longreprtext}"

    def agree(self, nodeid):
        """Meet the other ranks after the test; rank 0 writes the one verdict."""
        mine = self.reports.pop(nodeid, {"outcome": "failed", "text": f"rank {self.rank}: no report", "duration": 0})
        self.heartbeat(nodeid, "agree")
        failed = self.dir / f"failed.rank{self.rank}.json"
        if mine["outcome"] == "failed":  # in case the launch is killed before the verdict
            failed.write_text(json.dumps({"id": nodeid, "text": mine["text"]}))
        request = self.comm.Ibarrier()
        deadline = time.monotonic() + self.grace if mine["outcome"] == "failed" else None
        while not request.Test():
            if deadline is not None and time.monotonic() > deadline:
                self._abort(nodeid, mine)
            time.sleep(0.002)
        failed.unlink(missing_ok=True)
        everyone = self.comm.gather(mine, root=0)
        if self.rank == 0:
            self._write_verdict(nodeid, everyone)

    def _write_verdict(self, nodeid, everyone):
        worst = max(everyone, key=lambda r: _RANK_OF_OUTCOME[r["outcome"]])["outcome"]
        if worst == "skipped" and everyone[0]["outcome"] != "skipped":
            worst = "passed"  # some ranks skip a part they cannot run (no peer): rank 0 ran it
        text = everyone[0]["text"] if worst == "skipped" else "".join(r["text"] for r in everyone)
        line = {"id": nodeid, "outcome": worst, "duration": max(r["duration"] for r in everyone), "text": text}
        with open(self.dir / "results.jsonl", "a") as f:
            f.write(json.dumps(line) + "\n")

    def _abort(self, nodeid, mine):
        text = mine["text"] + (
            f"\n(rank {self.rank} failed and its peers did not finish the test within {self.grace:g} s:"
            " they wait in a collective it never reached, so the launch is aborted)"
        )
        (self.dir / f"failed.rank{self.rank}.json").write_text(json.dumps({"id": nodeid, "text": text}))
        sys.stderr.write(f"\n===== rank {self.rank}: {nodeid} FAILED; aborting the launch =====\n{text}\n")
        sys.stderr.flush()
        self.MPI.COMM_WORLD.Abort(1)


_harness = None


def pytest_configure(config):  # noqa: ARG001
    global _harness
    if not os.environ.get(SUITE_DIR_ENV):
        raise pytest.UsageError(
            f"mnframe.testing.mpi_inner runs inside a launch of mnframe/testing/mpi_suite.py ({SUITE_DIR_ENV} unset)"
        )
    _harness = _Harness(os.environ[SUITE_DIR_ENV])


def pytest_collection_modifyitems(config, items):
    """Keep exactly the listed tests, in the listed order (the same on every rank)."""
    by_id = {item.nodeid: item for item in items}
    kept = [by_id[i] for i in _harness.ids if i in by_id]
    dropped = [item for item in items if item.nodeid not in set(_harness.ids)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    items[:] = kept
    if _harness.rank == 0:
        for missing in (i for i in _harness.ids if i not in by_id):
            text = f"not collected at {_harness.comm.size} rank(s) (does its parametrization depend on the size?)"
            line = {"id": missing, "outcome": "failed", "duration": 0.0, "text": text}
            with open(_harness.dir / "results.jsonl", "a") as f:
                f.write(json.dumps(line) + "\n")


def pytest_runtest_logstart(nodeid, location):  # noqa: ARG001
    _harness.started[nodeid] = time.time()
    _harness.heartbeat(nodeid, "test")


def pytest_runtest_logreport(report):
    _harness.record(report)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):  # noqa: ARG001
    yield
    _harness.agree(item.nodeid)
    _harness.started.pop(item.nodeid, None)


@pytest.fixture(autouse=True, scope="module")
def _mpi_module_env(request):
    """The module's ``MPI_ENV`` in ``os.environ`` while its tests run."""
    env = dict(getattr(request.module, "MPI_ENV", {}) or {})
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    yield
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture(scope="session")
def mpi_comm():
    from mpi4py import MPI

    return MPI.COMM_WORLD
