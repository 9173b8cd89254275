"""Sharp edges a new user hit (issue 38, items 8-11), as the user meets them: options that were
silently ignored or misreported are refused in one line; messages name what to fix. MPI jobs run
under ``run_mpi``'s timeout; ``--check`` runs without MPI, under a subprocess timeout."""

import subprocess
import sys
from pathlib import Path

import pytest

from mnframe.testing import run_mpi

REPO = Path(__file__).resolve().parents[1]
TIMEOUT = 120


def mnframe(*args, cwd=REPO, env=None):
    return subprocess.run(
        [sys.executable, "-m", "mnframe", *args], cwd=cwd, timeout=TIMEOUT, capture_output=True, text=True, env=env
    )


def one_line(result, needle):
    """The single stderr line holding ``needle`` (said once, by rank 0), no traceback."""
    lines = [line for line in result.stderr.splitlines() if needle in line]
    assert len(lines) == 1, result.stderr[-3000:]
    assert "Traceback" not in getattr(result, "output", result.stderr)
    return lines[0]


# -- item 8: options silently ignored or misreported --------------------------------------------


@pytest.mark.parametrize("size", ["-1", "0"])
def test_check_refuses_a_world_size_below_1(size):
    r = mnframe("--check", "--world-size", size)
    assert r.returncode == 2, r.stderr
    line = one_line(r, "configuration error")
    assert f"--world-size must be a positive number of ranks (got {size})" in line
    assert "config OK" not in r.stdout and "the job has" not in r.stderr


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--world-size", "4"], "--world-size applies only to --check"),
        pytest.param(  # imports Optuna first (check_environment): slow
            ["tune=optuna"],
            "tune=optuna runs a search of several trials, which needs Hydra's multirun: add -m",
            marks=pytest.mark.slow,
        ),
    ],
    ids=["world_size_without_check", "tune_without_multirun"],
)
def test_an_option_that_would_be_ignored_is_refused_on_every_rank(tmp_path, args, needle):
    run_dir = tmp_path / "run"
    r = run_mpi(
        ["-m", "mnframe", *args, "trainer.stop=[1,iteration]", f"hydra.run.dir={run_dir}"],
        n=2,
        timeout=TIMEOUT,
        cwd=str(REPO),
    )
    assert not r.timed_out, r.output[-3000:]
    assert r.returncode == 2, r.output[-3000:]
    assert needle in one_line(r, "configuration error")
    assert not (run_dir / "config.yaml").exists() and not list(run_dir.glob("model*")), "a job ran"


# -- item 9: messages -----------------------------------------------------------------------------


@pytest.mark.slow  # the fast tier: tests/unit/test_config_messages.py
def test_an_unparsable_override_is_named_on_2_ranks(tmp_path):
    r = run_mpi(
        ["-m", "mnframe", "trainer.stop=[5,epoch", f"hydra.run.dir={tmp_path / 'run'}"],
        n=2,
        timeout=TIMEOUT,
        cwd=str(REPO),
    )
    assert not r.timed_out and r.returncode == 2, r.output[-3000:]
    line = one_line(r, "configuration error")
    assert "cannot parse the override 'trainer.stop=[5,epoch'" in line and "key=[a,b]" in line


@pytest.mark.slow  # the fast tier: tests/unit/test_config_messages.py
def test_evaluate_names_the_directory_and_pythonpath_when_the_runs_code_does_not_import(tmp_path):
    from mnframe.config.compose import compose, to_yaml

    config = compose(["recipe=mnist", "model.n_units=8"])
    config["model"]["_target_"] = "my_models.MLP"  # the user's module, importable where they trained
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text(to_yaml(config))
    # the user's own module: trusted (without --trust-config it is refused before any import, issue 38 item 6)
    r = run_mpi(
        ["-m", "mnframe", "evaluate", str(run_dir), "--trust-config"],
        n=2,
        timeout=TIMEOUT,
        cwd=str(REPO),
        env={"PYTHONPATH": None},
    )
    assert not r.timed_out and r.returncode == 2, r.output[-3000:]
    assert "model._target_: cannot import module 'my_models'" in r.stderr
    assert f"working directory ({REPO}) and PYTHONPATH unset" in r.stderr
    assert r.stderr.count("configuration error") == 1 and "Traceback" not in r.output


CTRL_C_AFTER_DONE = r"""
import os, signal, subprocess, sys, threading, time
cmd = sys.argv[1:]
p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
out = []
threading.Thread(target=lambda: out.extend(p.stdout), daemon=True).start()
for line in p.stderr:
    out.append(line)
    if "mnframe: done:" in line:
        time.sleep(0.3)  # the ranks are exiting: MPI_Finalize waits for every rank
        os.killpg(p.pid, signal.SIGINT)  # a terminal's Ctrl-C reaches the whole process group
        break
out.extend(p.stderr)
print("RC", p.wait(timeout=100))
sys.stdout.write("".join(out))
"""


