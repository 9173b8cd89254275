"""Reliability tests that start their own MPI jobs (issue 7): fail fast, collective
timeouts, exit statuses, preemption, crash-safe checkpoints and exact resume.

Every job runs a tiny data-parallel Chainer script (TRAIN_SCRIPT below, written
into the test's directory) through ``run_mpi`` with an outer timeout; run_mpi
kills the process group afterwards, so no rank outlives a test.
"""

import json
import os
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from mnframe.testing import run_mpi

REPO = Path(__file__).resolve().parent.parent
OUTER_TIMEOUT = 90

TRAIN_SCRIPT = r'''
"""A tiny data-parallel Chainer job driven by environment variables (mnframe reliability tests).

RUN_DIR, ITERS (20), INTERVAL (5), ITER_SLEEP (0), RESUME (auto)
FAIL_STAGE=config|configerror|model|iteration|checkpoint|killsave|evaluation, FAIL_RANK, FAIL_ITER
(killsave: SIGKILL that rank while it writes its KILL_SAVE_N-th checkpoint file, default 3)
KILL_RANK/KILL_AT: SIGKILL that rank after iteration KILL_AT
STOP_RANK/STOP_AT: that rank sleeps forever before iteration STOP_AT's update (collective timeout test)
EXIT_RANK/EXIT_AT/EXIT_CODE: that rank calls sys.exit(EXIT_CODE) at iteration EXIT_AT
SCATTER_SEED (0; "none": ChainerMN's MNIST pattern, scatter_dataset(shuffle=True) without a seed)
ITERATOR=global: SerialIterator(data, 4), shuffled by the global NumPy generator (ChainerMN's examples)
DUMP_AT/DUMP_TAG: write params.<DUMP_TAG>.rank<R>.npz after iteration DUMP_AT
FULL_RANK/FULL_AT: that rank's files may hold at most 4 KiB from iteration FULL_AT on (a full disk)
"""
import json
import os
import random
import signal
import sys
import time

import mnframe  # before chainer, as a script on NumPy 2 must (mnframe/_internal/numpy_compat.py)

import chainer
import chainer.functions as F
import chainer.links as L
import numpy as np
from chainer import training

from mnframe.checkpoint import CheckpointConfig, attach
from mnframe.runtime.errors import ConfigError

env = os.environ.get
RUN_DIR = env("RUN_DIR", ".")
ITERS = int(env("ITERS", "20"))
STAGE = env("FAIL_STAGE", "")
FAIL_RANK = int(env("FAIL_RANK", "-1"))
FAIL_ITER = int(env("FAIL_ITER", "3"))

comm = mnframe.create_communicator("naive")
rank = comm.rank
with open(os.path.join(RUN_DIR, f"pid.rank{rank}"), "w") as f:
    f.write(str(os.getpid()))


def mark(what):
    """Record when an injected event happens (the tests measure time to job exit from it)."""
    with open(os.path.join(RUN_DIR, f"{what}.rank{rank}"), "w") as f:
        f.write(repr(time.time()))


def fail_here(stage):
    if STAGE == stage and rank == FAIL_RANK:
        mark("failed")
        raise RuntimeError(f"injected failure during {stage} on rank {rank}")


if STAGE == "configerror":
    raise ConfigError("injected: learning rate must be positive (set optimizer.lr > 0)")
fail_here("config")

np.random.seed(100 + rank)
random.seed(200 + rank)


SAVES = [0]


class Net(chainer.Chain):
    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.l1 = L.Linear(4, 8, initialW=chainer.initializers.Normal(0.5, dtype=np.float32))
            self.l2 = L.Linear(8, 3, initialW=chainer.initializers.Normal(0.5, dtype=np.float32))

    def forward(self, x):
        if not chainer.config.train:
            fail_here("evaluation")
        h = F.relu(self.l1(x))
        h = F.dropout(h, 0.3)  # global NumPy RNG: part of what exact resume must restore
        return self.l2(h)

    def serialize(self, serializer):
        if isinstance(serializer, chainer.serializer.Serializer):
            fail_here("checkpoint")
            SAVES[0] += 1
            if STAGE == "killsave" and rank == FAIL_RANK and SAVES[0] == int(env("KILL_SAVE_N", "3")):
                os.kill(os.getpid(), signal.SIGKILL)
        super().serialize(serializer)


fail_here("model")
model = L.Classifier(Net())
optimizer = mnframe.create_multi_node_optimizer(chainer.optimizers.MomentumSGD(lr=0.05), comm)
optimizer.setup(model)

if rank == 0:
    rs = np.random.RandomState(0)
    x = rs.randn(96, 4).astype(np.float32)
    y = (x[:, 0] + x[:, 1] > 0).astype(np.int32) + (x[:, 2] > 1).astype(np.int32)
    data = chainer.datasets.TupleDataset(x, y)
else:
    data = None
seed = None if env("SCATTER_SEED", "0") == "none" else int(env("SCATTER_SEED", "0"))
data = mnframe.scatter_dataset(data, comm, shuffle=True, seed=seed)
if env("ITERATOR") == "global":
    it = chainer.iterators.SerialIterator(data, 4)
else:
    it = chainer.iterators.SerialIterator(
        data, 4, order_sampler=chainer.iterators.ShuffleOrderSampler(np.random.RandomState(300 + rank)))
updater = training.StandardUpdater(it, optimizer)
trainer = training.Trainer(updater, (ITERS, "iteration"), out=RUN_DIR)


@training.make_extension(trigger=(1, "iteration"), priority=training.PRIORITY_WRITER)
def hooks(trainer):
    i = trainer.updater.iteration
    loss = float(trainer.observation["main/loss"].array)
    with open(os.path.join(RUN_DIR, f"loss.rank{rank}.txt"), "a") as f:
        f.write(f"{i} {loss!r}\n")
    if i == int(env("DUMP_AT", "-1")):
        np.savez(os.path.join(RUN_DIR, f"params.{env('DUMP_TAG')}.rank{rank}.npz"),
                 **{name: p.array for name, p in model.namedparams()})
    if int(env("FULL_RANK", "-1")) == rank and i == int(env("FULL_AT", "-1")):
        import resource
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # writes past the limit fail with EFBIG instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
    if i == FAIL_ITER:
        fail_here("iteration")
    if int(env("KILL_RANK", "-1")) == rank and i == int(env("KILL_AT", "-1")):
        os.kill(os.getpid(), signal.SIGKILL)
    if int(env("STOP_RANK", "-1")) == rank and i + 1 == int(env("STOP_AT", "-1")):
        mark("stopped")
        time.sleep(600)
    if int(env("EXIT_RANK", "-1")) == rank and i == int(env("EXIT_AT", "-1")):
        mark("exited")
        sys.exit(int(env("EXIT_CODE", "3")))
    if float(env("ITER_SLEEP", "0")):
        time.sleep(float(env("ITER_SLEEP")))


trainer.extend(hooks)
if STAGE == "evaluation":
    ev = chainer.training.extensions.Evaluator(
        chainer.iterators.SerialIterator(data, 8, repeat=False, shuffle=False), model)
    trainer.extend(mnframe.create_multi_node_evaluator(ev, comm), trigger=(FAIL_ITER, "iteration"))

cfg = CheckpointConfig(interval=int(env("INTERVAL", "5")), keep=int(env("KEEP", "3")), load=env("LOAD") or None)
ckpt = attach(trainer, cfg, RUN_DIR, comm, config_hash="h1", config={"model": {"units": 8}},
              resume=env("RESUME", "auto"))
trainer.run()
np.savez(os.path.join(RUN_DIR, f"params.rank{rank}.npz"),
         **{name: p.array for name, p in model.namedparams()})
with open(os.path.join(RUN_DIR, f"done.rank{rank}.json"), "w") as f:
    json.dump({"iteration": trainer.updater.iteration, "resumed_from": ckpt.resumed_from,
               "preempted": ckpt.preempted}, f)
'''


