"""After training: ``python -m mnframe evaluate``, ``predict`` and ``-m tune=optuna`` (issue 26, items 1-3).

A tiny mnist run (data parallel, 2 ranks) and a tiny mnist_model_parallel run are
trained once per module; evaluate and predict run on 1, 2 and 3 ranks under
``mpiexec`` with a timeout, and their numbers are checked against the exported
weights applied with NumPy in this process (the same example-weighted mean on any
number of ranks, the same outputs in input order). The search runs three trials
(the first one's sampled batch size is invalid: a failed trial, the study goes on),
then resumes with one more. Unit tests cover the readers and the objective.
"""

import csv
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

from mnframe.runtime.errors import ConfigError
from mnframe.testing import run_mpi

REPO = Path(__file__).resolve().parent.parent
TIMEOUT = 240


def mnframe(*args, cwd, n=2, env=None):
    result = run_mpi(
        ["-m", "mnframe", *args], n=n, timeout=TIMEOUT, cwd=str(cwd), env={"PYTHONPATH": str(REPO), **(env or {})}
    )
    assert not result.timed_out, result.output[-4000:]
    return result


def ok(result):
    assert result.returncode == 0, result.output[-4000:]
    assert "Traceback" not in result.output, result.output[-4000:]
    return result


def digits_test():
    from mnframe.recipes.mnist.data import get_datasets

    _, test = get_datasets()
    x = np.stack([test[i][0] for i in range(len(test))])
    y = np.array([test[i][1] for i in range(len(test))])
    return x, y


def dense(npz, prefix, h, relu=True):
    out = h @ npz[f"{prefix}/W"].T + npz[f"{prefix}/b"]
    return np.maximum(out, 0) if relu else out


def mlp_logits(model_npz, x):
    z = np.load(model_npz, allow_pickle=False)
    return dense(z, "l3", dense(z, "l2", dense(z, "l1", x)), relu=False)


def mp_logits(run_dir, x):
    r0 = np.load(run_dir / "model_rank0.npz", allow_pickle=False)
    r1 = np.load(run_dir / "model_rank1.npz", allow_pickle=False)
    return dense(r0, "1/l3", dense(r1, "0/l2", dense(r0, "0/l1", x)), relu=False)


def metrics_of(logits, y):
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_p = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    return {
        "validation/main/loss": float(-log_p[np.arange(len(y)), y].mean()),
        "validation/main/accuracy": float((logits.argmax(axis=1) == y).mean()),
    }


def assert_metrics(record, expected, examples):
    assert record["examples"] == examples
    assert sorted(record["metrics"]) == sorted(expected)
    for key, value in expected.items():
        assert record["metrics"][key] == pytest.approx(value, abs=2e-5), key


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("lifecycle")


@pytest.fixture(scope="module")
def dp_run(work):
    """mnist, 2 ranks, 10 iterations, a checkpoint every 5."""
    ok(
        mnframe(
            "model.n_units=16",
            "trainer.stop=[10,iteration]",
            "extensions=minimal",
            "checkpoint.interval=5",
            "hydra.run.dir=dp",
            cwd=work,
        )
    )
    return work / "dp"


@pytest.fixture(scope="module")
def mp_run(work):
    """mnist_model_parallel (2 ranks), 10 iterations."""
    ok(
        mnframe(
            "recipe=mnist_model_parallel",
            "trainer.stop=[10,iteration]",
            "extensions=minimal",
            "hydra.run.dir=mp",
            cwd=work,
        )
    )
    return work / "mp"


# -- evaluate ------------------------------------------------------------------------


def test_evaluate_on_3_ranks_is_the_example_weighted_mean(dp_run):
    x, y = digits_test()
    result = ok(mnframe("evaluate", str(dp_run), n=3, cwd=dp_run.parent))
    record = json.loads((dp_run / "eval" / "metrics.json").read_text())
    assert_metrics(record, metrics_of(mlp_logits(dp_run / "model.npz", x), y), examples=297)  # 297 = 99 x 3
    assert record["ranks"] == 3 and record["weights"] == "model.npz"
    assert (
        "validation/main/accuracy" in result.stdout and result.stdout.count("evaluated ") == 1
    )  # rank 0 prints the table


def test_evaluate_an_interrupted_run_on_other_data_on_1_rank(dp_run, work):
    """No model.npz (an interrupted run): the newest checkpoint; the data named by overrides."""
    x, y = digits_test()
    x, y = x[:40], y[:40]
    other = work / "other"
    other.mkdir()
    np.savez(other / "train.npz", x=x, y=y)
    np.savez(other / "test.npz", x=x, y=y)
    interrupted = work / "interrupted"
    shutil.copytree(dp_run, interrupted)
    (interrupted / "model.npz").unlink()
    ok(
        mnframe(
            "evaluate", str(interrupted), "dataset.source.source=mnist", f"dataset.source.path={other}", n=1, cwd=work
        )
    )
    record = json.loads((interrupted / "eval" / "metrics.json").read_text())
    assert record["weights"] == "checkpoint iter_00000010"  # the final checkpoint: the same weights as model.npz
    assert_metrics(record, metrics_of(mlp_logits(dp_run / "model.npz", x), y), examples=40)


def test_evaluate_refuses_a_model_that_does_not_match_naming_the_parameter(dp_run):
    result = mnframe("evaluate", str(dp_run), "model.n_units=32", cwd=dp_run.parent)
    out = result.output
    assert result.returncode == 2, out[-4000:]
    assert "Traceback" not in out
    line = "mnframe: configuration error: parameter l1/b has shape (16,) in model.npz but (32,) in the model built"
    assert out.count(line) == 1, out[-4000:]


# -- predict -------------------------------------------------------------------------


def test_predict_on_3_ranks_keeps_the_input_order_and_ids(dp_run, work):
    x, _ = digits_test()
    x = x[:50]
    ids = np.arange(1000, 1050)[::-1]
    np.savez(work / "new.npz", x=x, ids=ids)
    ok(mnframe("predict", str(dp_run), str(work / "new.npz"), n=3, cwd=work))
    out = np.load(dp_run / "predict" / "new.npz", allow_pickle=False)
    expected = mlp_logits(dp_run / "model.npz", x)
    np.testing.assert_array_equal(out["ids"], ids)
    np.testing.assert_allclose(out["y"], expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(out["label"], expected.argmax(axis=1))


def test_model_parallel_evaluate_and_predict_csv(mp_run, work):
    x, y = digits_test()
    expected = mp_logits(mp_run, x)
    ok(mnframe("evaluate", str(mp_run), cwd=work))
    assert_metrics(json.loads((mp_run / "eval" / "metrics.json").read_text()), metrics_of(expected, y), examples=297)

    rows = [["id"] + [f"p{i}" for i in range(64)]] + [[f"img{i}"] + [repr(float(v)) for v in x[i]] for i in range(7)]
    with open(work / "new.csv", "w", newline="") as f:
        csv.writer(f).writerows(rows)
    ok(mnframe("predict", str(mp_run), str(work / "new.csv"), "--out", str(work / "mp.csv"), cwd=work))
    with open(work / "mp.csv", newline="") as f:
        table = list(csv.reader(f))
    assert table[0] == ["id", "label"] + [f"y_{i}" for i in range(10)]
    assert [r[0] for r in table[1:]] == [f"img{i}" for i in range(7)]
    assert [int(r[1]) for r in table[1:]] == list(expected[:7].argmax(axis=1))
    np.testing.assert_allclose(
        np.array([[float(v) for v in r[2:]] for r in table[1:]]), expected[:7], rtol=1e-4, atol=1e-5
    )


# -- tune ----------------------------------------------------------------------------


TUNE = [
    "-m",
    "tune=optuna",
    "model.n_units=16",
    "trainer.stop=[1,epoch]",  # 8 iterations of 2 x 100 examples, then the evaluator and the log
    "extensions=minimal",
    "+extensions.evaluator.enabled=true",
    "optimizer.alpha=tag(log,interval(0.0001,0.1))",
    "dataset.batch_size=choice(-1,100)",  # -1: the trial fails validation
    "hydra.sweep.dir=study",
]


def test_tune_records_failed_trials_writes_the_study_and_resumes(work):
    pytest.importorskip("optuna")  # scripts/setup.sh installs the tune extra
    import optuna

    result = ok(mnframe(*TUNE, "tune.n_trials=3", cwd=work))
    study_dir = work / "study"
    storage = f"sqlite:///{study_dir / 'study.db'}"
    trials = optuna.load_study(study_name="mnist", storage=storage).trials
    assert [t.state.name for t in trials] == ["FAIL", "COMPLETE", "COMPLETE"], result.output[-4000:]
    assert "dataset.batch_size: Input should be greater than 0 (got -1)" in result.output
    for trial in trials[1:]:  # the value is the trial run's last validation/main/accuracy
        (run_dir,) = [p for p in study_dir.iterdir() if f"optimizer.alpha={trial.params['optimizer.alpha']}" in p.name]
        log = json.loads((run_dir / "log").read_text())
        assert trial.value == [e for e in log if "validation/main/accuracy" in e][-1]["validation/main/accuracy"]
    best = yaml.safe_load((study_dir / "optimization_results.yaml").read_text())
    assert best["best_value"] == max(t.value for t in trials[1:])

    result = ok(mnframe(*TUNE, "tune.n_trials=4", cwd=work))  # resumes: one trial left
    assert "3 of 4 trials done, 1 to run" in result.output
    trials = optuna.load_study(study_name="mnist", storage=storage).trials
    assert len(trials) == 4 and trials[3].state.name in ("COMPLETE", "FAIL")
    assert trials[3].params != trials[0].params  # the sampler does not start over


def test_tune_without_the_plugin_names_the_package(tmp_path):
    stub = tmp_path / "stub"
    (stub / "optuna").mkdir(parents=True)
    (stub / "optuna" / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'optuna'\", name='optuna')\n"
    )
    result = mnframe("-m", "tune=optuna", cwd=tmp_path, n=1, env={"PYTHONPATH": f"{stub}:{REPO}"})
    assert result.returncode == 3, result.output[-4000:]
    assert result.output.count('pip install "mnframe[tune]"') == 1 and "Traceback" not in result.output


# -- units -----------------------------------------------------------------------------


def test_reduce_metric_and_its_errors():
    from mnframe.commands.tune import reduce_metric

    log = [{"a": 0.5, "b": 1.0}, {"b": 3.0}, {"a": 0.25, "b": 2.0}]
    assert reduce_metric(log, "a", "last") == (0.25, None)
    assert reduce_metric(log, "b", "max") == (3.0, None)
    assert reduce_metric(log, "b", "min") == (1.0, None)
    value, error = reduce_metric(log, "c", "last")
    assert value is None and error.startswith("tune.metric: 'c' is not in the run's log (it logs a, b)")
    assert reduce_metric([{"a": float("nan")}], "a", "last")[1] == "tune.metric: a is NaN (the trial diverged)"
    assert reduce_metric(None, "a", "last")[1].startswith("tune.metric: the run has no LogReport")


def test_read_inputs(tmp_path):
    from mnframe.commands.predict import read_inputs

    example = np.zeros((3, 2, 2), np.float32)
    (tmp_path / "a.csv").write_text("id,p0,p1,p2,p3,p4,p5,p6,p7,p8,p9,p10,p11\n" + "x,1,2,3,4,5,6,7,8,9,10,11,12\n")
    ids, x = read_inputs(str(tmp_path / "a.csv"), example)
    assert ids.tolist() == ["x"] and x.shape == (1, 3, 2, 2) and x.dtype == np.float32 and x[0, 2, 1, 1] == 12
    np.savez(tmp_path / "b.npz", data=np.ones((4, 12)))
    ids, x = read_inputs(str(tmp_path / "b.npz"), example)
    assert ids.tolist() == [0, 1, 2, 3] and x.shape == (4, 3, 2, 2)
    np.savez(tmp_path / "c.npz", x=np.ones((4, 5)))
    with pytest.raises(ConfigError, match=r"each example has shape \(5,\), but the model takes \(3, 2, 2\)"):
        read_inputs(str(tmp_path / "c.npz"), example)
    with pytest.raises(ConfigError, match="does not exist"):
        read_inputs(str(tmp_path / "none.npz"), example)


def test_bad_arguments_are_one_line_config_errors():
    from mnframe.commands.evaluate import parse_args as evaluate_args
    from mnframe.commands.predict import parse_args as predict_args
    from mnframe.commands.trained import apply_overrides

    with pytest.raises(ConfigError, match="mnframe evaluate: the following arguments are required: run_dir"):
        evaluate_args([])
    with pytest.raises(ConfigError, match="--batch-size: must be a positive number"):
        predict_args(["run", "in.npz", "--batch-size", "0"])
    with pytest.raises(ConfigError, match=r"--out p.txt: name a .npz or .csv file"):
        predict_args(["run", "in.npz", "--out", "p.txt"])
    with pytest.raises(ConfigError, match="override 'model.n_units': write key=value"):
        apply_overrides({"model": {"n_units": 1}}, ["model.n_units"])
    assert apply_overrides({"model": {"n_units": 1}}, ["model.n_units=8"]) == {"model": {"n_units": 8}}


def test_read_an_image_folder(tmp_path):
    Image = pytest.importorskip("PIL.Image")  # the recipes extra (scripts/setup.sh installs it)
    from mnframe.commands.predict import read_inputs

    for name, colour in (("b.png", (255, 0, 0)), ("a.jpg", (0, 0, 255))):
        Image.new("RGB", (40, 30), colour).save(tmp_path / name)
    (tmp_path / "notes.txt").write_text("not an image")
    ids, x = read_inputs(str(tmp_path), np.zeros((3, 8, 8), np.float32))
    assert ids.tolist() == ["a.jpg", "b.png"]  # sorted by name
    assert x.shape == (2, 3, 8, 8) and x.dtype == np.float32
    np.testing.assert_allclose(x[1, 0], 1.0) and np.testing.assert_allclose(x[1, 1:], 0.0)  # red, in [0, 1]
    assert x[0, 2].mean() > 0.9 and x[0, 0].mean() < 0.1  # blue (JPEG: nearly)
    with pytest.raises(ConfigError, match=r"examples have shape \(64,\), not \(channels, height, width\)"):
        read_inputs(str(tmp_path), np.zeros(64, np.float32))