@pytest.mark.slow
def test_ctrl_c_just_after_the_job_is_done_exits_cleanly(tmp_path):
    """A Ctrl-C while the ranks exit used to kill one by signal: MPICH's BAD TERMINATION, status 2."""
    from mnframe.testing.launch import mpiexec_path

    cmd = [mpiexec_path(), "-n", "2", sys.executable, "-m", "mnframe", "recipe=mnist", "model.n_units=8"]
    cmd += ["extensions.progress_bar.enabled=false", "trainer.stop=[1,epoch]", f"hydra.run.dir={tmp_path / 'run'}"]
    r = subprocess.run(
        [sys.executable, "-c", CTRL_C_AFTER_DONE, *cmd], cwd=REPO, timeout=TIMEOUT, capture_output=True, text=True
    )
    assert "mnframe: done:" in r.stdout, r.stdout[-3000:] + r.stderr[-2000:]
    assert "RC 0" in r.stdout, r.stdout[-3000:]
    assert "BAD TERMINATION" not in r.stdout and "Traceback" not in r.stdout
    assert list((tmp_path / "run").glob("model*.npz")), "the finished job's model is there"


# -- item 10: tuning the Hydra way ----------------------------------------------------------------

HPARAMS_SEARCH = """# @package _global_
defaults:
  - /recipe/mnist
  - override /hydra/sweeper: optuna
  - _self_
name: hs
hydra:
  sweeper:
    n_trials: 2
    n_jobs: 1
    params:
      model.n_units: choice(8,16)
"""


@pytest.mark.slow  # imports Optuna 2 (about 10 s); the fast tier: tests/unit/test_cli_flags.py
@pytest.mark.parametrize("how", ["command_line", "recipe"])
def test_hydra_optuna_sweeper_without_tune_is_refused_in_one_line(tmp_path, how):
    """lightning-hydra-template's way: the trials ran, then 'Return value must be float-castable', MPI_Abort."""
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    if how == "command_line":
        args = ["-m", "hydra/sweeper=optuna", "hydra.sweeper.n_trials=2", "model.n_units=choice(8,16)"]
    else:  # the sweeper chosen in a config file, as the template's hparams_search configs do
        (tmp_path / "hs.yaml").write_text(HPARAMS_SEARCH)
        args = ["--config-dir", str(tmp_path), "-m", "recipe=hs"]
    sweep = tmp_path / "sweep"
    r = run_mpi(
        ["-m", "mnframe", *args, "trainer.stop=[1,iteration]", f"hydra.sweep.dir={sweep}"],
        n=2,
        timeout=TIMEOUT,
        cwd=str(REPO),
    )
    assert not r.timed_out and r.returncode == 2, r.output[-3000:]
    line = one_line(r, "configuration error")
    assert "hydra/sweeper=optuna alone gives the trials no objective" in line and "use tune=optuna" in line
    assert "float-castable" not in r.output and "MPI_Abort" not in r.output
    assert not list(sweep.rglob("model*.npz")), "a trial trained"


@pytest.mark.slow
def test_tune_with_sqlalchemy_2_names_the_environment_problem(tmp_path):
    """With SQLAlchemy 2 (full MLflow brings it) optuna 2 ended in an empty 'AssertionError raised while
    resolving interpolation:'. Simulated: a SQLAlchemy 2.0.0 distribution record first on the path."""
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    record = tmp_path / "fake" / "SQLAlchemy-2.0.0.dist-info"
    record.mkdir(parents=True)
    (record / "METADATA").write_text("Metadata-Version: 2.1\nName: SQLAlchemy\nVersion: 2.0.0\n")
    r = run_mpi(
        ["-m", "mnframe", "-m", "tune=optuna", "tune.n_trials=1", f"hydra.sweep.dir={tmp_path / 'sweep'}"],
        n=2,
        timeout=TIMEOUT,
        cwd=str(REPO),
        env={"PYTHONPATH": str(tmp_path / "fake")},
    )
    assert not r.timed_out and r.returncode == 3, r.output[-3000:]
    lines = [line for line in r.stderr.splitlines() if "environment problem" in line]
    assert len(lines) == 2, r.stderr[-3000:]  # one line on every rank, as for a missing package
    assert "SQLAlchemy 2.0.0" in lines[0] and "sqlalchemy<2" in lines[0]
    assert "AssertionError" not in r.output and "Traceback" not in r.output


# -- item 11: small things ------------------------------------------------------------------------


@pytest.mark.slow  # the fast tier: test_at_another_world_size_the_epoch_count_goes_on_from_the_file
def test_the_summary_counts_the_runs_epochs_after_a_2_to_1_resume(tmp_path):
    """It said "40 iterations (0 epochs)": the iterators' epoch count restarted with the resize."""
    run = ["-m", "mnframe", "recipe=mnist", "model.n_units=8", "extensions.progress_bar.enabled=false"]
    run += [f"hydra.run.dir={tmp_path / 'run'}"]
    first = run_mpi([*run, "trainer.stop=[2,epoch]"], n=2, timeout=TIMEOUT, cwd=str(REPO))
    assert not first.timed_out and first.returncode == 0, first.output[-3000:]
    assert "mnframe: done: 30 iterations (2 epochs)" in first.stderr  # 1500 digits, 50 per rank and step
    second = run_mpi([*run, "trainer.stop=[40,iteration]"], n=1, timeout=TIMEOUT, cwd=str(REPO))
    assert not second.timed_out and second.returncode == 0, second.output[-3000:]
    assert "world size 2 -> 1" in second.stderr
    assert "mnframe: done: 40 iterations (2 epochs)" in second.stderr  # + 10 of 30 steps of an epoch on 1 rank