# A job without Chainer training (starts in ~2 s): argv[1] picks what goes wrong.
LIGHT_SCRIPT = r"""
import sys, threading, time
import numpy as np
import mnframe
comm = mnframe.create_communicator("naive")
mode = sys.argv[1]
x = np.ones(3, np.float32) * (comm.rank + 1)
comm.allreduce(x)
if mode == "thread" and comm.rank == comm.size - 1:
    threading.Thread(target=lambda: 1 / 0, name="loader").start()
if mode == "keyboard" and comm.rank == 0:
    raise KeyboardInterrupt
if mode == "diverge":  # rank 0 broadcasts while the others reduce: a deadlock without debug mode
    comm.bcast(x) if comm.rank == 0 else comm.allreduce(x)
comm.allreduce(x)
time.sleep(0.5)
comm.allreduce(x)
open(f"finished.{comm.rank}", "w").close()
"""


def _light(tmp_path, n, mode, **env):
    script = tmp_path / "light.py"
    script.write_text(LIGHT_SCRIPT)
    full_env = {"PYTHONPATH": str(REPO), **{k: str(v) for k, v in env.items()}}
    result = run_mpi([str(script), mode], n=n, timeout=60, env=full_env, cwd=str(tmp_path))
    assert not result.timed_out, result.output[-3000:]
    return result


