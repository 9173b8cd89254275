"""A run directory handed over by someone else, through ``python -m mnframe`` under ``mpiexec``
(issue 38, items 1-3, 5 and 6): planted links at eval/, predict/, an output file, checkpoints/
and .mnframe.lock are refused in one line with exit 2 (nothing written outside); the lock's
documented opt-out runs; a rank file from another run is skipped by verify and resume alike and
the job resumes the previous checkpoint without a hang; a config naming subprocess.getoutput
is refused by evaluate unless --trust-config. One small mnist run is trained per module."""

import hashlib
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

from mnframe.testing import run_mpi

REPO = Path(__file__).resolve().parent.parent
TIMEOUT = 180
SMALL = ["model.n_units=16", "dataset.batch_size=20", "extensions=minimal", "checkpoint.interval=3"]

pytestmark = pytest.mark.slow


def mnframe(*args, cwd, n=2, env=None, timeout=TIMEOUT):
    result = run_mpi(
        ["-m", "mnframe", *args], n=n, timeout=timeout, cwd=str(cwd), env={"PYTHONPATH": str(REPO), **(env or {})}
    )
    assert not result.timed_out, result.output[-4000:]
    return result


def train(cwd, name, stop=6, env=None):
    return mnframe(*SMALL, f"trainer.stop=[{stop},iteration]", f"hydra.run.dir={name}", cwd=cwd, env=env)


def refused(result, *fragments):
    """Exit 2, no traceback, one line holding every fragment (printed once)."""
    out = result.output
    assert result.returncode == 2, out[-4000:]
    assert "Traceback" not in out and "BAD TERMINATION" not in out, out[-4000:]
    lines = [line for line in out.splitlines() if all(f in line for f in fragments)]
    assert len(lines) == 1, out[-4000:]
    return lines[0]


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    work = tmp_path_factory.mktemp("foreign")
    result = train(work, "run")
    assert result.returncode == 0, result.output[-4000:]
    return work


@pytest.fixture
def copy(work, tmp_path):
    def make(name="run"):
        target = tmp_path / name
        shutil.copytree(work / "run", target, symlinks=True)
        return target

    return make


def test_linked_eval_predict_and_output_file_are_refused_and_nothing_is_written_outside(copy, tmp_path):
    run = copy()
    outside = tmp_path / "outside"
    outside.mkdir()
    (run / "eval").symlink_to(outside)
    refused(mnframe("evaluate", str(run), cwd=tmp_path), f"{run / 'eval'} is a symbolic link to {outside}")
    assert list(outside.iterdir()) == []
    (run / "eval").unlink()
    (run / "eval").mkdir()
    victim = outside / "victim.json"
    victim.write_text("precious")
    (run / "eval" / "metrics.json").symlink_to(victim)
    refused(mnframe("evaluate", str(run), cwd=tmp_path), "metrics.json is a symbolic link")
    assert victim.read_text() == "precious"
    (run / "predict").symlink_to(outside)
    np.savez(tmp_path / "new.npz", x=np.zeros((3, 784), np.float32))
    refused(mnframe("predict", str(run), str(tmp_path / "new.npz"), cwd=tmp_path), "predict is a symbolic link")
    assert sorted(p.name for p in outside.iterdir()) == ["victim.json"]


def test_a_linked_checkpoint_directory_is_refused(copy, tmp_path):
    run = copy()
    elsewhere = tmp_path / "elsewhere"
    shutil.move(run / "checkpoints", elsewhere)
    (run / "checkpoints").symlink_to(elsewhere)
    before = sorted(os.listdir(elsewhere))
    result = mnframe(*SMALL, "trainer.stop=[9,iteration]", f"hydra.run.dir={run}", cwd=tmp_path)
    refused(result, "checkpoint.dir:", f"{run / 'checkpoints'} is a symbolic link")
    assert sorted(os.listdir(elsewhere)) == before
    result = mnframe("checkpoint", "verify", str(run), cwd=tmp_path, n=1)
    refused(result, "is a symbolic link")


def test_a_linked_record_directory_is_refused_before_the_job_starts(copy, tmp_path):
    run = copy()
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.rmtree(run / ".hydra", ignore_errors=True)
    (run / ".hydra").symlink_to(outside)
    result = mnframe(*SMALL, "trainer.stop=[9,iteration]", f"hydra.run.dir={run}", cwd=tmp_path)
    refused(result, f"{run / '.hydra'} is a symbolic link to {outside}")
    assert list(outside.iterdir()) == []


def test_a_linked_lock_stops_the_job_unless_opted_out(copy, tmp_path):
    run = copy()
    target = tmp_path / "planted-lock"
    (run / ".mnframe.lock").unlink(missing_ok=True)
    (run / ".mnframe.lock").symlink_to(target)
    result = mnframe(*SMALL, "trainer.stop=[9,iteration]", f"hydra.run.dir={run}", cwd=tmp_path)
    refused(result, "cannot lock", "is a symbolic link", "MNFRAME_UNSAFE_NO_LOCK=1")
    assert not target.exists()
    result = mnframe(
        *SMALL, "trainer.stop=[9,iteration]", f"hydra.run.dir={run}", cwd=tmp_path, env={"MNFRAME_UNSAFE_NO_LOCK": "1"}
    )
    assert result.returncode == 0 and "resumed from" in result.output, result.output[-4000:]
    assert (run / "checkpoints" / "iter_00000009").is_dir()


def test_evaluate_refuses_a_foreign_target_unless_trusted(copy, tmp_path):
    run = copy()
    marker = tmp_path / "pwned"
    config = yaml.safe_load((run / "config.yaml").read_text())
    config["model"] = {"_target_": "subprocess.getoutput", "cmd": f"touch {marker}"}
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    line = refused(mnframe("evaluate", str(run), cwd=tmp_path), "module(s) subprocess", "--trust-config")
    assert "model._target_: subprocess.getoutput" in line
    assert not marker.exists()


def _reseal(directory):
    manifest = json.loads((directory / "manifest.json").read_text())
    for name, entry in manifest["files"].items():
        data = (directory / name).read_bytes()
        entry.update(size=len(data), sha256=hashlib.sha256(data).hexdigest())
    (directory / "manifest.json").write_text(json.dumps(manifest))


def test_a_rank_file_from_another_run_is_refused_by_verify_and_resume_falls_back(copy, tmp_path):
    run = copy()
    other = train(tmp_path, "other")
    assert other.returncode == 0, other.output[-4000:]
    newest = run / "checkpoints" / "iter_00000006"
    shutil.copy(tmp_path / "other" / "checkpoints" / "iter_00000006" / "rank_00001.npz", newest / "rank_00001.npz")
    _reseal(newest)
    verify = mnframe("checkpoint", "verify", str(run), cwd=tmp_path, n=1)
    assert verify.returncode == 1 and "iter_00000006: DAMAGED" in verify.stdout, verify.output[-4000:]
    assert "does not belong to this checkpoint" in verify.stdout
    result = mnframe(
        *SMALL,
        "trainer.stop=[9,iteration]",
        f"hydra.run.dir={run}",
        cwd=tmp_path,
        env={"MNFRAME_COLLECTIVE_TIMEOUT": "60"},
        timeout=150,
    )
    out = result.output
    assert result.returncode == 0 and "Traceback" not in out, out[-4000:]
    assert (
        "does not belong to this checkpoint" in out and f"resumed from {run / 'checkpoints' / 'iter_00000003'}" in out
    )
    assert (run / "checkpoints" / "iter_00000006.damaged").is_dir() and (run / "checkpoints" / "iter_00000009").is_dir()
