"""``python -m mnframe --check --predict ...`` (issue 39 item 4): parsing, one line for bad input,
and the report's shape (every algorithm and wire, the configured one marked, the prediction)."""

import os
import re
import subprocess
import sys

import pytest

from mnframe.commands import cli, step_time
from mnframe.config.issues import ConfigError

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def test_a_spec_is_read_with_its_defaults():
    spec = step_time.parse_spec("nodes=4,link=10gbit", 8)
    assert (spec.nodes, spec.rate_bps, spec.shared, spec.compute_ms) == (4, 10e9, False, None)
    assert spec.latency_us > 0 and spec.cores >= 1
    spec = step_time.parse_spec("nodes=2, link=2.5gbit, latency_us=20, cores=16, shared=true, compute_ms=12", 2)
    assert (spec.rate_bps, spec.latency_us, spec.cores, spec.shared, spec.compute_ms) == (2.5e9, 20, 16, True, 12)
    assert step_time.link_rate("100mbit") == 1e8


@pytest.mark.parametrize(
    "text,world,needle",
    [
        ("link=1gbit", 2, "nodes missing"),
        ("nodes=2", 2, "link missing"),
        ("nodes=3,link=1gbit", 4, "--world-size 4 is not a multiple of nodes=3"),
        ("nodes=0,link=1gbit", 2, "nodes='0': expected a positive integer"),
        ("nodes=2,link=fast", 2, "link='fast': expected a rate like 1gbit"),
        ("nodes=2,link=1gbit,speed=3", 2, "'speed=3' is not one of key=value"),
        ("nodes=2,link=1gbit,shared=yes", 2, "shared='yes': expected true or false"),
        ("nodes=2,link=1gbit,compute_ms=-1", 2, "compute_ms='-1': expected a positive number"),
    ],
)
def test_bad_specs_are_one_line_naming_the_key(text, world, needle):
    with pytest.raises(ConfigError) as info:
        step_time.parse_spec(text, world)
    message = str(info.value)
    assert needle in message and "\n" not in message and message.startswith("--predict: ")


def test_predict_applies_only_to_check():
    opts, rest = cli.parse_own_flags(["--predict", "nodes=2,link=1gbit"])
    assert "--predict applies only to --check" in cli.flags_problem(opts, rest)


def _rows(text):
    return [ln for ln in text.splitlines() if re.match(r"  (naive|flat|hierarchical|two_dimensional)\b", ln)]


def test_the_report_has_every_algorithm_and_wire_and_the_configured_prediction():
    text = cli.check(
        ["recipe=mnist", "model.n_units=50", "optimizer.overlap=false"],
        4,
        predict="nodes=2,link=1gbit,compute_ms=10,cores=2,shared=true",
    )
    rows = _rows(text)
    assert len(rows) == 8 and [r.split()[0] for r in rows[::2]] == ["naive", "flat", "hierarchical", "two_dimensional"]
    assert [r for r in rows if "*" in r] == [r for r in rows if r.split()[:3] == ["two_dimensional", "*", "float32"]]
    assert "compute per rank: 10.0 ms (given" in text and "x 2.00 (4 rank(s) on 2 cores) = 20.0 ms" in text
    m = re.search(r"^predicted: ([0-9.]+) ms/iteration, ([0-9]+) examples/s \(two_dimensional, float32", text, re.M)
    assert m and float(m.group(1)) > 20.0
    assert int(m.group(2)) == pytest.approx(50 * 4 / float(m.group(1)) * 1e3, rel=0.01)  # ex/s of 4 ranks x 50
    assert re.search(r"^fastest: \w+, float(16|32) wire", text, re.M)
    # the float16 rows put half the bytes on the link
    mb = {tuple(r.split()[:2]): float(r.split()[2]) for r in rows if "*" not in r}
    assert mb[("flat", "float16")] == pytest.approx(mb[("flat", "float32")] / 2, abs=0.01)


