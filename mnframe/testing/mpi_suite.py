"""The test tiers and the MPI suite: one ``mpiexec`` launch per rank count, a verdict per test.

Loaded by ``tests/conftest.py``. Tiers:

- **fast** (``pytest``, the default): ``tests/unit``, the MPI modules at 1 and 2 ranks, and the
  job-level tests marked ``smoke``; anything marked ``slow`` is left out.
- **full** (``pytest --full``): every test, the MPI modules at every size they declare.

An MPI module ``tests/mpi/test_*.py`` declares, as literals, ``MPI_SIZES = (1, 2, 3)`` (default),
``MPI_TIMEOUT = seconds`` (per test, default 120) and ``MPI_ENV = {...}``. Its tests are collected
here like any others and become one item per rank count (``test_x@np2``), so ``-k``, ``-m`` and
``--durations`` work on them. All selected items of one rank count run in ONE launch
(``mnframe/testing/mpi_inner.py`` inside the ranks), started in a background thread while the
other tests run. A test that hangs past its timeout is named, the launch is killed and relaunched
with the tests after it; a launch that dies names the test it died in.
"""

import ast
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from mnframe.testing.launch import mpiexec_path

__all__ = [  # the hooks tests/conftest.py takes
    "pytest_addoption",
    "pytest_configure",
    "pytest_collection_modifyitems",
    "pytest_runtestloop",
    "pytest_runtest_makereport",
    "pytest_sessionfinish",
]

FAST_SIZES = (1, 2)
DEFAULT_TIMEOUT = 120
STARTUP_TIMEOUT = 180  # from mpiexec to the first test: every rank imports chainer, mnframe and the modules
MAX_LAUNCHES = 6  # per rank count: the first, then one after each hang or crash


def pytest_addoption(parser):
    group = parser.getgroup("mnframe", "mnframe test tiers")
    group.addoption("--full", action="store_true", help="the full tier: slow tests, job tests, every MPI size")
    group.addoption("--mpi-sizes", default=None, help="MPI rank counts to run, e.g. 1,2,3 (default: 1,2; --full: all)")
    group.addoption("--mpi-serial", action="store_true", help="run the MPI launches in turn, not beside other tests")


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: the full tier only (pytest --full)")
    config.addinivalue_line("markers", "smoke: a job-level test that the fast default tier runs")
    for n in range(1, 9):
        config.addinivalue_line("markers", f"np{n}: an MPI test item at {n} rank(s)")


def _is_mpi_module(path):
    path = Path(path)
    return path.parent.name == "mpi" and path.parent.parent.name == "tests" and path.name.startswith("test_")


def declared(path):
    """The module's MPI_SIZES, MPI_TIMEOUT and MPI_ENV (literals, read without importing it)."""
    values = {"MPI_SIZES": (1, 2, 3), "MPI_TIMEOUT": DEFAULT_TIMEOUT, "MPI_ENV": {}}
    for node in ast.parse(Path(path).read_text()).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            name = getattr(node.targets[0], "id", None)
            if name in values:
                values[name] = ast.literal_eval(node.value)
    return values


def _job_level(item):
    """A test module directly in tests/ (a whole job, a script, a launcher)."""
    path = Path(item.path)
    return path.parent.name == "tests" and path.parent.parent == item.config.rootpath


def _sizes(config, declared_sizes):
    chosen = config.getoption("--mpi-sizes")
    if chosen:
        wanted = {int(n) for n in chosen.split(",")}
    elif config.getoption("--full"):
        wanted = set(declared_sizes)
    else:
        wanted = set(FAST_SIZES)
    return [n for n in declared_sizes if n in wanted]


class MpiTestFailed(Exception):
    """The verdict of a test that failed on some rank, with every failing rank's report."""


class MpiItem(pytest.Item):
    """One test of an MPI module at one rank count; its launch runs it (see MpiLaunches)."""

    def __init__(self, *, inner_id, ranks, timeout, **kwargs):
        super().__init__(**kwargs)
        self.inner_id = inner_id
        self.ranks = ranks
        self.timeout = timeout
        self.inner_duration = 0.0

    def runtest(self):
        verdict = self.session.stash[LAUNCHES].verdict(self)
        self.inner_duration = verdict.get("duration", 0.0)
        if verdict["outcome"] == "failed":
            raise MpiTestFailed(verdict["text"])
        if verdict["outcome"] == "skipped":
            pytest.skip(verdict["text"] or "skipped inside the ranks")

    def repr_failure(self, excinfo):
        if isinstance(excinfo.value, MpiTestFailed):
            return f"{self.inner_id} at {self.ranks} rank(s):\n{excinfo.value}"
        return super().repr_failure(excinfo)

    def reportinfo(self):
        return self.path, None, f"{self.inner_id} at {self.ranks} rank(s)"


