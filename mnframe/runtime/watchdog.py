"""Collective deadlines: a background thread that turns a silent hang into a report.

Every communication mnframe issues runs inside ``oplog.op(...)``. A daemon
thread per rank looks at the op in flight a few times a second; when one has
run longer than the deadline (default 600 s, ``MNFRAME_COLLECTIVE_TIMEOUT`` or
``set_deadline()``) the rank

1. asks every other rank, over a private duplicate of the communicator, for a
   summary of what it is doing; each rank's watchdog answers and writes
   ``mnframe-timeout-rank<R>.json`` (its last operations and the Python stack of
   its main thread) into the report directory (``set_report_dir()``,
   ``$MNFRAME_RUN_DIR`` or the working directory);
2. names the operation and sorts the ranks into "waiting in the same
   operation", "never arrived" (running Python elsewhere, with its file:line),
   "in a different operation" and "no answer";
3. ends the job with ``ExitStatus.COLLECTIVE_TIMEOUT`` (124).

The same side channel carries an *exit announcement*: a rank whose interpreter
exits (end of script, ``sys.exit(n)`` with any ``n``) tells the others from an
``atexit`` handler. A rank that is then stuck in an operation for more than
``MNFRAME_EXIT_GRACE`` aborts the job (status 1) naming the rank that left, instead
of waiting forever. This is how ``sys.exit(nonzero)`` in a library user's
script ends the job: Python gives an atexit handler no way to read the exit
code, so we detect the consequence (a peer waiting for a rank that is gone).

The end of the job has a deadline too: after announcing its exit, the atexit
handler waits (non-blocking barrier on the side channel) at most
``MNFRAME_EXIT_TIMEOUT`` (default: the collective deadline) for every rank to
reach its own end; ``MPI_Finalize`` (which would block forever on a rank that
never gets there) runs only after that. Past the deadline it asks the missing
ranks where they are and aborts with status 124, naming them.

All of this needs the main thread to release the GIL while it blocks in MPI,
which mpi4py does for its blocking calls, and MPI_THREAD_MULTIPLE (mpi4py's
default request; MPICH provides it). At a lower thread level the deadline still
holds, but each rank reports only its own record and exits are not announced.
"""

import atexit
import json
import linecache
import os
import re
import socket
import sys
import threading
import time
import traceback

from mnframe.runtime import mpi_phase_watch, oplog, settings
from mnframe.runtime.deadline import ENV_TIMEOUT, get_deadline
from mnframe.runtime.deadline import set_deadline as set_deadline  # watchdog.set_deadline(), as documented
from mnframe.runtime.errors import ExitStatus, say

ENV_RUN_DIR = "MNFRAME_RUN_DIR"
ENV_EXIT_GRACE = "MNFRAME_EXIT_GRACE"
ENV_EXIT_TIMEOUT = "MNFRAME_EXIT_TIMEOUT"
DEFAULT_DEADLINE_S = settings.BY_NAME[ENV_TIMEOUT].default_value
POLL_S = 0.2  # how often the thread looks at the op in flight
COLLECT_S = 2.0  # how long a timed-out rank waits for the others' summaries
# How long after a deadline passed a rank ends itself (status 124) if the report and MPI_Abort
# have not ended the job: the side channel can block for good (a send to a dead rank through
# MPICH's OFI tcp provider retries its connection forever, holding MPI's lock), and under srun
# a task that dies does not end the others.
BACKSTOP_S = 20.0
RECORD_PREFIX = "mnframe-timeout-rank"
# mpi4py methods that block: a main thread sitting on a line calling one of these is "blocked in MPI".
MPI_CALLS = frozenset(
    """Barrier barrier Bcast bcast Reduce reduce Allreduce allreduce Gather gather Gatherv
Allgather allgather Allgatherv Scatter scatter Scatterv Alltoall alltoall Alltoallv Reduce_scatter Scan Exscan
Send send Ssend ssend Recv recv Sendrecv sendrecv Probe probe Mprobe Wait wait Waitall waitall Waitany waitany
Dup Split Split_type Create Free Finalize""".split()
)

_TAG_SUMMARY = 7001
_TAG_EXIT = 7002

_settings = {"report_dir": None, "exit_grace": None, "exit_timeout": None}
_active = {"watchdog": None}


