"""Dual-parallel runs resumed on another world size (issue 31): 2 ranks grow to 4, 4 shrink to 2.

Each rank's state right after the resume (dumped by a custom extension at ``initialize``, before
the first step) must equal the checkpoint's file of its stage; training goes on from the
checkpoint's iteration; a changed rank graph is refused with one line and exit 2."""

import json
import shutil
from pathlib import Path

import numpy as np

from mnframe.testing import run_mpi

REPO = Path(__file__).resolve().parent.parent
TIMEOUT = 240
SMALL = [
    "recipe=mnist_dual_parallel",
    "topology.ranks.0.stages.0.module.n_units=32",
    "topology.ranks.1.stages.0.module.n_units=32",
    "extensions=minimal",
    "extensions.log_report.interval=1",
    "extensions.log_report.unit=iteration",
    "checkpoint.interval=3",
    "+extensions.dump={kind: custom, rank0_only: false, _target_: dump_ext.make}",
]
DUMP_EXTENSION = '''
import os
import numpy as np
from chainer import training
from mpi4py import MPI


class Dump(training.Extension):
    """At initialize (after any resume, before the first step): this rank's model and optimizer state."""

    trigger = (10 ** 9, "iteration")

    def initialize(self, trainer):
        updater = trainer.updater
        opt = updater.get_optimizer("main")
        arrays = {"updater/model:main" + k: np.asarray(p.array) for k, p in opt.target.namedparams()}
        arrays["iteration"] = np.asarray(updater.iteration)
        rank = MPI.COMM_WORLD.Get_rank()
        np.savez(os.path.join(os.environ["DUMP_DIR"], f"rank{rank}_iter{updater.iteration}.npz"), **arrays)

    def __call__(self, trainer):
        pass


def make():
    return Dump()
'''


def mnframe(n, tmp_path, *args):
    dumps = tmp_path / "dumps"
    dumps.mkdir(exist_ok=True)
    (tmp_path / "dump_ext.py").write_text(DUMP_EXTENSION)
    result = run_mpi(
        ["-m", "mnframe", *SMALL, f"hydra.run.dir={tmp_path / 'run'}", *args],
        n=n,
        timeout=TIMEOUT,
        cwd=str(REPO),
        env={"PYTHONPATH": f"{tmp_path}:{REPO}", "DUMP_DIR": str(dumps)},
    )
    assert not result.timed_out, result.output[-4000:]
    return result


def model_arrays(path):
    with np.load(path) as z:
        return {k: z[k] for k in z.files if k.startswith("updater/model:")}


def assert_resumed_from(tmp_path, saved, n, iteration):
    """Every rank r of n holds, right after the resume, exactly the parameters of the saved
    file of its stage (r % 2)."""
    for r in range(n):
        dump = tmp_path / "dumps" / f"rank{r}_iter{iteration}.npz"
        assert dump.exists(), f"rank {r} did not start at iteration {iteration}"
        with np.load(dump) as z:
            got = {k: z[k] for k in z.files if k != "iteration"}
        want = model_arrays(saved / f"rank_{r % 2:05d}.npz")
        assert got and got.keys() == want.keys(), (r, sorted(got), sorted(want))
        assert all(np.array_equal(got[k], want[k]) for k in want), f"rank {r}: parameters differ"


def log_iterations(tmp_path):
    return [e["iteration"] for e in json.loads((tmp_path / "run" / "log").read_text())]


def test_dual_parallel_grows_2_to_4_and_shrinks_4_to_2(tmp_path):
    ckpts = tmp_path / "run" / "checkpoints"
    first = mnframe(2, tmp_path, "trainer.stop=[6,iteration]")
    assert first.returncode == 0, first.output[-4000:]
    manifest = json.loads((ckpts / "iter_00000006" / "manifest.json").read_text())
    assert manifest["layout"]["files"]["rank_00001.npz"] == {"rank": 1, "stage": 1, "replica": 0}
    saved6 = shutil.copytree(ckpts / "iter_00000006", tmp_path / "saved6")

    grown = mnframe(4, tmp_path, "trainer.stop=[9,iteration]")
    assert grown.returncode == 0, grown.output[-4000:]
    notes = [ln for ln in grown.stderr.splitlines() if "resumed from" in ln]
    assert len(notes) == 1 and "(iteration 6); world size 2 -> 4: data re-sharded" in notes[0], grown.output[-3000:]
    assert "2 stages x 1 replica -> model parallel, 2 stages x 2 replicas" in notes[0]
    assert_resumed_from(tmp_path, saved6, 4, 6)
    assert log_iterations(tmp_path)[-3:] == [7, 8, 9]  # training went on from iteration 6
    saved9 = tmp_path / "saved9"
    shutil.copytree(ckpts / "iter_00000009", saved9)
    layout = json.loads((saved9 / "manifest.json").read_text())["layout"]
    assert layout["replicas"] == 2 and layout["files"]["rank_00002.npz"] == {"rank": 2, "stage": 0, "replica": 1}

    shrunk = mnframe(2, tmp_path, "trainer.stop=[12,iteration]")
    assert shrunk.returncode == 0, shrunk.output[-4000:]
    assert "world size 4 -> 2: data re-sharded" in shrunk.stderr, shrunk.output[-3000:]
    assert "(the old replicas of each stage held equal parameters)" in shrunk.stderr
    assert_resumed_from(tmp_path, saved9, 2, 9)
    assert log_iterations(tmp_path)[-3:] == [10, 11, 12]

    # a changed rank graph: refused before anything is loaded, one line, exit 2
    (tmp_path / "dumps" / "rank0_iter12.npz").unlink(missing_ok=True)
    rewired = mnframe(
        2,
        tmp_path,
        "trainer.stop=[15,iteration]",
        "topology.ranks.1.stages.0.module._target_=mnframe.recipes.mnist_model_parallel.model.MLP0Head",
    )
    assert rewired.returncode == 2, rewired.output[-4000:]
    assert "Traceback" not in rewired.output
    lines = [ln for ln in rewired.output.splitlines() if "the rank graph (topology) changed" in ln]
    assert len(lines) == 1, rewired.output[-4000:]
    assert "allow_unsafe_config_change" in lines[0]
    assert not list((tmp_path / "dumps").glob("*_iter12.npz"))  # no rank got to training