LAUNCHES = pytest.StashKey()


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session, config, items):
    """MPI tests become one item per rank count; the tier leaves out what it does not run."""
    full = config.getoption("--full")
    out, dropped = [], []
    for item in items:
        if _is_mpi_module(item.path):
            decl = declared(item.path)
            for n in _sizes(config, decl["MPI_SIZES"]):
                mpi_item = MpiItem.from_parent(
                    item.parent, name=f"{item.name}@np{n}", inner_id=item.nodeid, ranks=n, timeout=_timeout(item, decl)
                )
                for mark in item.iter_markers():  # -m and the tiers see the test's own marks
                    mpi_item.own_markers.append(mark)
                    mpi_item.keywords[mark.name] = mark
                mpi_item.add_marker(f"np{n}")
                (out if full or not mpi_item.get_closest_marker("slow") else dropped).append(mpi_item)
        elif full or (
            not item.get_closest_marker("slow") and (not _job_level(item) or item.get_closest_marker("smoke"))
        ):
            out.append(item)
        else:
            dropped.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)

    # The MPI launches run in the background while the tests before their items run; job-level
    # tests but the smoke ones come after them, on a quiet machine (some time their jobs).
    def place(item):
        if isinstance(item, MpiItem):
            return 1
        return 2 if _job_level(item) and not item.get_closest_marker("smoke") else 0

    items[:] = sorted(out, key=place)  # stable: each group keeps its order
    session.stash[LAUNCHES] = MpiLaunches(config)


def _timeout(item, decl):
    mark = item.get_closest_marker("timeout")
    return float(mark.args[0]) if mark and mark.args else float(decl["MPI_TIMEOUT"])


@pytest.hookimpl(hookwrapper=True)
def pytest_runtestloop(session):
    launches = session.stash.get(LAUNCHES, None)
    if launches is not None and not session.config.getoption("--collect-only"):
        launches.start([i for i in session.items if isinstance(i, MpiItem)])
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    if isinstance(item, MpiItem) and call.when == "call":
        outcome.get_result().duration = item.inner_duration  # the test's own time in the ranks


def pytest_sessionfinish(session):
    launches = session.stash.get(LAUNCHES, None)
    if launches is not None:
        launches.stop()


class MpiLaunches:
    """Runs the launches, one rank count after another, in a background thread (or on demand)."""

    def __init__(self, config):
        self.config = config
        self.serial = config.getoption("--mpi-serial")
        self.groups = {}  # ranks -> [MpiItem], in run order
        self.verdicts = {}  # (ranks, inner_id) -> verdict
        self.done = {}  # ranks -> threading.Event
        self.thread = None
        self.current = None

    def start(self, items):
        for item in items:
            self.groups.setdefault(item.ranks, []).append(item)
        self.done = {n: threading.Event() for n in self.groups}
        if self.groups and not self.serial:
            self.thread = threading.Thread(target=self._run_all, name="mnframe-mpi-suite", daemon=True)
            self.thread.start()

    def _run_all(self):
        for n in sorted(self.groups):
            self._run_group(n)

    def verdict(self, item):
        if self.thread is None and not self.done[item.ranks].is_set():  # --mpi-serial: pytest's own thread
            self._run_group(item.ranks)
        self.done[item.ranks].wait()
        return self.verdicts[(item.ranks, item.inner_id)]

    def stop(self):
        if self.current is not None:
            self.current.kill()

    def _run_group(self, ranks):
        try:
            remaining = list(self.groups[ranks])
            for _ in range(MAX_LAUNCHES):
                if not remaining:
                    break
                launch = Launch(ranks, remaining, self.config.rootpath)
                self.current = launch
                verdicts = launch.run()
                self.current = None
                for inner_id, verdict in verdicts.items():
                    self.verdicts[(ranks, inner_id)] = verdict
                remaining = [item for item in remaining if (ranks, item.inner_id) not in self.verdicts]
            for item in remaining:
                self.verdicts[(ranks, item.inner_id)] = {
                    "outcome": "failed",
                    "text": f"not run: the launches at {ranks} rank(s) failed {MAX_LAUNCHES} times",
                }
        finally:
            self.done[ranks].set()


