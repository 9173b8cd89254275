"""The tensorboard logger in one process: every LogReport entry lands in the event
files once, also across a resume (entries restored from the checkpoint are not
written again)."""

import json

import pytest

from mnframe import pipeline
from mnframe.builder.validate import validate
from mnframe.config import compose as C
from mnframe.testing.tensorboard_events import read_scalars


def _run(run_dir, stop):
    raw = C.compose(
        [
            "logger=tensorboard",
            "extensions=minimal",
            "model.n_units=8",
            "dataset.batch_size=16",
            f"trainer.stop=[{stop},iteration]",
            "checkpoint.interval=2",
            "extensions.log_report.interval=1",
            "extensions.log_report.unit=iteration",
        ]
    )
    pipeline.run(validate(raw, 1), str(run_dir), config=raw, config_hash="x")


def test_each_log_entry_is_written_once_across_a_resume(tmp_path):
    _run(tmp_path, 4)
    _run(tmp_path, 6)  # resumes from iteration 4
    log = json.loads((tmp_path / "log").read_text())
    assert [e["iteration"] for e in log] == [1, 2, 3, 4, 5, 6]
    steps = []
    for path in sorted((tmp_path / "tensorboard").glob("events.out.tfevents.*")):
        losses = read_scalars(path)["main/loss"]
        steps += sorted(losses)
        for step, value in losses.items():
            assert value == pytest.approx(log[step - 1]["main/loss"], rel=1e-6)
    assert steps == [1, 2, 3, 4, 5, 6]


def test_the_extra_installs_the_viewer_the_docs_tell_users_to_run(tmp_path):
    """Issue 38 item 11: `pip install 'mnframe[tensorboard]'` brings `tensorboard --logdir runs/`,
    and that TensorBoard reads what logger=tensorboard wrote."""
    import re
    from pathlib import Path

    pyproject = (Path(__file__).parents[2] / "pyproject.toml").read_text()
    [line] = [ln for ln in pyproject.splitlines() if ln.startswith("tensorboard = [")]  # no tomllib on 3.10
    extra = re.findall(r'"([^"]+)"', line.split("#")[0])
    assert any(r.startswith("tensorboardX") for r in extra) and any(r.startswith("tensorboard>") for r in extra)
    accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    _run(tmp_path, 3)
    events = accumulator.EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    assert [e.step for e in events.Scalars("main/loss")] == [1, 2, 3]
