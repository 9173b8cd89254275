"""A background checkpoint write that fails (a full disk on rank 1) ends a ``python -m mnframe``
job as a failed synchronous save does: one line, exit 1 on every rank, the previous checkpoint
kept, no traceback (issue 31)."""

from pathlib import Path

from mnframe.testing import run_mpi
from mnframe.testing.faults import FULL_DISK_RUNNER

REPO = Path(__file__).resolve().parent.parent


def test_failed_background_save_is_one_line_exit_1_and_keeps_the_previous_checkpoint(tmp_path):
    script = tmp_path / "runner.py"
    script.write_text(FULL_DISK_RUNNER)
    run = tmp_path / "run"
    args = ["extensions=minimal", "trainer.stop=[8,iteration]", "checkpoint.interval=2", "checkpoint.async_save=true"]
    r = run_mpi([script, *args, f"hydra.run.dir={run}"], n=2, timeout=180, env={"PYTHONPATH": str(REPO)}, cwd=str(REPO))
    assert not r.timed_out, r.output[-3000:]
    assert r.returncode == 1, r.output[-3000:]
    lines = [x for x in r.stderr.splitlines() if x.startswith("mnframe: save failed:")]
    assert len(lines) == 1, r.stderr[-3000:]
    path = run / "checkpoints" / ".tmp-async-iter_00000004" / "rank_00001.npz"
    assert f"checkpoint iter_00000004 not written (in the background): rank 1 could not write {path} (" in lines[0]
    assert "needed): [Errno 28] No space left on device" in lines[0]
    assert f"the previous checkpoint {run / 'checkpoints' / 'iter_00000002'} is kept" in lines[0]
    assert "Traceback" not in r.output
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["iter_00000002"]
    assert not (run / "model.npz").exists()