def exit_grace():
    """Seconds a rank may stay stuck in an operation after a peer exited (MNFRAME_EXIT_GRACE)."""
    if _settings["exit_grace"] is None:
        _settings["exit_grace"] = settings.parse(ENV_EXIT_GRACE)
    return _settings["exit_grace"]


def exit_timeout():
    """Seconds a rank at exit waits for the others (MNFRAME_EXIT_TIMEOUT, else the deadline; 0: forever)."""
    if _settings["exit_timeout"] is None:
        value = settings.parse(ENV_EXIT_TIMEOUT)
        _settings["exit_timeout"] = get_deadline() if value is None else value
    return _settings["exit_timeout"]


def set_report_dir(path):
    """Directory where timeout records are written (the run directory)."""
    _settings["report_dir"] = os.fspath(path)


def report_dir():
    return _settings["report_dir"] or os.environ.get(ENV_RUN_DIR) or os.getcwd()


def _main_thread_stack():
    frame = sys._current_frames().get(threading.main_thread().ident)
    return "".join(traceback.format_stack(frame)) if frame is not None else None


def _user_location():
    """file:line (function) of the innermost main-thread frame outside mnframe and MPI."""
    frame = sys._current_frames().get(threading.main_thread().ident)
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    while frame is not None:
        fname = frame.f_code.co_filename
        if not fname.startswith(pkg) and not fname.endswith(("threading.py", "contextlib.py")):
            return f"{fname}:{frame.f_lineno} in {frame.f_code.co_name}"
        frame = frame.f_back
    return None


def _innermost_frame():
    return sys._current_frames().get(threading.main_thread().ident)


def _blocked_call(samples=3, interval=0.05):
    """What the main thread is blocked in, or None if it is running Python.

    A thread that sits on one bytecode instruction of one frame for the whole
    sampling window is inside a native call (MPI, sleep, I/O). The call is named
    from the source line: 'the MPI call Barrier' when the line calls a blocking
    mpi4py method, else 'a native call'.
    """
    seen = set()
    frame = None
    for i in range(samples):
        frame = _innermost_frame()
        if frame is None:
            return None
        seen.add((id(frame), frame.f_lasti))
        if len(seen) > 1:
            return None
        if i + 1 < samples:
            time.sleep(interval)
    fname, lineno = frame.f_code.co_filename, frame.f_lineno
    line = linecache.getline(fname, lineno).strip()
    called = [m for m in re.findall(r"\.?\b(\w+)\s*\(", line) if m in MPI_CALLS]
    what = f"the MPI call {called[-1]}" if called else "a native call"
    source = f" (`{line}`)" if line else ""
    return f"blocked in {what} at {fname}:{lineno} in {frame.f_code.co_name}{source}"


def describe_activity(summary):
    """What a rank outside any mnframe operation is doing, from its summary."""
    if summary.get("exiting"):
        return "finished its script (waiting at exit)"
    if summary.get("blocked"):
        return summary["blocked"]
    return f"running Python at {summary.get('where')}"


def _brief(rec):
    if rec is None:
        return None
    d = rec.as_dict() if hasattr(rec, "as_dict") else dict(rec)
    d.pop("stack", None)
    return d


def describe_op(d):
    """'allreduce (seq 42, shape (3,), float32, peer 1)' from a record dict."""
    if d is None:
        return "nothing"
    parts = [f"seq {d['seq']}"]
    if d.get("shape") is not None:
        parts.append(f"shape {tuple(d['shape'])}")
    if d.get("dtype"):
        parts.append(str(d["dtype"]))
    if d.get("peer") is not None:
        parts.append(f"peer {d['peer']}")
    return f"{d['op']} ({', '.join(parts)})"


