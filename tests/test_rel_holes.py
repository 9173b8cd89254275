"""Issue 18 ("never hang, never lose work"): the holes an adversarial run found, one real MPI job each.

Every job runs under ``run_mpi`` with an outer timeout (a hang fails the test and
the process group is killed); each test asserts the exit status, the time from
the injected event to the end of the job, and the message.
"""

import json
import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest
from test_rel_jobs import TRAIN_SCRIPT, _done, _losses, _signal_when

from mnframe.testing import run_mpi

REPO = Path(__file__).resolve().parent.parent
OUTER_TIMEOUT = 90

# argv[1] picks the hole; MARK files record when the injected event happens.
HOLE_SCRIPT = r"""
import os, sys, time
mode = sys.argv[1]


def mark(rank, what="event"):
    with open(f"{what}.rank{rank}", "w") as f:
        f.write(repr(time.time()))


if mode == "raise-before-communicator":
    import mnframe as chainermn
    from mpi4py import MPI
    if MPI.COMM_WORLD.rank == 1:
        mark(1)
        raise ValueError("cannot read the input list on rank 1")
    comm = chainermn.create_communicator("naive")
    sys.exit(0)

import numpy as np
import mnframe
comm = mnframe.create_communicator("naive")
x = np.ones(3, np.float32)
comm.allreduce(x)
if mode == "stuck-after-last-collective" and comm.rank == 1:
    time.sleep(10**6)
if mode == "eager-bcast":
    if comm.rank == 0:
        comm.bcast_obj({"small": 1})  # completes eagerly: rank 0 goes on to its end
    else:
        comm.mpi_comm.Barrier()       # never matched
if mode == "raw-mpi-call":
    if comm.rank == 0:
        mark(0)
        comm.allreduce(x)             # mnframe op: its deadline fires
    else:
        comm.mpi_comm.Barrier()       # a raw MPI call, outside mnframe
if mode == "os-exit":
    if comm.rank == 1:
        mark(1)
        os._exit(7)
    time.sleep(30)
    comm.allreduce(x)
if mode == "stuck-collective":
    if comm.rank == 1:
        mark(1)
        time.sleep(10**6)
    comm.allreduce(x)
if comm.rank == 0:
    mark(0, "end")
"""


def _hole(tmp_path, mode, n=2, **env):
    script = tmp_path / "hole.py"
    script.write_text(HOLE_SCRIPT)
    full_env = {"PYTHONPATH": str(REPO), **{k: str(v) for k, v in env.items()}}
    result = run_mpi([str(script), mode], n=n, timeout=OUTER_TIMEOUT, env=full_env, cwd=str(tmp_path))
    assert not result.timed_out, f"job hung past {OUTER_TIMEOUT}s:\n{result.output[-4000:]}"
    return result, time.time()


def _mark(tmp_path, rank, what="event"):
    return float((tmp_path / f"{what}.rank{rank}").read_text())


# -- 1. the end of the job has a deadline -------------------------------------------------------


def test_exit_deadline_rank_stuck_after_its_last_collective(tmp_path):
    result, end = _hole(tmp_path, "stuck-after-last-collective", MNFRAME_COLLECTIVE_TIMEOUT=4)
    assert result.returncode == 124, result.output[-3000:]
    took = end - _mark(tmp_path, 0, "end")
    assert took < 4 + 5, f"job ended {took:.1f} s after rank 0 reached its end\n{result.output[-3000:]}"
    err = result.stderr
    assert "exit deadline: rank 0" in err and "waited 4 s" in err
    assert "did not finish: rank 1 (host" in err and "blocked in a native call at" in err
    assert "time.sleep(10**6)" in err and "ranks that never reached the end: 1" in err
    record = json.loads((tmp_path / "mnframe-timeout-rank1.json").read_text())
    assert "time.sleep(10**6)" in record["main_thread_stack"]


