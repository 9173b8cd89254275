"""communicator.compression=powersgd in whole runner jobs: a run checkpointed at iteration 6 and
resumed ends bitwise like the uninterrupted run (error feedback and Q are in the rank files); a
resume on 3 ranks starts the compression state afresh and says so in one line."""

from pathlib import Path

import numpy as np
import pytest

from mnframe.testing import run_mpi

REPO = Path(__file__).resolve().parent.parent
TIMEOUT = 180
SMALL = [
    "model.n_units=64",
    "communicator.compression=powersgd",
    "communicator.powersgd_start_iter=2",
    "extensions=minimal",
    "checkpoint.interval=6",
]


def mnframe(n, run_dir, *args):
    result = run_mpi(
        ["-m", "mnframe", *SMALL, f"hydra.run.dir={run_dir}", *args],
        n=n,
        timeout=TIMEOUT,
        cwd=str(REPO),
        env={"PYTHONPATH": str(REPO)},
    )
    assert not result.timed_out and result.returncode == 0, result.output[-4000:]
    return result


def model_arrays(run_dir):
    with np.load(Path(run_dir) / "model.npz") as z:
        return {k: z[k] for k in z.files}


@pytest.mark.slow
def test_resume_is_bitwise_the_uninterrupted_run_and_a_resize_starts_afresh(tmp_path):
    whole = mnframe(2, tmp_path / "whole", "trainer.stop=[12,iteration]")
    assert "powersgd: compressed averaging started" in whole.stderr
    mnframe(2, tmp_path / "cut", "trainer.stop=[6,iteration]")
    ckpts = sorted(p.name for p in (tmp_path / "cut" / "checkpoints").glob("iter_*"))
    assert ckpts == ["iter_00000006"]
    resumed = mnframe(2, tmp_path / "cut", "trainer.stop=[12,iteration]")
    assert "resumed from" in resumed.stderr and "starts afresh" not in resumed.stderr
    a, b = model_arrays(tmp_path / "whole"), model_arrays(tmp_path / "cut")
    assert a and a.keys() == b.keys()
    assert all(a[k].tobytes() == b[k].tobytes() for k in a), [k for k in a if a[k].tobytes() != b[k].tobytes()]
    # on 3 ranks: resumed (the replicas agree on everything but the per-rank PowerSGD state), afresh
    grown = mnframe(3, tmp_path / "cut", "trainer.stop=[15,iteration]")
    assert "world size 2 -> 3" in grown.stderr, grown.stderr[-3000:]
    afresh = [line for line in grown.stderr.splitlines() if "starts afresh" in line]
    assert afresh == ["mnframe powersgd: compression state (Q, error feedback) starts afresh: the world size changed"]


@pytest.mark.slow
def test_bench_prints_float32_and_powersgd_bytes_under_a_twentieth():
    result = run_mpi([str(REPO / "bench" / "bench_powersgd_bytes.py")], n=2, timeout=TIMEOUT, cwd=str(REPO))
    assert not result.timed_out and result.returncode == 0, result.output[-4000:]
    lines = {line.split("  ")[0]: line.split() for line in result.stdout.splitlines()}
    assert lines["float32"][1:3] == ["1796010", "7184040"]
    assert lines["powersgd rank 4"][3:5] == ["21186", "84744"]
    assert "counted in the communicator: powersgd 84744 bytes" in result.stdout
    assert "powersgd / float32 = 1/84.8 (target: at most 1/20): ok" in result.stdout
