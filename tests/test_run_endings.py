"""How a ``python -m mnframe`` run ends (issue 30), as real ``mpiexec`` jobs under a timeout:
a diverging run stops with status 4, Ctrl-C checkpoints and exits 130 (a second one exits at
once), a batch larger than a shard is warned about, and a finished run says what it did."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy
import pytest

from mnframe.testing import run_mpi
from mnframe.testing.launch import mpiexec_path

REPO = Path(__file__).resolve().parents[1]
TIMEOUT = 180
TINY_MNIST = ["recipe=mnist", "model.n_units=16", "extensions.progress_bar.enabled=false"]

SLOW_EXTENSION = r"""
import os, time
from chainer.training import extension


class Slow(extension.Extension):
    trigger = (1, "iteration")

    def __call__(self, trainer):
        with open(os.path.join(os.environ["MARK_DIR"], f"iter.{os.getpid()}"), "w") as f:
            f.write(str(trainer.updater.iteration))
        time.sleep(float(os.environ["ITER_SLEEP"]))


def make():
    return Slow()
"""


def _finite_checkpoint(directory):
    for npz in Path(directory).glob("rank_*.npz"):
        with numpy.load(npz) as arrays:
            for key in arrays.files:
                if arrays[key].dtype.kind == "f":
                    assert numpy.isfinite(arrays[key]).all(), f"{npz.name}:{key} is not finite"
    return True


# -- a non-finite loss ---------------------------------------------------------------------------


@pytest.mark.parametrize("n", [3])  # 1, 2 and 3 ranks in-process: tests/mpi/test_run_end_agreement.py
def test_nonfinite_loss_stops_the_run_with_status_4(tmp_path, n):
    run_dir = tmp_path / "run"
    result = run_mpi(
        [
            "-m",
            "mnframe",
            *TINY_MNIST,
            "optimizer=sgd",
            "optimizer.lr=1e30",
            "trainer.stop=[2,epoch]",
            "checkpoint.interval=1",
            f"hydra.run.dir={run_dir}",
        ],
        n=n,
        timeout=TIMEOUT,
        cwd=str(REPO),
    )
    assert not result.timed_out, result.output[-3000:]
    assert result.returncode == 4, result.output[-3000:]
    lines = [line for line in result.stderr.splitlines() if "training diverged" in line]
    assert len(lines) == 1, result.stderr[-3000:]
    line = lines[0]
    assert "is nan at iteration" in line or "non-finite" in line
    for hint in ("lower learning rate", "gradient clipping", "float32"):
        assert hint in line
    assert "Traceback" not in result.output
    assert not list(run_dir.glob("model*.npz")), "a model was written from non-finite weights"
    checkpoints = sorted((run_dir / "checkpoints").glob("iter_*"))
    assert checkpoints, "no checkpoint before the divergence"
    newest = checkpoints[-1]
    assert newest.name in line and _finite_checkpoint(newest)
    manifest = json.loads((newest / "manifest.json").read_text())
    assert sorted(manifest["files"]) == [f"rank_{r:05d}.npz" for r in range(n)]  # every rank stopped there
    iteration = int(line.split("at iteration ")[1].split()[0])
    assert manifest["iteration"] == iteration - 1


@pytest.mark.slow
@pytest.mark.parametrize("on_nonfinite", ["stop", "ignore"])
def test_a_finite_loss_that_runs_away_stops_the_run_unless_ignored(tmp_path, on_nonfinite):
    """Issue 38 item 7: Adam with alpha=1e6 never reaches NaN (loss 5.6e10) and exited 0 with a
    model; now every rank stops with status 4 and one line. ``ignore`` trains on as before."""
    run_dir = tmp_path / "run"
    result = run_mpi(
        ["-m", "mnframe", *TINY_MNIST, "optimizer=adam", "optimizer.alpha=1e6", "trainer.stop=[1,epoch]"]
        + [f"trainer.on_nonfinite={on_nonfinite}", f"hydra.run.dir={run_dir}"],
        n=2,
        timeout=TIMEOUT,
        cwd=str(REPO),
    )
    assert not result.timed_out, result.output[-3000:]
    if on_nonfinite == "ignore":
        assert result.returncode == 0, result.output[-3000:]
        assert "training diverged" not in result.output and list(run_dir.glob("model*.npz"))
        return
    assert result.returncode == 4, result.output[-3000:]
    [line] = [line for line in result.stderr.splitlines() if "training diverged" in line]
    assert "main/loss = " in line and "x its lowest value" in line and "(trainer.divergence_factor)" in line
    assert "Traceback" not in result.output
    assert not list(run_dir.glob("model*.npz")), "a model was written from a diverged run"


# -- Ctrl-C --------------------------------------------------------------------------------------


def _start(tmp_path, iter_sleep, *overrides, n=2):
    (tmp_path / "slow_ext.py").write_text(SLOW_EXTENSION)
    marks = tmp_path / "marks"
    marks.mkdir(exist_ok=True)
    env = dict(os.environ, PYTHONPATH=f"{tmp_path}{os.pathsep}{REPO}", MARK_DIR=str(marks))
    env.update(ITER_SLEEP=str(iter_sleep), PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    cmd = [mpiexec_path(), "-n", str(n), sys.executable, "-m", "mnframe", *TINY_MNIST]
    cmd += ["trainer.stop=[200,epoch]", "+extensions.slow={kind: custom, rank0_only: false, _target_: slow_ext.make}"]
    cmd += [f"hydra.run.dir={tmp_path / 'run'}", *overrides]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=str(REPO), start_new_session=True
    )
    deadline = time.monotonic() + TIMEOUT
    while len(list(marks.glob("iter.*"))) < n:  # every rank is training
        if time.monotonic() > deadline or proc.poll() is not None:
            break
        time.sleep(0.1)
    return proc


def _finish(proc):
    try:
        out, err = proc.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"the job did not end\n{err[-3000:]}")
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return proc.returncode, out, err


def test_ctrl_c_checkpoints_at_the_next_iteration_and_exits_130(tmp_path):
    proc = _start(tmp_path, 0.2)
    proc.send_signal(signal.SIGINT)  # a user's Ctrl-C to mpiexec (hydra forwards it to the ranks)
    sent = time.monotonic()
    status, out, err = _finish(proc)
    took = time.monotonic() - sent
    assert status == 130, err[-3000:]
    assert took < 30, f"{took:.1f} s from Ctrl-C to the end"
    assert "Traceback" not in out + err
    lines = [line for line in err.splitlines() if "interrupted at iteration" in line]
    assert len(lines) == 1, err[-3000:]
    iteration = int(lines[0].split("interrupted at iteration ")[1].split(";")[0])
    name = f"iter_{iteration:08d}"
    assert f"checkpoints/{name} written; run the same command to resume" in lines[0]
    manifest = json.loads((tmp_path / "run" / "checkpoints" / name / "manifest.json").read_text())
    assert manifest["reason"] == "interrupt" and manifest["iteration"] == iteration
    assert sorted(manifest["files"]) == ["rank_00000.npz", "rank_00001.npz"]
    assert not list((tmp_path / "run").glob("model*.npz"))
    # the same command (here: a shorter stop) resumes from that checkpoint
    resumed = run_mpi(
        [
            "-m",
            "mnframe",
            *TINY_MNIST,
            f"trainer.stop=[{iteration + 1},iteration]",
            "resume=must",
            f"hydra.run.dir={tmp_path / 'run'}",
        ],
        n=2,
        timeout=TIMEOUT,
        cwd=str(REPO),
    )
    assert resumed.returncode == 0, resumed.output[-3000:]
    assert f"{name}" in resumed.stderr and (tmp_path / "run" / "model.npz").exists()


def test_second_ctrl_c_exits_at_once_without_a_traceback(tmp_path):
    proc = _start(tmp_path, 6)  # each iteration takes 6 s: the first Ctrl-C waits for its end
    os.killpg(proc.pid, signal.SIGINT)  # a terminal's Ctrl-C: mpiexec and every rank
    time.sleep(1.5)
    os.killpg(proc.pid, signal.SIGINT)
    second = time.monotonic()
    status, out, err = _finish(proc)
    took = time.monotonic() - second
    assert status != 0 and took < 4, f"status {status}, {took:.1f} s after the second Ctrl-C\n{err[-3000:]}"
    assert "Traceback" not in out + err
    assert not (tmp_path / "run" / "checkpoints").exists() or not list(
        (tmp_path / "run" / "checkpoints").glob("iter_*")
    )


# -- a batch larger than a shard, and the end of a run -------------------------------------------


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("finished") / "run"
    result = run_mpi(
        [
            "-m",
            "mnframe",
            "recipe=mnist",
            "model.n_units=16",
            "extensions.progress_bar.enabled=false",
            "dataset.batch_size=5000",
            "trainer.stop=[2,iteration]",
            f"hydra.run.dir={run_dir}",
        ],
        n=2,
        timeout=TIMEOUT,
        cwd=str(REPO),
    )
    assert not result.timed_out and result.returncode == 0, result.output[-3000:]
    return result, run_dir


def test_batch_larger_than_the_shard_is_warned_once(finished_run):
    result, _ = finished_run
    warnings = [line for line in result.stderr.splitlines() if "larger than this rank's shard" in line]
    assert len(warnings) == 1, result.stderr[-3000:]
    assert "(5000 examples per rank)" in warnings[0] and "(750 examples)" in warnings[0]


def test_end_of_run_prints_one_summary_line(finished_run):
    result, run_dir = finished_run
    lines = [line for line in result.stderr.splitlines() if line.startswith("mnframe: done:")]
    assert len(lines) == 1, result.stderr[-3000:]
    line = lines[0]
    log = json.loads((run_dir / "log").read_text())
    accuracy = log[-1]["validation/main/accuracy"]
    assert log[-1]["iteration"] == 2
    assert line.startswith(f"mnframe: done: 2 iterations ({log[-1]['epoch']} epochs) in ")
    assert f"validation/main/accuracy {accuracy:.4g}" in line
    assert f"model: {run_dir / 'model.npz'}" in line
    assert f"plots: {run_dir / 'loss.png'}, {run_dir / 'accuracy.png'}" in line
    # every file the run wrote is complete: no temporary names left, the images open
    import matplotlib.image

    assert not [p.name for p in run_dir.rglob(".*tmp*")]
    for png in ("loss.png", "accuracy.png"):
        assert matplotlib.image.imread(str(run_dir / png)).size > 0
