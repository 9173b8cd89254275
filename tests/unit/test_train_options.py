"""Issue 26 (items 4-7) in one process: the warm-up and cosine schedules (values and
resume), the csv and mlflow loggers (every entry once, also across a resume from an
older checkpoint), and the messages bad values of the new options get."""

import csv
import json
import shutil

import pytest

from mnframe import pipeline
from mnframe.builder.validate import validate
from mnframe.config import compose as C
from mnframe.config.issues import ConfigError
from mnframe.extensions.lr_schedules import cosine_factor, warmup_factor
from mnframe.runtime.errors import DependencyError

SMALL = [
    "extensions=minimal",
    "model.n_units=8",
    "dataset.batch_size=16",
    "extensions.log_report.interval=1",
    "extensions.log_report.unit=iteration",
]


def _run(run_dir, stop, *overrides, interval=2):
    raw = C.compose([*SMALL, f"trainer.stop=[{stop},iteration]", f"checkpoint.interval={interval}", *overrides])
    pipeline.run(validate(raw, 1), str(run_dir), config=raw, config_hash="x")
    return json.loads((run_dir / "log").read_text())


def refused(*overrides):
    with pytest.raises(ConfigError) as info:
        validate(C.compose(list(overrides)), 1)
    return str(info.value)


# -- schedules ------------------------------------------------------------------


def test_schedule_factors():
    assert [warmup_factor(t, 4) for t in range(6)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]
    assert cosine_factor(0, 10, 0, 0.0) == 1.0
    assert cosine_factor(5, 10, 0, 0.0) == pytest.approx(0.5)
    assert cosine_factor(10, 10, 0, 0.1) == pytest.approx(0.1)
    assert cosine_factor(20, 10, 0, 0.1) == pytest.approx(0.1)  # stays at the floor
    assert cosine_factor(1, 10, 2, 0.0) == 1.0  # end of warm-up
    assert cosine_factor(6, 10, 2, 0.0) == pytest.approx(0.5)


def test_schedules_change_alpha_where_lr_is_derived():
    import chainer

    from mnframe.config.schema_schedules import _rate_attr

    assert _rate_attr(None, chainer.optimizers.Adam()) == "alpha"
    assert _rate_attr(None, chainer.optimizers.MomentumSGD()) == "lr"
    assert _rate_attr("eps", chainer.optimizers.Adam()) == "eps"


def test_cosine_with_warmup_sets_each_update_s_lr_and_resumes_on_the_curve(tmp_path):
    opts = (
        "optimizer=sgd",
        "optimizer.lr=0.2",
        "+optimizer.lr_schedule={kind: cosine, warmup: 2, min_ratio: 0.1}",  # total: trainer.stop
        "+extensions.observe_lr={interval: 1, unit: iteration}",
    )
    _run(tmp_path, 4, *opts, "trainer.stop=[8,iteration]", interval=4)
    shutil.rmtree(tmp_path / "checkpoints" / "iter_00000008")  # keep iteration 4 only
    (tmp_path / "log").unlink()
    log = _run(tmp_path, 8, *opts, interval=4)  # resumes at 4 with the schedule's saved start value
    # observe_lr reports the value update t used (t - 1 updates made before it)
    expected = [0.2 * cosine_factor(t - 1, 8, 2, 0.1) for t in range(1, 9)]
    assert [e["iteration"] for e in log] == list(range(1, 9))
    assert [e["lr"] for e in log] == pytest.approx(expected)


def test_warmup_reaches_the_optimizer_s_rate(tmp_path):
    log = _run(
        tmp_path,
        5,
        "optimizer=sgd",
        "optimizer.lr=0.4",
        "+optimizer.lr_schedule={kind: warmup, length: 4}",
        "+extensions.observe_lr={interval: 1, unit: iteration}",
    )
    assert [e["lr"] for e in log] == pytest.approx([0.4 * min(1.0, t / 4) for t in range(1, 6)])


# -- loggers --------------------------------------------------------------------