class Watchdog:
    """The per-rank deadline thread and its side channel (a Dup of the communicator)."""

    def __init__(self, mpi_comm):
        from mpi4py import MPI

        # The side channel needs MPI_THREAD_MULTIPLE (mpi4py's default request). Without it
        # the thread still enforces deadlines, but reports only this rank's own record.
        self.side_channel = MPI.Query_thread() == MPI.THREAD_MULTIPLE
        # Dup is collective: every rank of mpi_comm creates its watchdog together.
        self.comm = mpi_comm.Dup() if self.side_channel else mpi_comm
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()
        # Every rank's host, learnt now while all answer: a rank that later goes silent (its node
        # died or its link was cut) can then still be named by its node in the report.
        self.hosts = self.comm.allgather(socket.gethostname()) if self.size > 1 else [socket.gethostname()]
        self.summaries = {}
        self.exited = {}
        self.exiting = False
        get_deadline(), exit_grace(), exit_timeout()  # parsed here (main thread), never in the thread
        self._responded = False
        self._backstop_armed = False
        self._pending = []
        self._stop = threading.Event()
        self._lock = threading.Lock()  # the side channel is used by the thread, or by atexit after it stopped
        self._thread = threading.Thread(target=self._run, name="mnframe-watchdog", daemon=True)

    # -- thread ---------------------------------------------------------------
    def start(self):
        self._thread.start()
        threading.Thread(target=self._backstop_watch, name="mnframe-watchdog-backstop-watch", daemon=True).start()
        return self

    def _backstop_watch(self):
        """Arm the backstop when the op in flight is past its deadline, without any MPI call: the
        watchdog thread itself may be stuck waiting for MPI's lock (held by a main thread whose
        send to a dead rank never completes), so it would never see the deadline pass."""
        while not self._stop.wait(1.0):
            cur = oplog.get_log().current
            deadline = get_deadline()
            if cur is not None and deadline and time.monotonic() - cur.start > deadline + 1.0:
                self._arm_backstop(f"{describe_op(_brief(cur))} passed its {deadline:g} s deadline")
                return

    def stop(self):
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=2 * POLL_S + 1)

    def _run(self):
        while not self._stop.wait(POLL_S):
            try:
                with self._lock:
                    self._tick()
            except Exception:  # a bug here must not take training down; say it once and stop watching
                sys.stderr.write(
                    "mnframe watchdog: internal error, collective deadlines are off:\n" + traceback.format_exc()
                )
                return

    def _tick(self):
        self._drain()
        cur = oplog.get_log().current
        if cur is None:
            return
        now = time.monotonic()
        deadline = get_deadline()
        if deadline and now - cur.start > deadline:
            self._arm_backstop(
                f"{describe_op(_brief(cur))} has waited {now - cur.start:.1f} s, past its {deadline:g} s deadline"
            )
            self._on_timeout(deadline)
        if self.exited:
            first_exit = min(t for t, _ in self.exited.values())
            if now - max(cur.start, first_exit) > exit_grace():
                self._on_peer_exit(cur)

    def _arm_backstop(self, what):
        """End this rank (status 124) ``BACKSTOP_S`` s from now unless the report has ended the
        job by then. Uses no MPI (its lock may be held by a blocked send): one line, then
        ``os._exit``. Every rank left does the same, so the job ends under any launcher. Armed
        once, before this rank first uses the side channel for a report (its own or a peer's)."""
        if self._backstop_armed:
            return
        self._backstop_armed = True

        def fire():
            time.sleep(BACKSTOP_S)
            from mnframe.runtime import guard

            say(
                f"\nmnframe: collective timeout on rank {self.rank}/{self.size} on host {self.hosts[self.rank]} "
                f"(pid {os.getpid()}): {what}, and the report could not be completed within "
                f"{BACKSTOP_S:g} s (a rank is likely dead: look for the launcher's line naming a killed "
                f"task); ending this rank with status {int(ExitStatus.COLLECTIVE_TIMEOUT)}."
            )
            guard._flush_all()
            guard._sentinel_explained()
            os._exit(int(ExitStatus.COLLECTIVE_TIMEOUT))

        try:
            threading.Thread(target=fire, name="mnframe-watchdog-backstop", daemon=True).start()
        except RuntimeError:  # at interpreter shutdown (the exit deadline runs at exit): no new threads
            # faulthandler's timer is a C thread: it dumps the stacks and ends the process (status 1)
            import faulthandler

            faulthandler.dump_traceback_later(BACKSTOP_S, exit=True)

    # -- side channel ---------------------------------------------------------
    def _send_all(self, obj, tag):
        if not self.side_channel:
            return
        for r in range(self.size):
            if r != self.rank:
                self._pending.append(self.comm.isend(obj, dest=r, tag=tag))
        self._pending = [q for q in self._pending if not q.Test()]

    def _drain(self):
        if not self.side_channel:
            return
        from mpi4py import MPI

        status = MPI.Status()
        while self.comm.Iprobe(source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG, status=status):
            src, tag = status.Get_source(), status.Get_tag()
            msg = self.comm.recv(source=src, tag=tag)
            if tag == _TAG_EXIT:
                self.exited.setdefault(src, (time.monotonic(), msg))
            elif tag == _TAG_SUMMARY:
                self.summaries[src] = msg
                if not self._responded:
                    self._arm_backstop(f"rank {src} passed a deadline and asked this rank what it is doing")
                    self._respond(timed_out=False)

    def summary(self, timed_out):
        log = oplog.get_log()
        return {
            "rank": self.rank,
            "size": self.size,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "timed_out": timed_out,
            "current": _brief(log.current),
            "last": _brief(log.history[-1]) if log.history else None,
            "where": _user_location(),
            "time": time.time(),
            "exiting": self.exiting,
            "blocked": None if (log.current is not None or self.exiting) else _blocked_call(),
        }

    def _respond(self, timed_out):
        """Write this rank's record and send its summary to every rank.

        The record is written first: the summary lets the reporting rank abort
        the job, which may kill this rank before it writes anything else.
        """
        self._responded = True
        summary = self.summary(timed_out)
        write_record(summary, self.rank)
        self._send_all(summary, _TAG_SUMMARY)
        return summary

    # -- verdicts -------------------------------------------------------------
    def _on_timeout(self, deadline):
        mine = self._respond(timed_out=True)
        end = time.monotonic() + COLLECT_S
        while self.side_channel and len(self.summaries) < self.size - 1 and time.monotonic() < end:
            time.sleep(0.05)
            self._drain()
        summaries = dict(self.summaries)
        summaries[self.rank] = mine
        text = timeout_report(summaries, self.size, self.rank, deadline, report_dir(), self.hosts)
        reporters = [r for r, s in summaries.items() if s.get("timed_out")]
        from mnframe.runtime import guard

        if min(reporters) == self.rank:
            guard.abort(ExitStatus.COLLECTIVE_TIMEOUT, text)
        # another rank prints the full report; give it a moment, then make sure we end too
        say(
            f"mnframe: {guard.where()}: {describe_op(mine['current'])} passed its "
            f"deadline too; see rank {min(reporters)}'s report"
        )
        time.sleep(COLLECT_S)
        guard.abort(ExitStatus.COLLECTIVE_TIMEOUT)

    def _on_peer_exit(self, cur):
        from mnframe.runtime import guard

        gone = ", ".join(
            f"rank {r} (host {m.get('host')}, pid {m.get('pid')})" for r, (_, m) in sorted(self.exited.items())
        )
        guard.abort(
            ExitStatus.ERROR,
            f"\nmnframe: {gone} exited (its interpreter ran its exit handlers: end of script "
            f"or sys.exit) while {guard.where()} is waiting in {describe_op(_brief(cur))}. "
            f"Aborting the job instead of hanging. Look at that rank's output for why it left; "
            f"every rank must issue the same communication operations.\n",
        )

    def announce_exit(self):
        """Tell every other rank that this interpreter is exiting (atexit)."""
        self.stop()
        with self._lock:
            self.exiting = True
            try:
                self._send_all({"host": socket.gethostname(), "pid": os.getpid()}, _TAG_EXIT)
                end = time.monotonic() + 1.0
                while self._pending and time.monotonic() < end:
                    self._pending = [q for q in self._pending if not q.Test()]
                    time.sleep(0.01)
            except Exception:
                pass

    def wait_for_everyone(self, timeout):
        """Wait until every rank reached its exit, at most ``timeout`` s (0: forever); else abort (124).

        A non-blocking barrier on the side channel: MPI_Finalize, which runs after
        this, would block without a limit on a rank that never gets there.
        """
        if not self.side_channel or self.size == 1:
            return
        with self._lock:
            start = time.monotonic()
            req = self.comm.Ibarrier()
            while not req.Test():
                self._drain()  # answer a peer's timeout report; note who else reached exit
                if timeout and time.monotonic() - start > timeout:
                    self._on_exit_deadline(timeout)
                time.sleep(0.02)

    def _on_exit_deadline(self, timeout):
        self._arm_backstop(f"the end of the job has waited {timeout:g} s for the other ranks")
        mine = self._respond(timed_out=True)
        finished = set(self.exited) | {self.rank}
        missing = [r for r in range(self.size) if r not in finished]
        end = time.monotonic() + COLLECT_S
        while any(r not in self.summaries for r in missing) and time.monotonic() < end:
            time.sleep(0.05)
            self._drain()
        finished = set(self.exited) | {self.rank}
        summaries = dict(self.summaries)
        summaries[self.rank] = mine
        from mnframe.runtime import guard

        if min(finished) == self.rank:
            guard.abort(
                ExitStatus.COLLECTIVE_TIMEOUT,
                exit_report(summaries, finished, self.size, self.rank, timeout, report_dir(), self.hosts),
            )
        time.sleep(COLLECT_S)  # the lowest finished rank prints the report and aborts the job
        guard.abort(ExitStatus.COLLECTIVE_TIMEOUT)


