"""The command line as a user meets it: --check, Hydra's --cfg/--help/multirun,
and config errors that end every rank of an mpiexec job with status 2."""

import subprocess
import sys
from pathlib import Path

import pytest

from mnframe.testing import run_mpi

REPO = Path(__file__).resolve().parents[1]


def mnframe(*args, cwd=REPO, timeout=120):
    return subprocess.run(
        [sys.executable, "-m", "mnframe", *args], cwd=cwd, timeout=timeout, capture_output=True, text=True
    )


def test_check_prints_the_rank_graph(tmp_path):
    png = tmp_path / "graph.png"
    r = mnframe("recipe=mnist_model_parallel", "--check", "--world-size", "2", "--graph", str(png))
    assert r.returncode == 0, r.stderr
    assert "schedule (one iteration" in r.stdout and "graph OK" in r.stdout
    assert png.stat().st_size > 1000


def test_check_refuses_with_status_2_and_no_traceback():
    r = mnframe("--check", "--world-size", "3", "recipe=mnist_model_parallel", "dataset.batch_size=-1")
    assert r.returncode == 2
    err = r.stderr
    assert "dataset.batch_size" in err and "topology.ranks" in err
    assert "Traceback" not in err


def test_hydra_cfg_job_and_help():
    r = mnframe("recipe=mnist_dual_parallel", "--cfg", "job")
    assert r.returncode == 0, r.stderr
    assert "name: mnist_dual_parallel" in r.stdout and "kind: model_parallel" in r.stdout
    r = mnframe("--help")
    assert r.returncode == 0, r.stderr
    assert "communicator" in r.stdout and "recipe" in r.stdout


def test_multirun_gives_each_job_its_own_directory(tmp_path):
    r = mnframe(
        "-m", "seed=0,1", "trainer.stop=[1,iteration]", "extensions=minimal", f"hydra.sweep.dir={tmp_path}", timeout=240
    )
    assert r.returncode == 0, r.stderr[-3000:]
    for job in ("0", "1"):
        assert (tmp_path / job / "config.yaml").exists()
    assert "seed: 1" in (tmp_path / "1" / "config.yaml").read_text()


@pytest.mark.parametrize(
    "override,needle",
    [
        ("trainer.stpo=[1,epoch]", "did you mean 'stop'"),  # Hydra composition error
        ("dataset.batch_size=-3", "dataset.batch_size"),  # validation error on every rank
    ],
)
def test_every_rank_exits_2_quickly(override, needle, tmp_path):
    r = run_mpi(["-m", "mnframe", override, f"hydra.run.dir={tmp_path}/run"], n=2, timeout=90, cwd=str(REPO))
    assert not r.timed_out
    assert r.returncode == 2, r.output[-3000:]
    assert needle in r.output
    assert "Traceback" not in r.output
    assert r.output.count("configuration error") == 1  # said once, by rank 0


def test_users_own_recipe_directory(tmp_path):
    (tmp_path / "my_recipes").mkdir()
    (tmp_path / "my_recipes" / "my_model.yaml").write_text(
        "# @package _global_\n"
        "defaults:\n  - override /optimizer: sgd\n  - override /extensions: minimal\n"
        "name: my_model\n"
        "model: {_target_: my_net.Net, n_hidden: 4}\n"
        "trainer: {stop: [2, iteration]}\n"
    )
    (tmp_path / "my_net.py").write_text(
        "import chainer, chainer.links as L\n"
        "class Net(chainer.Chain):\n"
        "    def __init__(self, n_hidden=4):\n"
        "        super().__init__()\n"
        "        with self.init_scope():\n"
        "            self.l1 = L.Linear(None, n_hidden)\n"
        "            self.l2 = L.Linear(None, 10)\n"
        "    def forward(self, x):\n"
        "        return self.l2(self.l1(x))\n"
    )
    r = mnframe("--config-dir", "./my_recipes", "recipe=my_model", cwd=tmp_path, timeout=180)
    assert r.returncode == 0, r.stderr[-3000:]
    [run] = list((tmp_path / "runs" / "my_model").iterdir())
    assert "my_net.Net" in (run / "config.yaml").read_text()