def test_exit_deadline_eager_bcast_against_a_barrier(tmp_path):
    result, end = _hole(tmp_path, "eager-bcast", MNFRAME_COLLECTIVE_TIMEOUT=4)
    assert result.returncode == 124, result.output[-3000:]
    took = end - _mark(tmp_path, 0, "end")
    assert took < 4 + 5, f"job ended {took:.1f} s after rank 0 reached its end\n{result.output[-3000:]}"
    assert "did not finish: rank 1" in result.stderr
    assert "blocked in the MPI call Barrier at" in result.stderr and "comm.mpi_comm.Barrier()" in result.stderr


STUCK_EXTENSION = r"""
import os, time
from chainer.training import extension
from mpi4py import MPI


class StuckInFinalize(extension.Extension):
    trigger = (1, "iteration")

    def __call__(self, trainer):
        pass

    def finalize(self):
        if MPI.COMM_WORLD.rank == 1:
            with open(os.path.join(os.environ["MARK_DIR"], "event.rank1"), "w") as f:
                f.write(repr(time.time()))
            time.sleep(10**6)


def make():
    return StuckInFinalize()
"""


def test_deadline_extension_finalize_blocks_through_the_runner(tmp_path):
    (tmp_path / "stuck_ext.py").write_text(STUCK_EXTENSION)
    env = {
        "PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO}",
        "MARK_DIR": str(tmp_path),
        "MNFRAME_EXIT_TIMEOUT": "4s",
        "MNFRAME_COLLECTIVE_TIMEOUT": "4s",
    }
    result = run_mpi(
        [
            "-m",
            "mnframe",
            "trainer.stop=[2,iteration]",
            "extensions=minimal",
            "+extensions.stuck={kind: custom, rank0_only: false, _target_: stuck_ext.make}",
            f"hydra.run.dir={tmp_path}/run",
        ],
        n=2,
        timeout=OUTER_TIMEOUT,
        env=env,
        cwd=str(REPO),
    )
    end = time.time()
    assert not result.timed_out, f"job hung past {OUTER_TIMEOUT}s:\n{result.output[-4000:]}"
    assert result.returncode == 124, result.output[-3000:]
    took = end - _mark(tmp_path, 1)
    assert took < 4 + 8, f"job ended {took:.1f} s after rank 1 blocked\n{result.output[-3000:]}"
    err = result.stderr
    # rank 0 finished training and waits for rank 1 in the runner's final checkpoint: the
    # collective deadline ends the job and names where rank 1 is stuck
    assert "collective timeout" in err and "past its 4 s deadline" in err
    assert "never arrived: rank 1 (host" in err and "stuck_ext.py" in err and "in finalize" in err


# -- 2. an exception before create_communicator ---------------------------------------------------


def test_exception_before_the_communicator_aborts_the_job(tmp_path):
    result, end = _hole(tmp_path, "raise-before-communicator")
    assert result.returncode == 1, result.output[-3000:]
    took = end - _mark(tmp_path, 1)
    assert took < 5.0, f"job ended {took:.1f} s after the exception\n{result.output[-3000:]}"
    err = result.stderr
    assert "uncaught exception on rank 1/2 on host" in err and "(pid " in err
    assert "Traceback" in err and "ValueError: cannot read the input list on rank 1" in err


# -- 3. MNFRAME_* settings are validated when the communicator is created ----------------------


@pytest.mark.parametrize("value", ["-1", "ten", "5 minutes"])
def test_bad_setting_is_rejected_on_every_rank(tmp_path, value):
    start = time.time()
    result, end = _hole(tmp_path, "ok", MNFRAME_COLLECTIVE_TIMEOUT=value)
    assert result.returncode == 2, result.output[-3000:]
    assert end - start < 30
    err = result.stderr
    assert err.count(f"MNFRAME_COLLECTIVE_TIMEOUT={value!r}") == 1  # once, from rank 0
    assert "expected a duration >= 0" in err and "10m" in err and "Traceback" not in err
    assert not (tmp_path / "end.rank0").exists()