# The CLI's entry: run_main maps how main ends onto the exit status.
RUN_MAIN_SCRIPT = r"""
import sys
from mpi4py import MPI
from mnframe.runtime.errors import ConfigError
from mnframe.runtime.guard import run_main

def main(mode):
    rank = MPI.COMM_WORLD.rank
    if mode == "config-all":
        raise ConfigError("optimizer.lr must be > 0 (got -1)")
    if mode == "config-one" and rank == 1:
        raise ConfigError("only rank 1 noticed")
    if mode == "exit" and rank == 1:
        sys.exit(5)
    MPI.COMM_WORLD.Barrier()

sys.exit(run_main(main, sys.argv[1]))
"""


@pytest.mark.parametrize(
    "mode,status,text",
    [
        ("ok", 0, None),
        ("config-all", 2, "mnframe: configuration error: optimizer.lr must be > 0 (got -1)"),
        ("config-one", 2, "the other ranks did not report it"),
        ("exit", 5, "SystemExit(5) on rank 1/2"),
    ],
)
def test_run_main_exit_statuses(tmp_path, mode, status, text):
    script = tmp_path / "main.py"
    script.write_text(RUN_MAIN_SCRIPT)
    result = run_mpi([str(script), mode], n=2, timeout=60, env={"PYTHONPATH": str(REPO)}, cwd=str(tmp_path))
    assert not result.timed_out and result.returncode == status, result.output[-3000:]
    if text:
        assert text in result.stderr
    if mode == "config-all":
        assert result.stderr.count("optimizer.lr") == 1 and "Traceback" not in result.stderr


@pytest.fixture
def job(tmp_path):
    """job(n, **env) runs the script with n ranks in tmp_path; returns (result, end wall time)."""
    script = tmp_path / "train.py"
    script.write_text(TRAIN_SCRIPT)

    def run(n, signal_after=None, during=None, **env):
        full_env = {"RUN_DIR": str(tmp_path), "PYTHONPATH": str(REPO), "MNFRAME_COLLECTIVE_TIMEOUT": "60"}
        full_env.update({k: str(v) for k, v in env.items()})
        helper = None
        if during is not None:
            helper = threading.Thread(target=during, daemon=True)
            helper.start()
        result = run_mpi(
            [str(script)], n=n, timeout=OUTER_TIMEOUT, env=full_env, cwd=str(tmp_path), signal_after=signal_after
        )
        if helper is not None:
            helper.join(timeout=5)
        assert not result.timed_out, f"job hung past {OUTER_TIMEOUT}s:\n{result.output[-4000:]}"
        return result, time.time()

    return run


def _mark_time(tmp_path, what, rank):
    return float((tmp_path / f"{what}.rank{rank}").read_text())


def _done(tmp_path, rank):
    return json.loads((tmp_path / f"done.rank{rank}.json").read_text())


def _losses(tmp_path, rank):
    """{iteration: loss repr}; a resumed run appends, later lines win (they are the resumed ones)."""
    out = {}
    for line in (tmp_path / f"loss.rank{rank}.txt").read_text().splitlines():
        i, loss = line.split()
        out[int(i)] = loss
    return out


# -- 1. fail fast ------------------------------------------------------------------------------


@pytest.mark.parametrize("n,fail_rank", [(2, 0), (4, 3)])  # failing rank first / last
def test_failure_in_iteration_aborts_job_fast(job, tmp_path, n, fail_rank):
    result, end = job(n, FAIL_STAGE="iteration", FAIL_RANK=fail_rank, FAIL_ITER=3)
    assert result.returncode == 1, result.output[-3000:]
    took = end - _mark_time(tmp_path, "failed", fail_rank)
    assert took < 5.0, f"job ended {took:.1f} s after the event\n{result.output[-3000:]}"
    err = result.stderr
    assert f"rank {fail_rank}/{n} on host" in err and "(pid " in err
    assert "Traceback" in err and f"injected failure during iteration on rank {fail_rank}" in err


@pytest.mark.parametrize("stage,fail_rank", [("config", 1), ("model", 0), ("checkpoint", 1), ("evaluation", 1)])
def test_failure_in_each_stage_aborts_job_fast(job, tmp_path, stage, fail_rank):
    result, end = job(2, FAIL_STAGE=stage, FAIL_RANK=fail_rank, FAIL_ITER=3)
    assert result.returncode == 1, result.output[-3000:]
    took = end - _mark_time(tmp_path, "failed", fail_rank)
    assert took < 5.0, f"job ended {took:.1f} s after the event\n{result.output[-3000:]}"
    assert f"injected failure during {stage} on rank {fail_rank}" in result.stderr
    assert "Traceback" in result.stderr
    if stage == "checkpoint":  # shared verdict: every rank names the failed rank; nothing committed
        assert "not written: rank 1: RuntimeError" in result.stderr
        assert not list((tmp_path / "checkpoints").glob("iter_*"))


def test_config_error_exits_2_with_message_once(job):
    result, _ = job(2, FAIL_STAGE="configerror")
    assert result.returncode == 2, result.output[-3000:]
    assert result.stderr.count("learning rate must be positive") == 1
    assert "Traceback" not in result.stderr


def test_sys_exit_on_one_rank_ends_the_job(job, tmp_path):
    result, end = job(2, EXIT_RANK=1, EXIT_AT=3, EXIT_CODE=3)
    assert result.returncode != 0, result.output[-3000:]
    took = end - _mark_time(tmp_path, "exited", 1)
    assert took < 5.0, f"job ended {took:.1f} s after the event\n{result.output[-3000:]}"
    assert "rank 1 (host" in result.stderr and "exited" in result.stderr


def test_exception_in_background_thread_aborts(tmp_path):
    result = _light(tmp_path, 2, "thread")
    assert result.returncode == 1, result.output[-3000:]
    assert "uncaught exception in thread 'loader' on rank 1/2" in result.stderr
    assert "ZeroDivisionError" in result.stderr


def test_keyboard_interrupt_exits_130(tmp_path):
    result = _light(tmp_path, 2, "keyboard")
    assert result.returncode == 130, result.output[-3000:]
    assert "KeyboardInterrupt on rank 0/2" in result.stderr


def test_clean_run_exits_0(tmp_path):
    result = _light(tmp_path, 3, "ok")
    assert result.returncode == 0, result.output[-3000:]
    assert sorted(p.name for p in tmp_path.glob("finished.*")) == ["finished.0", "finished.1", "finished.2"]


# -- 2. collective deadline ----------------------------------------------------------------------