def write_record(summary, rank):
    """Write this rank's timeout record (history, op in flight, main-thread stack) as JSON."""
    record = dict(summary)
    stack = _main_thread_stack()
    current = oplog.get_log().current
    if current is not None and current.stack is None:
        current.stack = stack  # else snapshot() would record this (watchdog) thread's stack
    record["operations"] = oplog.get_log().snapshot()
    record["main_thread_stack"] = stack
    path = os.path.join(report_dir(), f"{RECORD_PREFIX}{rank}.json")
    try:
        os.makedirs(report_dir(), exist_ok=True)
        from mnframe.runtime.fs import atomic_write_text

        atomic_write_text(path, json.dumps(record, indent=1, default=str), fsync=False)
    except Exception as exc:  # reporting must never prevent the abort
        sys.stderr.write(f"mnframe watchdog: could not write {path}: {exc}\n")
    return path


def ranks_by_host(ranks, hosts=None):
    """'4, 5 on node3; 6 on node4' (hosts: every rank's host, or None: '4, 5, 6')."""
    if not hosts:
        return ", ".join(map(str, ranks))
    groups = {}
    for r in ranks:
        groups.setdefault(hosts[r] if r < len(hosts) else "?", []).append(r)
    return "; ".join(f"{', '.join(map(str, rs))} on {host}" for host, rs in groups.items())


def silent_nodes(silent, hosts=None):
    """The hosts none of whose ranks answered (a node lost or cut off), in rank order."""
    if not hosts or not silent:
        return []
    quiet = set(silent)
    found = []
    for r in sorted(quiet):
        host = hosts[r] if r < len(hosts) else None
        if host and host not in found and all(q in quiet for q, h in enumerate(hosts) if h == host):
            found.append(host)
    return found


def timeout_report(summaries, size, rank, deadline, directory, hosts=None):
    """The human-readable verdict: the operation and which ranks never arrived, and on which nodes
    (``hosts``, every rank's host as learnt at start, names even the ranks that no longer answer)."""
    me = summaries[rank]
    op = me["current"]
    same, elsewhere, never, silent = [], [], [], []
    for r in range(size):
        s = summaries.get(r)
        if s is None:
            silent.append(r)
        elif s["current"] is None:
            never.append(s)
        elif s["current"]["op"] == op["op"]:
            same.append(r)
        else:
            elsewhere.append(s)
    lines = [
        f"\n{'*' * 72}",
        f"mnframe: collective timeout: {describe_op(op)} on rank {rank} has waited "
        f"{op['elapsed_s']:.1f} s, past its {deadline:g} s deadline "
        f"(set {ENV_TIMEOUT} or mnframe.runtime.watchdog.set_deadline()).",
        f"  waiting in {op['op']}: ranks {', '.join(map(str, same))}",
    ]
    for s in never:
        lines.append(
            f"  never arrived: rank {s['rank']} (host {s['host']}, pid {s['pid']}), "
            f"{describe_activity(s)}; its last finished operation: {describe_op(s['last'])}"
        )
    for s in elsewhere:
        lines.append(f"  in a different operation: rank {s['rank']} in {describe_op(s['current'])}")
    if silent:
        lines.append(
            f"  no answer from ranks {ranks_by_host(silent, hosts)} (dead, or busy in native "
            f"code without releasing the GIL)"
        )
    if never or elsewhere or silent:
        missing = sorted([s["rank"] for s in never] + [s["rank"] for s in elsewhere] + silent)
        lines.append(f"  => ranks that never arrived in {op['op']}: {', '.join(map(str, missing))}")
    lost = silent_nodes(silent, hosts)
    if lost:
        lines.append(f"  => no rank answered on {', '.join(lost)}: that node is down or its network link is cut")
    lines.append(
        f"  per-rank records (last operations, Python stacks): {os.path.join(directory, RECORD_PREFIX)}<rank>.json"
    )
    lines.append(f"{'*' * 72}\n")
    return "\n".join(lines)


def exit_report(summaries, finished, size, rank, timeout, directory, hosts=None):
    """The verdict when ranks reached the end of the job but others did not, within the exit deadline."""
    me = summaries[rank]
    lines = [
        f"\n{'*' * 72}",
        f"mnframe: exit deadline: rank {rank} (host {me['host']}, pid {me['pid']}) reached the end of "
        f"its script and waited {timeout:g} s for the other ranks to get there "
        f"(set {ENV_EXIT_TIMEOUT}; default: the collective deadline {ENV_TIMEOUT}).",
        f"  finished: ranks {', '.join(map(str, sorted(finished)))}",
    ]
    for r in range(size):
        if r in finished:
            continue
        s = summaries.get(r)
        if s is None:
            lines.append(
                f"  did not finish: rank {r}{f' (host {hosts[r]})' if hosts else ''}, no answer "
                f"(dead, or busy in native code without releasing the GIL)"
            )
        elif s.get("current") is not None:
            lines.append(
                f"  did not finish: rank {r} (host {s['host']}, pid {s['pid']}), waiting in "
                f"{describe_op(s['current'])} that no finished rank will join"
            )
        else:
            lines.append(
                f"  did not finish: rank {r} (host {s['host']}, pid {s['pid']}), "
                f"{describe_activity(s)}; its last finished operation: {describe_op(s['last'])}"
            )
    missing = [r for r in range(size) if r not in finished]
    lines.append(
        f"  => ranks that never reached the end: {', '.join(map(str, missing))}; aborting the job "
        f"(exit status {int(ExitStatus.COLLECTIVE_TIMEOUT)})"
    )
    lines.append(
        f"  per-rank records (last operations, Python stacks): {os.path.join(directory, RECORD_PREFIX)}<rank>.json"
    )
    lines.append(f"{'*' * 72}\n")
    return "\n".join(lines)


def start(mpi_comm):
    """Start this process's watchdog on ``mpi_comm`` (collective; once per process)."""
    if _active["watchdog"] is None:
        from mnframe.runtime import sentinel

        several = mpi_comm.Get_size() > 1
        if several:
            sentinel.start(mpi_comm.Get_rank())  # its interpreter starts while the watchdog does
        _active["watchdog"] = Watchdog(mpi_comm).start()
        atexit.register(_announce_exit_at_exit)
        if several:
            sentinel.wait_ready()
    return _active["watchdog"]


def current():
    return _active["watchdog"]


def stop():
    """Stop the thread without announcing anything (used before a coordinated exit)."""
    wd = _active["watchdog"]
    if wd is not None:
        wd.stop()


def _announce_exit_at_exit():
    wd = _active["watchdog"]
    mpi = sys.modules.get("mpi4py.MPI")
    from mnframe.runtime import sentinel

    if wd is None or mpi is None or mpi.Is_finalized():
        sentinel.explained()
        return
    wd.announce_exit()
    wd.wait_for_everyone(exit_timeout())
    mpi_phase_watch.ending()  # what follows (window frees, MPI_Finalize) has a deadline kept outside MPI
    shm = sys.modules.get("mnframe.communicators.shm")
    if shm is not None:
        shm.free_all()  # every rank is here: collective frees are safe (OFI's MPI_Finalize needs them)
    sentinel.explained()  # every rank got here: what follows is MPI_Finalize
