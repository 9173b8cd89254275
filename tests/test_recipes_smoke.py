"""Each non-MNIST recipe trains for a few iterations on 2 ranks through ``python -m mnframe``.

Tiny sizes (channel multipliers, a few synthetic examples) keep each run to
seconds; the JSON log must hold the values the recipe reports.
"""

import json
from pathlib import Path

import pytest

from mnframe.testing import run_mpi

REPO = Path(__file__).resolve().parents[1]
ITERATIONS = 2

# recipe -> (tiny overrides, keys its log must report)
SMOKE = {
    "cifar": (
        ["model.width=0.0625", "dataset.source.n_synthetic=16", "dataset.batch_size=4"],
        {"main/loss", "main/accuracy"},
    ),
    "imagenet": (
        [
            "dataset.source.synthetic=true",
            "model._target_=mnframe.recipes.imagenet.models.NIN",
            "model.width=0.0625",
            "model.n_class=10",
            "dataset.source.n_class=10",
            "dataset.source.insize=64",
            "dataset.source.n_synthetic=16",
            "dataset.batch_size=2",
            "dataset.loader=serial",
        ],
        {"main/loss", "main/accuracy"},
    ),
    "dcgan": (
        [
            "model.gen.ch=16",
            "model.dis.ch=16",
            "model.gen.n_hidden=8",
            "dataset.source.n_synthetic=16",
            "dataset.batch_size=4",
        ],
        {"gen/loss", "dis/loss"},
    ),
    "seq2seq": (
        [
            "dataset.source.n_train=32",
            "dataset.source.n_test=8",
            "dataset.batch_size=4",
            "topology.ranks.0.stages.0.module.n_units=8",
            "topology.ranks.1.stages.0.module.n_units=8",
        ],
        {"main/0/loss", "main/0/perp", "main/0/accuracy"},
    ),
    "parallel_convolution": (
        ["model.width=0.0625", "dataset.source.n_synthetic=16", "dataset.batch_size=4"],
        {"main/loss", "main/accuracy"},
    ),
}


@pytest.mark.parametrize("recipe", sorted(SMOKE))
def test_recipe_trains_on_two_ranks(recipe, tmp_path):
    overrides, keys = SMOKE[recipe]
    run_dir = tmp_path / "run"
    result = run_mpi(
        [
            "-m",
            "mnframe",
            f"recipe={recipe}",
            f"trainer.stop=[{ITERATIONS},iteration]",
            "extensions=minimal",
            "extensions.log_report.unit=iteration",
            "resume=never",
            f"hydra.run.dir={run_dir}",
            *overrides,
        ],
        n=2,
        timeout=120,
        cwd=str(REPO),
    )
    assert not result.timed_out, f"{recipe} timed out\n{result.output[-4000:]}"
    assert result.returncode == 0, f"{recipe} exited {result.returncode}\n{result.output[-4000:]}"
    log = json.loads((run_dir / "log").read_text())
    assert [entry["iteration"] for entry in log] == list(range(1, ITERATIONS + 1))
    missing = keys - set(log[-1])
    assert not missing, f"{recipe} did not report {sorted(missing)}: {log[-1]}"


def test_dual_parallel_recipe_trains_on_two_replicas(tmp_path):
    """mnist_dual_parallel on 4 ranks: 2 replicas of the 2-rank model-parallel MLP."""
    run_dir = tmp_path / "run"
    result = run_mpi(
        [
            "-m",
            "mnframe",
            "recipe=mnist_dual_parallel",
            f"trainer.stop=[{ITERATIONS},iteration]",
            "extensions=minimal",
            "extensions.log_report.unit=iteration",
            "resume=never",
            "dataset.batch_size=8",
            "topology.ranks.0.stages.0.module.n_units=16",
            "topology.ranks.1.stages.0.module.n_units=16",
            f"hydra.run.dir={run_dir}",
        ],
        n=4,
        timeout=180,
        cwd=str(REPO),
    )
    assert not result.timed_out, f"timed out\n{result.output[-4000:]}"
    assert result.returncode == 0, f"exited {result.returncode}\n{result.output[-4000:]}"
    log = json.loads((run_dir / "log").read_text())
    assert [entry["iteration"] for entry in log] == list(range(1, ITERATIONS + 1))
    assert {"main/loss", "main/accuracy"} <= set(log[-1])
