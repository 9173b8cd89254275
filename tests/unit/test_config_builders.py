"""The builders on one process: every data strategy, optimizer hooks and an lr
schedule, a few iterations each (the MPI paths are in tests/mpi/test_runner_*)."""

import json

import pytest

from mnframe import pipeline
from mnframe.builder.validate import validate
from mnframe.config import compose as C


@pytest.fixture(scope="module")
def base():
    return C.compose(
        [
            "recipe=mnist",
            "optimizer=momentum_sgd",
            "extensions=minimal",
            "model.n_units=8",
            "dataset.batch_size=16",
            "trainer.stop=[3,iteration]",
            "checkpoint.interval=2",
            "optimizer.weight_decay=0.0001",
            "optimizer.gradient_clipping=5.0",
            "+optimizer.lr_schedule={kind: exponential_shift, rate: 0.5, interval: 1, unit: iteration}",
            "+extensions.lr={kind: observe_lr, interval: 1, unit: iteration}",
            "extensions.log_report.interval=1",
            "extensions.log_report.unit=iteration",
        ]
    )


@pytest.mark.parametrize("strategy", ["scatter", "shard", "multi_node_iterator", "synchronized", "replicate"])
def test_pipeline_runs(base, strategy, tmp_path):
    raw = dict(base, dataset=dict(base["dataset"], strategy=strategy))
    cfg = validate(raw, 1)
    trainer = pipeline.run(cfg, str(tmp_path), config=raw, config_hash="x")
    assert trainer.updater.iteration == 3
    log = json.loads((tmp_path / "log").read_text())
    assert [round(e["lr"], 6) for e in log] == [0.01, 0.005, 0.0025]  # halved every step
    assert (tmp_path / "checkpoints" / "iter_00000002").is_dir()
