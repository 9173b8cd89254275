"""Each non-MNIST recipe trains for a few iterations on 2 ranks through ``python -m mnframe``.

Tiny sizes (channel multipliers, a few synthetic examples) keep each run to
seconds; the JSON log must hold the values the recipe reports.
"""

import json
from pathlib import Path

import pytest

from mnframe.testing import run_mpi
from mnframe.testing.recipes import TINY

REPO = Path(__file__).resolve().parents[1]
ITERATIONS = 2

# recipe -> keys its log must report (the tiny sizes: mnframe.testing.recipes.TINY)
SMOKE = {
    "cifar": {"main/loss", "main/accuracy"},
    "imagenet": {"main/loss", "main/accuracy"},
    "dcgan": {"gen/loss", "dis/loss"},
    "seq2seq": {"main/0/loss", "main/0/perp", "main/0/accuracy"},
    "parallel_convolution": {"main/loss", "main/accuracy"},
}


@pytest.mark.parametrize("recipe", sorted(SMOKE))
def test_recipe_trains_on_two_ranks(recipe, tmp_path):
    keys = SMOKE[recipe]
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
            "dataset.loader=serial",  # imagenet ships multiprocess: tests/mpi/test_recipes_to_the_end.py
            f"hydra.run.dir={run_dir}",
            *TINY[recipe],
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
            f"hydra.run.dir={run_dir}",
            *TINY["mnist_dual_parallel"],
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
