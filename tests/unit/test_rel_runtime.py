"""mnframe.runtime without MPI: exit statuses, deadlines, timeout report, debug-mode helpers."""

import sys
import threading
from unittest import mock

import pytest

from mnframe.runtime import collective_check, deadline, guard, watchdog
from mnframe.runtime.errors import CollectiveTimeout, ConfigError, ExitStatus, say


def test_exit_status_table():
    assert [int(s) for s in ExitStatus] == [0, 1, 2, 3, 4, 124, 130]
    assert guard.status_for(ValueError()) == 1
    assert guard.status_for(ConfigError("x")) == 2
    assert guard.status_for(CollectiveTimeout("x")) == 124
    assert guard.status_for(KeyboardInterrupt()) == 130
    assert guard.status_for(SystemExit(3)) == 3
    assert guard.status_for(SystemExit()) == 0
    assert guard.status_for(SystemExit("message")) == 1


def test_say_writes_the_line_and_its_newline_in_one_write():
    """Under PYTHONUNBUFFERED=1 print's newline is a write of its own, and the launcher joined two
    ranks' lines into one (CI: test_tune_with_sqlalchemy_2_names_the_environment_problem)."""
    stream = mock.Mock()
    say("mnframe: environment problem: x", stream)
    stream.write.assert_called_once_with("mnframe: environment problem: x\n")  # one write, newline included


def test_run_main_success_and_clean_exit(monkeypatch):
    # run_main installs the process-wide hooks: keep them out of the rest of the session
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)
    monkeypatch.setattr(threading, "excepthook", threading.excepthook)
    monkeypatch.setattr(guard, "_installed", guard._installed)
    assert guard.run_main(lambda: None) == 0
    assert guard.run_main(lambda: exec("raise SystemExit(0)")) == 0


def test_deadline_settings(monkeypatch):
    monkeypatch.setitem(deadline._state, "deadline", None)
    monkeypatch.setenv(watchdog.ENV_TIMEOUT, "7.5")
    assert watchdog.get_deadline() == 7.5
    watchdog.set_deadline(None)
    assert watchdog.get_deadline() == 0.0
    with pytest.raises(ValueError):
        watchdog.set_deadline(-1)
    monkeypatch.setitem(deadline._state, "deadline", None)
    monkeypatch.setenv(watchdog.ENV_TIMEOUT, "ten")
    with pytest.raises(ValueError, match="MNFRAME_COLLECTIVE_TIMEOUT"):
        watchdog.get_deadline()


def test_report_dir(monkeypatch, tmp_path):
    monkeypatch.setitem(watchdog._settings, "report_dir", None)
    monkeypatch.setenv(watchdog.ENV_RUN_DIR, str(tmp_path))
    assert watchdog.report_dir() == str(tmp_path)
    watchdog.set_report_dir(tmp_path / "x")
    assert watchdog.report_dir() == str(tmp_path / "x")


def _op(seq, name="allreduce"):
    return {"seq": seq, "op": name, "shape": (3,), "dtype": "float32", "peer": None, "elapsed_s": 5.2}


def test_timeout_report_names_ranks():
    summaries = {
        0: {"rank": 0, "host": "a", "pid": 1, "current": _op(4), "last": _op(3), "where": "x.py:1"},
        2: {"rank": 2, "host": "a", "pid": 3, "current": _op(4), "last": _op(3), "where": "x.py:1"},
        1: {"rank": 1, "host": "b", "pid": 2, "current": None, "last": _op(3), "where": "train.py:33 in f"},
        3: {"rank": 3, "host": "b", "pid": 4, "current": _op(2, "bcast"), "last": None, "where": None},
    }
    text = watchdog.timeout_report(summaries, 5, 0, 5.0, "/run")
    assert "allreduce (seq 4, shape (3,), float32) on rank 0 has waited 5.2 s" in text
    assert "waiting in allreduce: ranks 0, 2" in text
    assert "never arrived: rank 1 (host b, pid 2), running Python at train.py:33 in f" in text
    assert "in a different operation: rank 3 in bcast (seq 2" in text
    assert "no answer from ranks 4" in text
    assert "ranks that never arrived in allreduce: 1, 3, 4" in text
    assert "/run/mnframe-timeout-rank<rank>.json" in text
    assert "no rank answered on" not in text  # hosts unknown: ranks only