def test_setting_with_a_unit_keeps_the_deadline_working(tmp_path):
    # "5s" used to kill the watchdog thread (deadlines off, a stuck job hung forever)
    result, end = _hole(tmp_path, "stuck-collective", MNFRAME_COLLECTIVE_TIMEOUT="3s")
    assert result.returncode == 124, result.output[-3000:]
    took = end - _mark(tmp_path, 1)
    assert took < 3 + 6, f"job ended {took:.1f} s after rank 1 stopped\n{result.output[-3000:]}"
    assert "past its 3 s deadline" in result.stderr and "internal error" not in result.stderr


# -- 7. a raw MPI call is named in the timeout report --------------------------------------------


def test_timeout_report_names_a_raw_mpi_call(tmp_path):
    result, end = _hole(tmp_path, "raw-mpi-call", MNFRAME_COLLECTIVE_TIMEOUT=3)
    assert result.returncode == 124, result.output[-3000:]
    took = end - _mark(tmp_path, 0)
    assert took < 3 + 6, f"job ended {took:.1f} s after rank 0 entered the allreduce\n{result.output[-3000:]}"
    err = result.stderr
    assert "never arrived: rank 1" in err and "blocked in the MPI call Barrier at" in err
    assert "running Python at" not in err


# -- 7. os._exit(n) on one rank is named ----------------------------------------------------------


def test_os_exit_on_one_rank_is_named(tmp_path):
    # The sentinel (runtime/sentinel.py) reads the exit status before the launcher reaps the
    # rank: best effort (measured here: about half the attempts on an idle 2-core VM), so one
    # of up to ten attempts must name it.
    named = False
    for _ in range(10):
        result, end = _hole(tmp_path, "os-exit")
        assert result.returncode == 7, result.output[-3000:]
        took = end - _mark(tmp_path, 1)
        assert took < 5.0, f"job ended {took:.1f} s after os._exit\n{result.output[-3000:]}"
        if "mnframe: rank 1 (pid " in result.stderr:
            assert (
                "on host" in result.stderr and "exited with status 7 without running its exit handlers" in result.stderr
            ), result.stderr[-3000:]
            named = True
            break
    assert named, result.output[-3000:]
    assert "exited with status" not in _hole(tmp_path, "ok")[0].stderr  # a clean job: silent


# -- jobs of the training script (tests/test_rel_jobs.py's TRAIN_SCRIPT) ------------------------


def _train(run_dir, n=2, **env):
    script = Path(run_dir) / "train.py"
    script.write_text(TRAIN_SCRIPT)
    full_env = {"RUN_DIR": str(run_dir), "PYTHONPATH": str(REPO), "MNFRAME_COLLECTIVE_TIMEOUT": "60"}
    full_env.update({k: str(v) for k, v in env.items()})
    result = run_mpi([str(script)], n=n, timeout=OUTER_TIMEOUT, env=full_env, cwd=str(run_dir))
    assert not result.timed_out, f"job hung past {OUTER_TIMEOUT}s:\n{result.output[-4000:]}"
    return result, time.time()


def _params(path):
    with np.load(path) as f:
        return {k: f[k] for k in f.files}


# -- 4. garbage collection never deletes the newest good checkpoint ------------------------------


def test_gc_keeps_the_checkpoint_just_written_and_reports_bad_ones(tmp_path):
    result, _ = _train(tmp_path, ITERS=30, INTERVAL=10, KEEP=3)
    assert result.returncode == 0, result.output[-3000:]
    ckpts = tmp_path / "checkpoints"
    victim = ckpts / "iter_00000030" / "rank_00001.npz"  # corrupt, same size: only the hash tells
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    (ckpts / "iter_99999999").mkdir()  # junk: no manifest
    (ckpts / "notes").mkdir()  # foreign
    start = time.time()
    result, end = _train(tmp_path, ITERS=21, INTERVAL=1, KEEP=1)
    assert result.returncode == 0, result.output[-3000:]
    assert end - start < 60
    assert _done(tmp_path, 0)["resumed_from"] == "iter_00000020"
    # resume moved the damaged ones aside (issue 30): kept, never overwritten, not counted
    assert sorted(p.name for p in ckpts.iterdir()) == [
        "iter_00000021",
        "iter_00000030.damaged",
        "iter_99999999.damaged",
        "notes",
    ]
    err = result.stderr
    assert err.count(f"moved aside to {ckpts / 'iter_00000030.damaged'}") == 1
    assert "resume found it damaged" in err and "wrong SHA-256" in err
    assert err.count(f"moved aside to {ckpts / 'iter_99999999.damaged'}") == 1 and "no manifest.json" in err
    assert "notes is not a checkpoint (foreign entry)" in err
    # the next run resumes from the checkpoint GC kept
    result, _ = _train(tmp_path, ITERS=22, INTERVAL=1, KEEP=1)
    assert result.returncode == 0, result.output[-3000:]
    assert _done(tmp_path, 0)["resumed_from"] == "iter_00000021"