def test_an_overlap_config_hides_part_of_the_averaging():
    spec = "nodes=2,link=1gbit,compute_ms=30,cores=4"  # a core to spare per rank
    text = cli.check(["recipe=mnist", "optimizer.overlap=true"], 2, predict=spec)
    assert "overlap on" in text
    hidden = [float(r.split()[-3]) for r in _rows(text)]
    assert all(h > 0 for h in hidden)
    # overlap=auto is the trial's pick with autotune (on: the faster here), off without autotune
    assert "overlap on" in cli.check(["recipe=mnist", "optimizer.overlap=auto"], 2, predict=spec)
    # no spare core (every node on 2 shared cores): nothing hides, the trial keeps the old default
    shared = "nodes=2,link=1gbit,compute_ms=30,shared=true,cores=2"
    text = cli.check(["recipe=mnist", "optimizer.overlap=true"], 2, predict=shared)
    assert all(float(r.split()[-3]) == 0 for r in _rows(text))
    assert "overlap off" in cli.check(["recipe=mnist", "optimizer.overlap=auto"], 2, predict=shared)
    off = cli.check(["recipe=mnist", "optimizer.overlap=auto", "optimizer.autotune=false"], 2, predict=spec)
    assert "overlap off" in off and all(float(r.split()[-3]) == 0 for r in _rows(off))
    off = cli.check(["recipe=mnist", "optimizer.overlap=false"], 2, predict=spec)
    assert "overlap off" in off and all(float(r.split()[-3]) == 0 for r in _rows(off))


@pytest.mark.slow
def test_the_command_measures_compute_and_refuses_bad_input_in_one_line():
    run = [sys.executable, "-m", "mnframe", "recipe=mnist", "model.n_units=50", "--check", "--world-size", "2"]
    ok = subprocess.run(
        run + ["--predict", "nodes=2,link=1gbit"], capture_output=True, text=True, cwd=REPO, timeout=120
    )
    assert ok.returncode == 0, ok.stderr
    assert re.search(r"compute per rank: [0-9.]+ ms \(measured", ok.stdout)
    assert re.search(r"^predicted: [0-9.]+ ms/iteration", ok.stdout, re.M)
    bad = subprocess.run(
        run + ["--predict", "nodes=3,link=1gbit"], capture_output=True, text=True, cwd=REPO, timeout=120
    )
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    lines = [ln for ln in bad.stderr.splitlines() if "--predict" in ln]
    assert len(lines) == 1 and "not a multiple of nodes=3" in lines[0]


def test_a_model_parallel_recipe_is_refused_in_one_line():
    with pytest.raises(ConfigError, match="--predict models data-parallel jobs .* topology is model_parallel"):
        cli.check(["recipe=mnist_model_parallel"], 2, predict="nodes=2,link=1gbit,compute_ms=5,grad_mb=4")


def _cfg(*overrides, world=2):
    from mnframe.builder.validate import validate
    from mnframe.config.compose import compose

    return validate(compose(["recipe=mnist", *overrides], []), world)


def test_threads_per_rank_follow_trainer_threads(monkeypatch):
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS"):
        monkeypatch.delenv(var, raising=False)
    assert step_time.runner_threads(_cfg(), ppn=2, cores=8) == 4  # auto: the node's cores over its ranks
    assert step_time.runner_threads(_cfg(), ppn=4, cores=2) == 1  # also shared=true: every rank on the machine
    assert step_time.runner_threads(_cfg("trainer.threads=3"), ppn=1, cores=8) == 3
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert step_time.runner_threads(_cfg(), ppn=1, cores=8) == 2  # the user's environment decides


def test_compute_is_measured_in_processes_that_share_the_cores():
    grad_bytes, arrays, ms, batch = step_time.measure(_cfg("model.n_units=10"), 2, True, threads=1, copies=2)
    assert arrays == 6 and grad_bytes == 4 * (64 * 10 + 10 + 10 * 10 + 10 + 10 * 10 + 10)
    assert ms > 0 and batch == 50