def test_collective_timeout_reports_and_exits_124(job, tmp_path):
    result, end = job(2, STOP_RANK=1, STOP_AT=3, MNFRAME_COLLECTIVE_TIMEOUT=5)
    assert result.returncode == 124, result.output[-3000:]
    took = end - _mark_time(tmp_path, "stopped", 1)
    assert took < 10.0, f"job ended {took:.1f} s after the event\n{result.output[-3000:]}"
    err = result.stderr
    assert "collective timeout" in err and "allreduce" in err
    assert "never arrived: rank 1" in err and "ranks that never arrived in" in err
    for rank in (0, 1):
        record = json.loads((tmp_path / f"mnframe-timeout-rank{rank}.json").read_text())
        assert record["rank"] == rank and record["operations"]
        assert {"seq", "op", "shape", "dtype", "peer"} <= set(record["operations"][-1])
    stuck = json.loads((tmp_path / "mnframe-timeout-rank1.json").read_text())
    assert stuck["current"] is None and "time.sleep(600)" in stuck["main_thread_stack"]


def test_debug_mode_names_the_divergence(tmp_path):
    result = _light(tmp_path, 3, "diverge", MNFRAME_DEBUG_COLLECTIVES=1)
    assert result.returncode == 1, result.output[-3000:]
    assert "ranks diverge at collective" in result.stderr
    assert "rank 0: bcast" in result.stderr and "rank 1: allreduce" in result.stderr
    assert "light.py:" in result.stderr  # the user's line, not mnframe's


# -- 3. preemption -------------------------------------------------------------------------------


def _wait_for(path, timeout=60):
    end = time.time() + timeout
    while time.time() < end and not path.exists():
        time.sleep(0.1)
    return path.exists()


def test_sigterm_to_mpiexec_checkpoints_and_exits_0(job, tmp_path):
    # SIGTERM mpiexec a little after the ranks started iterating (loss file appears).
    result, _ = job(
        2,
        signal_after=None,
        ITERS=400,
        ITER_SLEEP=0.02,
        INTERVAL=1000,
        during=lambda: _signal_when(tmp_path / "loss.rank0.txt", "mpiexec", signal.SIGTERM),
    )
    assert result.returncode == 0, result.output[-3000:]
    done = [_done(tmp_path, r) for r in (0, 1)]
    assert all(d["preempted"] for d in done) and done[0]["iteration"] == done[1]["iteration"] < 400
    manifest = json.loads(next((tmp_path / "checkpoints").glob("iter_*/manifest.json")).read_text())
    assert manifest["reason"] == "preemption" and manifest["iteration"] == done[0]["iteration"]


def test_sigusr1_to_one_rank_stops_all_ranks(job, tmp_path):
    result, _ = job(
        2,
        ITERS=400,
        ITER_SLEEP=0.02,
        INTERVAL=1000,
        during=lambda: _signal_when(tmp_path / "loss.rank1.txt", "rank1", signal.SIGUSR1),
    )
    assert result.returncode == 0, result.output[-3000:]
    done = [_done(tmp_path, r) for r in (0, 1)]
    assert all(d["preempted"] for d in done) and done[0]["iteration"] == done[1]["iteration"] < 400


def _signal_when(ready_file, target, signum):
    if not _wait_for(ready_file):
        return
    time.sleep(0.3)
    if target == "mpiexec":
        # the launcher is the session leader run_mpi started: our parent's child with the pid file's ppid
        pid = int(Path(ready_file).with_name("pid.rank0").read_text())
        os.kill(_parent_of(_parent_of(pid)), signum)  # rank -> hydra proxy -> mpiexec
    else:
        os.kill(int(Path(ready_file).with_name("pid.rank1").read_text()), signum)