def test_timeout_report_names_the_nodes_of_silent_ranks():
    """A node lost (dead, link cut): its ranks never answer, yet the report names the node, from
    the hosts every rank learnt at start (issue 39: a collective timeout names the missing node)."""
    hosts = ["node1", "node1", "node2", "node2", "node3", "node3"]
    summaries = {r: {"rank": r, "host": hosts[r], "pid": r, "current": _op(4), "last": _op(3)} for r in (0, 1, 4, 5)}
    text = watchdog.timeout_report(summaries, 6, 0, 5.0, "/run", hosts)
    assert "no answer from ranks 2, 3 on node2 (dead" in text
    assert "ranks that never arrived in allreduce: 2, 3" in text
    assert "=> no rank answered on node2: that node is down or its network link is cut" in text
    assert watchdog.ranks_by_host([1, 4, 5], hosts) == "1 on node1; 4, 5 on node3"
    # a node with one rank answering is not lost: only its silent rank is named
    assert watchdog.silent_nodes([1, 4, 5], hosts) == ["node3"] and watchdog.silent_nodes([1], None) == []
    text = watchdog.exit_report({0: {"host": "node1", "pid": 1}}, {0, 1}, 3, 0, 5.0, "/run", hosts[:3])
    assert "did not finish: rank 2 (host node2), no answer" in text


def test_debug_point_to_point_names():
    assert collective_check.is_point_to_point("send") and collective_check.is_point_to_point("scatter_dataset.recv_len")
    assert not collective_check.is_point_to_point("allreduce") and not collective_check.is_point_to_point("bcast")


def test_no_guard_opt_out(monkeypatch):
    import types

    from mnframe.runtime import activation

    monkeypatch.setitem(activation._done, "activated", False)
    monkeypatch.setitem(activation._done, "validated", False)
    # Earlier tests in this process may have started a watchdog: start from none.
    monkeypatch.setitem(watchdog._active, "watchdog", None)
    monkeypatch.setenv(activation.ENV_NO_GUARD, "1")
    rank0 = types.SimpleNamespace(Get_rank=lambda: 0, Allreduce=None)  # validation only asks the rank
    activation.on_communicator_created(rank0)  # would fail on a real start: nothing happens
    assert not activation.activated() and watchdog.current() is None


def test_preemption_agree_on_one_rank_needs_no_collective():
    """One rank decides alone (agree is called every iteration, so it skips the allreduce)."""
    from mpi4py import MPI

    from mnframe.runtime import preemption

    class NoCollectives:  # a one-rank communicator that fails on any collective
        def Get_rank(self):
            return 0

        def Get_size(self):
            return 1

        def Allreduce(self, *args, **kwargs):
            raise AssertionError("agree() on one rank must not communicate")

    saved = dict(preemption._state)
    try:
        assert preemption.agree(NoCollectives()) is False and not preemption.preempted()
        preemption.request()
        assert preemption.agree(NoCollectives()) is True and preemption.preempted()
        assert preemption.agree(MPI.COMM_SELF) is True
    finally:
        preemption._flag.clear()
        preemption._state.update(saved)


def test_import_hook_is_inert_without_mpi_and_the_guard_chains_past_it(monkeypatch):
    """``import mnframe`` installs early_hook; without a running MPI job it only calls the previous hook."""
    from mnframe.runtime import early_hook

    calls = []

    def users_hook(*args):
        calls.append(args[0])

    monkeypatch.setattr(sys, "excepthook", users_hook)
    monkeypatch.setattr(early_hook._hook, "previous", sys.__excepthook__)
    early_hook.install()
    assert sys.excepthook is early_hook._hook
    monkeypatch.setattr(early_hook, "_mpi_job_running", lambda: False)
    sys.excepthook(ValueError, ValueError("x"), None)
    assert calls == [ValueError]
    # the guard, installed later, chains to the user's hook, not to early_hook (no double handling)
    from mnframe.runtime import guard

    assert guard.previous_of(sys.excepthook) is users_hook


def test_import_mnframe_stays_cheap():
    import subprocess

    code = "import sys, mnframe; print(sorted(m for m in ('mpi4py', 'chainer', 'socket') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr
