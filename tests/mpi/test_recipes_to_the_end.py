"""Every shipped recipe runs to its natural end (one epoch at a tiny size) and writes its model,
with the loader it ships with and with ``dataset.loader=multiprocess`` (issue 30: the final
checkpoint used to be taken after the iterators were finalized, and a finalized
MultiprocessIterator cannot be saved). In-process on 2 ranks: one mpiexec for all the runs."""

import json
import tempfile
from pathlib import Path

import numpy
import pytest

from mnframe.testing.recipes import TINY

MPI_SIZES = (2,)
MPI_TIMEOUT = 400

SHIPPED = {"imagenet": "multiprocess"}  # the others ship with the serial loader
# tests/test_recipes_smoke.py already runs these to their end with the serial loader
SMOKE_TESTED = {"cifar", "dcgan", "seq2seq", "parallel_convolution", "mnist_dual_parallel"}
CASES = [
    (recipe, loader)
    for recipe in sorted(TINY)
    for loader in sorted({SHIPPED.get(recipe, "serial"), "multiprocess"})
    if not (loader == "serial" and recipe in SMOKE_TESTED)
]


def test_every_recipe_is_in_the_table():
    shipped = {p.parent.name for p in (Path(__file__).resolve().parents[2] / "recipes").glob("*/recipe.yaml")}
    assert shipped == set(TINY)


@pytest.mark.parametrize("recipe,loader", CASES)
def test_recipe_runs_to_its_end_and_writes_its_model(mpi_comm, recipe, loader):
    from mnframe.commands import cli

    path = tempfile.mkdtemp(prefix=f"mnframe-{recipe}-") if mpi_comm.rank == 0 else None
    run_dir = Path(mpi_comm.bcast(path, root=0)) / "run"
    cli.train(
        [
            f"recipe={recipe}",
            "trainer.stop=[1,epoch]",
            f"dataset.loader={loader}",
            "extensions.progress_bar.enabled=false",
            "extensions.plot_loss.enabled=false",  # plots: tests/test_run_endings.py
            "extensions.plot_accuracy.enabled=false",
            "dataset.n_processes=1",
            f"hydra.run.dir={run_dir}",
            *TINY[recipe],
        ]
    )
    mpi_comm.barrier()
    models = sorted(run_dir.glob("model*.npz"))
    assert models, f"{recipe} wrote no model: {sorted(p.name for p in run_dir.iterdir())}"
    for model in models:
        with numpy.load(model) as arrays:
            assert arrays.files and all(numpy.isfinite(arrays[k]).all() for k in arrays.files)
    checkpoints = sorted(p.name for p in (run_dir / "checkpoints").glob("iter_*"))
    assert checkpoints, f"{recipe}: no final checkpoint"
    last = int(checkpoints[-1].split("_")[1])
    assert last >= 1
    log = run_dir / "log"
    if log.exists():  # the reporting recipes: the last entry is the last iteration
        assert json.loads(log.read_text())[-1]["iteration"] == last
