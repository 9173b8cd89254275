"""``updater.accumulate=auto`` keeps the global batch when a run resumes on fewer ranks
(issue 26, item 6): a 2-rank run with batch 10 per rank (global 20) resumes on 1 rank
accumulating 2 micro-batches, trains on, and a resume on 3 ranks, whose micro-batches
(30) cannot make 20, is refused with one line naming updater.accumulate (exit 2)."""

import json
from pathlib import Path

from mnframe.testing import run_mpi

REPO = Path(__file__).resolve().parent.parent
TIMEOUT = 180
SMALL = [
    "model.n_units=16",
    "dataset.batch_size=10",
    "extensions=minimal",
    "extensions.log_report.interval=1",
    "extensions.log_report.unit=iteration",
    "checkpoint.interval=2",
    "updater.accumulate=auto",
]


def mnframe(n, run_dir, *args):
    result = run_mpi(
        ["-m", "mnframe", *SMALL, f"hydra.run.dir={run_dir}", *args],
        n=n,
        timeout=TIMEOUT,
        cwd=str(run_dir.parent),
        env={"PYTHONPATH": str(REPO)},
    )
    assert not result.timed_out, result.output[-4000:]
    return result


def test_auto_accumulation_keeps_the_global_batch_on_fewer_ranks(tmp_path):
    run_dir = tmp_path / "run"
    first = mnframe(2, run_dir, "trainer.stop=[4,iteration]")
    assert first.returncode == 0, first.output[-4000:]
    assert "1 micro-batch(es) of 20 examples per update (global batch 20)" in first.output

    fewer = mnframe(1, run_dir, "trainer.stop=[6,iteration]")
    assert fewer.returncode == 0, fewer.output[-4000:]
    assert "2 micro-batch(es) of 10 examples per update (global batch 20)" in fewer.output
    log = json.loads((run_dir / "log").read_text())
    assert [e["iteration"] for e in log] == [1, 2, 3, 4, 5, 6]

    more = mnframe(3, run_dir, "trainer.stop=[8,iteration]")
    assert more.returncode == 2, more.output[-4000:]
    assert "Traceback" not in more.output
    lines = [ln for ln in more.output.splitlines() if "updater.accumulate: auto cannot keep" in ln]
    assert len(lines) == 1, more.output[-4000:]
    assert "global batch of 20" in lines[0] and "30 per micro-batch" in lines[0]