# -- 5. exact resume of ChainerMN's pattern: scatter_dataset(shuffle=True) without a seed --------


def test_exact_resume_with_unseeded_scatter_after_sigkill(tmp_path):
    env = {"SCATTER_SEED": "none", "ITERATOR": "global", "DUMP_AT": 13}
    killed, _ = _train(tmp_path, KILL_RANK=1, KILL_AT=13, DUMP_TAG="before_kill", **env)
    assert killed.returncode == 9, killed.output[-3000:]
    before = {r: _losses(tmp_path, r) for r in (0, 1)}
    start = time.time()
    resumed, end = _train(tmp_path, DUMP_TAG="after_resume", **env)
    assert resumed.returncode == 0, resumed.output[-3000:]
    assert end - start < 60
    assert "scatter_dataset call #1 was shuffled with seed" in resumed.stderr
    assert "shards restored" in resumed.stderr and "iter_00000010" in resumed.stderr
    after = {r: _losses(tmp_path, r) for r in (0, 1)}
    for rank in (0, 1):
        assert _done(tmp_path, rank)["resumed_from"] == "iter_00000010"
        assert [before[rank][i] for i in (11, 12, 13)] == [after[rank][i] for i in (11, 12, 13)]
        a = _params(tmp_path / f"params.before_kill.rank{rank}.npz")
        b = _params(tmp_path / f"params.after_resume.rank{rank}.npz")
        assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)  # bitwise


# -- 6. preemption with ChainerMN's checkpointer and multi_node_snapshot --------------------------

PREEMPT_SCRIPT = r"""
import os, sys, time
import mnframe
import chainer, chainer.links as L, numpy as np
from chainer import training
from chainer.training import extensions

comm = mnframe.create_communicator("naive")
kind, out = sys.argv[1], sys.argv[2]
stop = int(sys.argv[3]) if len(sys.argv) > 3 else 1000  # the restart: a few iterations past the resume
with open(os.path.join(out, f"pid.rank{comm.rank}"), "w") as f:
    f.write(str(os.getpid()))
model = L.Classifier(L.Linear(4, 3))
opt = mnframe.create_multi_node_optimizer(chainer.optimizers.SGD(0.1), comm)
opt.setup(model)
rs = np.random.RandomState(0)
data = chainer.datasets.TupleDataset(rs.randn(64, 4).astype(np.float32), rs.randint(0, 3, 64).astype(np.int32))
trainer = training.Trainer(training.StandardUpdater(chainer.iterators.SerialIterator(data, 4), opt),
                           (stop, "iteration"), out=out)


@training.make_extension(trigger=(1, "iteration"))
def pace(trainer):
    if trainer.updater.iteration == 3:
        with open(os.path.join(out, f"loss.rank{comm.rank}.txt"), "w") as f:
            f.write("started")
    time.sleep(0.02)


trainer.extend(pace)
resumed = None
if kind == "checkpointer":
    cp = mnframe.create_multi_node_checkpointer("cp", comm)
    trainer.extend(cp, trigger=(500, "iteration"))
    resumed = cp.maybe_load(trainer, opt)
else:
    trainer.extend(mnframe.extensions.multi_node_snapshot(comm, extensions.snapshot(autoload=True), [0]),
                   trigger=(500, "iteration"))
start = trainer.updater.iteration
trainer.run()
with open(os.path.join(out, f"done.rank{comm.rank}.json"), "w") as f:
    f.write(repr({"start": start, "stop": trainer.updater.iteration, "resumed": resumed}))
"""