def _parent_of(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


# -- 4/5. crash-safe checkpoints and exact resume --------------------------------------------------


def _params(tmp_path, rank):
    with np.load(tmp_path / f"params.rank{rank}.npz") as f:
        return {k: f[k] for k in f.files}


@pytest.mark.smoke  # the fast tier's job-level check
def test_exact_resume_after_sigkill(tmp_path_factory):
    # Reference: 20 uninterrupted iterations.
    ref_dir = tmp_path_factory.mktemp("ref")
    ref = run_mpi(
        [str(_script(ref_dir))],
        n=2,
        timeout=OUTER_TIMEOUT,
        cwd=str(ref_dir),
        env={"RUN_DIR": str(ref_dir), "PYTHONPATH": str(REPO)},
    )
    assert ref.returncode == 0, ref.output[-3000:]
    # Killed with SIGKILL at iteration 13, then resumed (from the iteration-10 checkpoint).
    run_dir = tmp_path_factory.mktemp("killed")
    env = {"RUN_DIR": str(run_dir), "PYTHONPATH": str(REPO)}
    killed = run_mpi(
        [str(_script(run_dir))],
        n=2,
        timeout=OUTER_TIMEOUT,
        cwd=str(run_dir),
        env=dict(env, KILL_RANK="1", KILL_AT="13"),
    )
    assert killed.returncode == 9, killed.output[-3000:]  # MPICH reports the signal number
    resumed = run_mpi([str(_script(run_dir))], n=2, timeout=OUTER_TIMEOUT, cwd=str(run_dir), env=env)
    assert resumed.returncode == 0, resumed.output[-3000:]
    assert "resumed from" in resumed.stderr and "iter_00000010" in resumed.stderr
    for rank in (0, 1):
        assert _done(run_dir, rank)["resumed_from"] == "iter_00000010"
        a, b = _params(ref_dir, rank), _params(run_dir, rank)
        assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
        ref_loss, res_loss = _losses(ref_dir, rank), _losses(run_dir, rank)
        assert [ref_loss[i] for i in range(11, 21)] == [res_loss[i] for i in range(11, 21)]


def _script(directory):
    path = Path(directory) / "train.py"
    path.write_text(TRAIN_SCRIPT)
    return path


def test_kill_during_checkpoint_and_corruption_fall_back(job, tmp_path):
    # Killed while rank 1 writes the third checkpoint (iteration 15): it is never committed.
    result, _ = job(2, FAIL_STAGE="killsave", FAIL_RANK=1, KILL_SAVE_N=3)
    assert result.returncode == 9, result.output[-3000:]
    ckpts = tmp_path / "checkpoints"
    assert sorted(p.name for p in ckpts.glob("iter_*")) == ["iter_00000005", "iter_00000010"]
    assert list(ckpts.glob(".tmp-iter_00000015"))
    # Resume loads the last complete one and finishes (writing 15 and 20).
    result, _ = job(2)
    assert result.returncode == 0, result.output[-3000:]
    assert _done(tmp_path, 0)["resumed_from"] == "iter_00000010"
    assert not list(ckpts.glob(".tmp-*"))
    # Flip one byte in the newest checkpoint. Asking for exactly that one fails on every
    # rank, naming the file and the rank that wrote it ...
    victim = ckpts / "iter_00000020" / "rank_00001.npz"
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    result, _ = job(2, ITERS=22, LOAD="iter_00000020")
    assert result.returncode == 1, result.output[-3000:]
    assert "rank_00001.npz (written by rank 1) has a wrong SHA-256" in result.stderr
    # ... and resume=auto skips it, saying why, and falls back to iteration 15.
    result, _ = job(2, ITERS=22)
    assert result.returncode == 0, result.output[-3000:]
    assert _done(tmp_path, 0)["resumed_from"] == "iter_00000015"
    assert "rank_00001.npz (written by rank 1) has a wrong SHA-256" in result.stderr
    assert "falling back to the previous good checkpoint iter_00000015" in result.stderr
    # A different world size resumes too (rank 0's state everywhere, data re-sharded).
    result, _ = job(3, ITERS=24)
    assert result.returncode == 0, result.output[-3000:]
    assert "world size 2 -> 3: data re-sharded" in result.stderr
    assert [_done(tmp_path, r)["iteration"] for r in range(3)] == [24, 24, 24]
    # the run to 22 ended with a checkpoint of its last iteration; the damaged one was moved aside
    assert _done(tmp_path, 2)["resumed_from"] == "iter_00000022"
    assert (ckpts / "iter_00000020.damaged" / "rank_00001.npz").read_bytes() == bytes(data)