def test_csv_logger_holds_every_log_entry_once_across_a_resume(tmp_path):
    _run(tmp_path, 4, "logger=csv")
    shutil.rmtree(tmp_path / "checkpoints" / "iter_00000004")  # as if killed after logging 3 and 4
    log = _run(tmp_path, 6, "logger=csv")
    with open(tmp_path / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["iteration"]) for r in rows] == [1, 2, 3, 4, 5, 6]
    assert [float(r["main/loss"]) for r in rows] == pytest.approx([e["main/loss"] for e in log], rel=1e-9)


@pytest.mark.slow  # a subprocess or many config compositions: the full tier
def test_mlflow_logger_continues_the_same_run_without_duplicate_steps(tmp_path):
    pytest.importorskip("mlflow", reason="mlflow is an optional extra: pip install 'mnframe[mlflow]'")
    from mlflow.tracking import MlflowClient

    _run(tmp_path, 4, "logger=mlflow", "optimizer.alpha=0.002")
    first = json.loads((tmp_path / "mlflow_run.json").read_text())
    assert first["last_step"] == 4
    shutil.rmtree(tmp_path / "checkpoints" / "iter_00000004")  # resume from 2: steps 3, 4 were logged already
    log = _run(tmp_path, 6, "logger=mlflow", "optimizer.alpha=0.002")
    state = json.loads((tmp_path / "mlflow_run.json").read_text())
    assert state["run_id"] == first["run_id"] and state["last_step"] == 6
    client = MlflowClient(tracking_uri=state["tracking_uri"])
    history = client.get_metric_history(state["run_id"], "main/loss")
    assert sorted(m.step for m in history) == [1, 2, 3, 4, 5, 6]  # each step once
    by_step = {m.step: m.value for m in history}
    for entry in log:  # a resume is exact: the values of the killed job are the resumed job's
        assert by_step[entry["iteration"]] == pytest.approx(entry["main/loss"], rel=1e-6)
    run = client.get_run(state["run_id"])
    assert run.data.params["optimizer.alpha"] == "0.002"
    assert run.data.params["trainer.stop"] == '[4, "iteration"]'  # the first job's config
    assert run.data.params["name"] == "mnist"
    assert run.info.status == "FINISHED"
    assert len(client.search_runs([run.info.experiment_id])) == 1


def test_mlflow_missing_is_an_environment_problem_naming_the_package(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "mlflow" else real(name, *a))
    with pytest.raises(DependencyError) as info:
        validate(C.compose(["logger=mlflow"]), 1)
    text = str(info.value)
    assert "\n" not in text and "mlflow" in text and "pip install 'mnframe[mlflow]'" in text


# -- messages -------------------------------------------------------------------


@pytest.mark.parametrize(
    "overrides, key, words",
    [
        (("updater.accumulate=0",), "updater.accumulate", "positive integer"),
        (("updater.accumulate=many",), "updater.accumulate", "auto"),
        (
            ("updater.accumulate=2", "updater._target_=mnframe.training.micro_batch.PhaseTimer"),
            "updater.accumulate",
            "standard updater",
        ),
        (("debug=overfit", "debug.overfit_batches=0"), "debug.overfit_batches", "greater than 0"),
        (("debug.mode=slow",), "debug.mode", "fast"),
        (("+optimizer.lr_schedule={kind: cosin}",), "optimizer.lr_schedule.kind", "did you mean 'cosine'"),
        (("+optimizer.lr_schedule={kind: cosine, total: 5, warmup: 5}",), "optimizer.lr_schedule", "warmup"),
        (("+optimizer.lr_schedule={kind: warmup}",), "optimizer.lr_schedule.length", "missing"),
        (("logger=csv", "extensions.log_report.enabled=false"), "extensions.csv.log_report", "log_report"),
        (("logger=csv", "extensions.csv.file_name="), "extensions.csv.file_name", "at least 1"),
    ],
)
def test_bad_values_of_the_new_options_name_their_key(overrides, key, words):
    text = refused(*overrides)
    lines = [ln for ln in text.splitlines() if ln.strip().startswith(key + ":")]
    assert lines, text
    assert words in lines[0], lines[0]