class Launch:
    """One ``mpiexec -n ranks python -m pytest`` over the given tests, watched test by test."""

    def __init__(self, ranks, items, root):
        self.ranks = ranks
        self.root = Path(root)
        self.items = items
        self.timeouts = {item.inner_id: item.timeout for item in items}
        self.dir = Path(tempfile.mkdtemp(prefix=f"mnframe-mpi-np{ranks}-"))
        self.proc = None

    def command(self):
        modules = sorted({str(Path(item.path).relative_to(self.root)) for item in self.items})
        argv = [mpiexec_path(), "-n", str(self.ranks), sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
        argv += ["-p", "no:randomly", "-p", "mnframe.testing.mpi_inner", "-c", "/dev/null", "--rootdir", str(self.root)]
        argv += ["--confcutdir", str(self.root / "tests" / "mpi"), "-o", "console_output_style=classic", *modules]
        return argv

    def environment(self):
        env = dict(os.environ)
        env.update({"PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", "MNFRAME_MPI_SUITE_DIR": str(self.dir)})
        env.setdefault("MPIR_CVAR_CH3_NOLOCAL", "0")
        return env

    def run(self):
        (self.dir / "ids.txt").write_text("".join(item.inner_id + "\n" for item in self.items))
        log = open(self.dir / "output.log", "w")
        started = time.time()
        self.proc = subprocess.Popen(
            self.command(),
            stdout=log,
            stderr=subprocess.STDOUT,
            env=self.environment(),
            cwd=self.root,
            start_new_session=True,
        )
        hang = None
        try:
            while self.proc.poll() is None:
                hang = self._hang(started)
                if hang:
                    break
                time.sleep(0.5)
        finally:
            self.kill()
            log.close()
        verdicts = self._verdicts()
        culprit = hang[0] if hang else self._current_test(verdicts)
        if culprit == "<start-up>":
            text = self._culprit_text(culprit, hang)
            verdicts.update({item.inner_id: {"outcome": "failed", "text": text} for item in self.items})
        elif culprit is not None and culprit not in verdicts:
            verdicts[culprit] = {"outcome": "failed", "text": self._culprit_text(culprit, hang), "duration": 0.0}
        elif culprit is None and len(verdicts) < len(self.items):
            text = f"the launch at {self.ranks} rank(s) ended before any test:\n{self._log_tail()}"
            verdicts.update({item.inner_id: {"outcome": "failed", "text": text} for item in self.items})
        shutil.rmtree(self.dir, ignore_errors=True)
        return verdicts

    def kill(self):
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            self.proc.wait()

    def _heartbeats(self):
        beats = {}
        for path in self.dir.glob("rank*.now"):
            try:
                beats[int(path.stem[4:])] = json.loads(path.read_text())
            except (ValueError, OSError):
                pass
        return beats

    def _hang(self, started):
        """(test id, heartbeats) of a test past its timeout, or of a launch that never started a test."""
        beats = self._heartbeats()
        now = time.time()
        if not beats:
            return ("<start-up>", beats) if now - started > STARTUP_TIMEOUT else None
        done = set(self._verdicts())
        for beat in beats.values():
            timeout = self.timeouts.get(beat["id"], DEFAULT_TIMEOUT)
            if beat["id"] not in done and now - beat["started"] > timeout:
                return (beat["id"], beats)
        return None

    def _verdicts(self):
        verdicts = {}
        path = self.dir / "results.jsonl"
        if path.exists():
            for line in path.read_text().splitlines():
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue  # a line cut by the kill
                verdicts[entry["id"]] = entry
        return verdicts

    def _current_test(self, verdicts):
        """The test the ranks were in when the launch ended, if it has no verdict."""
        for beat in sorted(self._heartbeats().items()):
            if beat[1]["id"] not in verdicts:
                return beat[1]["id"]
        return None

    def _culprit_text(self, culprit, hang):
        lines = []
        if hang:
            what = "start-up" if culprit == "<start-up>" else "this test"
            lines.append(f"HUNG: the launch at {self.ranks} rank(s) was killed in {what} after its timeout")
            for rank, beat in sorted(hang[1].items()):
                where = "in the test" if beat["phase"] == "test" else "done, waiting for the other ranks"
                lines.append(f"  rank {rank}: {beat['id']} ({where}, {time.time() - beat['started']:.0f} s)")
        else:
            lines.append(f"the launch at {self.ranks} rank(s) died in this test (exit {self.proc.returncode})")
        for path in sorted(self.dir.glob("failed.rank*.json")):
            try:
                lines.append(json.loads(path.read_text())["text"])
            except (ValueError, OSError):
                pass  # cut by the kill
        lines.append(self._log_tail())
        return "\n".join(lines)

    def _log_tail(self, size=6000):
        try:
            text = (self.dir / "output.log").read_text(errors="replace")
        except OSError:
            return ""
        return "----- output of the launch (tail) -----\n" + text[-size:]