@pytest.mark.parametrize("kind", ["checkpointer", "snapshot"])
def test_sigterm_checkpoints_with_chainermn_extensions(tmp_path, kind):
    import ast
    import threading

    script = tmp_path / "preempt.py"
    script.write_text(PREEMPT_SCRIPT)
    sent = {}

    def send():
        _signal_when(tmp_path / "loss.rank0.txt", "mpiexec", signal.SIGTERM)
        sent["at"] = time.time()

    helper = threading.Thread(target=send, daemon=True)
    helper.start()
    result = run_mpi(
        [str(script), kind, str(tmp_path)], n=2, timeout=OUTER_TIMEOUT, env={"PYTHONPATH": str(REPO)}, cwd=str(tmp_path)
    )
    end = time.time()
    helper.join(timeout=5)
    assert not result.timed_out, result.output[-3000:]
    assert result.returncode == 0, result.output[-3000:]
    assert end - sent["at"] < 10, f"job ended {end - sent['at']:.1f} s after SIGTERM"
    done = [ast.literal_eval((tmp_path / f"done.rank{r}.json").read_text()) for r in (0, 1)]
    stop = done[0]["stop"]
    assert done[1]["stop"] == stop and 3 <= stop < 1000
    assert "mnframe: preempted;" in result.stderr
    if kind == "checkpointer":
        assert sorted(p.name for p in tmp_path.glob("cp.*")) == [f"cp.0.{stop}", f"cp.1.{stop}"]
        # the restart resumes from the preemption checkpoint
        (tmp_path / "loss.rank0.txt").unlink()
        again = run_mpi(
            [str(script), kind, str(tmp_path), str(stop + 5)],  # not the 1000 paced iterations of the first run
            n=2,
            timeout=OUTER_TIMEOUT,
            env={"PYTHONPATH": str(REPO)},
            cwd=str(tmp_path),
            signal_after=None,
        )
        assert again.returncode == 0, again.output[-3000:]
        assert ast.literal_eval((tmp_path / "done.rank0.json").read_text())["resumed"] == stop
    else:
        assert sorted(p.name for p in tmp_path.glob("snapshot_iter_*")) == [
            f"snapshot_iter_{stop}.0",
            f"snapshot_iter_{stop}.1",
        ]


# -- 7. a full disk: the real error only ----------------------------------------------------------


def test_full_disk_reports_the_error_without_zipfile_noise(tmp_path):
    result, _ = _train(tmp_path, FULL_RANK=1, FULL_AT=4, INTERVAL=5)
    assert result.returncode == 1, result.output[-3000:]
    err = result.stderr
    assert "checkpoint iter_00000005 not written: rank 1 could not write " in err and "rank_00001.npz (" in err
    assert "needed): [Errno 27] File too large" in err and "Traceback" not in err
    assert "Exception ignored" not in err and "ZipFile.__del__" not in err
    assert not list((tmp_path / "checkpoints").glob("iter_*"))


# -- 7. a data file that is not an npz ----------------------------------------------------------


def test_random_train_npz_gets_a_clear_error(tmp_path):
    data = tmp_path / "mnist"
    data.mkdir()
    rs = np.random.RandomState(0)
    for name in ("train.npz", "test.npz"):
        (data / name).write_bytes(rs.bytes(4096))
    start = time.time()
    result = run_mpi(
        [
            "-m",
            "mnframe",
            "dataset=mnist",
            f"dataset.source.path={data}",
            "trainer.stop=[1,iteration]",
            "extensions=minimal",
            f"hydra.run.dir={tmp_path}/run",
        ],
        n=2,
        timeout=OUTER_TIMEOUT,
        env={"PYTHONPATH": str(REPO)},
        cwd=str(REPO),
    )
    assert not result.timed_out, result.output[-3000:]
    assert result.returncode == 2, result.output[-3000:]
    assert time.time() - start < 60
    out = result.output
    assert f"{data / 'train.npz'} is not a NumPy .npz archive" in out and "'x', 'y'" in out
    assert "pickled data" not in out and "Traceback" not in out
