"""The seq2seq recipe dual parallel on 4 ranks (2 replicas x 2 stages), built by the runner's
pipeline: each model gets its own group's communicator, both groups train, the replicas
write the model once (issue 17, bug 4), and the multi-node iterator of each replica reads
its own half of the data (issue 41)."""

import json
import tempfile
from pathlib import Path

import chainer
import numpy as np

MPI_SIZES = (4,)
MPI_TIMEOUT = 240
GROUP = 2  # ranks per model-parallel group: the decoder (group rank 0) and the encoder (group rank 1)
ITERATIONS = 30


class LossRecorder(chainer.training.Extension):
    """Records this rank's ``main/0/loss`` every iteration (decoder ranks report it)."""

    trigger = (1, "iteration")
    name = "record_loss"

    def __init__(self):
        self.losses = []

    def __call__(self, trainer):
        if "main/0/loss" in trainer.observation:
            self.losses.append(float(trainer.observation["main/0/loss"].array))


def _config():
    from mnframe.config.compose import compose

    stage = "topology.ranks.{}.stages.0.module"
    return compose(
        [
            "recipe=seq2seq",
            "extensions=minimal",
            f"trainer.stop=[{ITERATIONS},iteration]",
            "dataset.batch_size=32",
            "dataset.source.n_train=640",
            "dataset.source.n_test=64",
            "optimizer.lr=0.01",
            *[f"{stage.format(r)}.{k}" for r in (0, 1) for k in ("n_units=24", "n_layers=1")],
        ]
    )


def test_each_group_trains_with_its_own_communicator(mpi_comm):
    from mnframe import pipeline
    from mnframe.builder.validate import validate

    rank, group = mpi_comm.rank, mpi_comm.rank // GROUP
    path = tempfile.mkdtemp(prefix="mnframe-s2s-") if rank == 0 else None
    run_dir = Path(mpi_comm.bcast(path, root=0))
    raw = _config()
    cfg = validate(raw, mpi_comm.size)
    job = pipeline.build_trainer(cfg, str(run_dir), raw, "x")

    # the stage's communicator is this rank's model-parallel group, in group order
    stage = job.models["main"][0]
    assert type(stage).__name__ == ("Decoder" if rank % GROUP == 0 else "Encoder")
    members = stage.comm.mpi_comm.allgather(rank)
    assert members == [group * GROUP + r for r in range(GROUP)]
    assert stage.comm is job.comms.model

    recorder = LossRecorder()
    job.trainer.extend(recorder, name=recorder.name, trigger=recorder.trigger)
    job.trainer.run()
    pipeline.finish(cfg, job, str(run_dir))
    assert job.trainer.updater.iteration == ITERATIONS

    losses = mpi_comm.allgather(recorder.losses)
    for g in range(mpi_comm.size // GROUP):
        decoder, encoder = losses[g * GROUP], losses[g * GROUP + 1]
        assert len(decoder) == ITERATIONS and encoder == []
        assert np.mean(decoder[-5:]) < 0.9 * np.mean(decoder[:5]), (g, decoder)
    # the replicas split the data (issue 41): 640 examples / 2 replicas / batch 32 = 10 iterations an
    # epoch, and each replica's decoder sees other examples, so their losses differ ...
    replicas = mpi_comm.size // GROUP
    assert job.trainer.updater.epoch == ITERATIONS * 32 * replicas // 640
    assert not np.allclose(losses[0], losses[GROUP])
    # ... while the averaged gradients keep their weights the same
    weights = mpi_comm.allgather([p.array.copy() for p in sorted(stage.params(), key=lambda p: p.name)])
    for a, b in zip(weights[rank % GROUP], weights[rank % GROUP + GROUP]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)

    # the model is exported once per stage, by the first replica
    mpi_comm.barrier()
    assert sorted(p.name for p in run_dir.glob("model*.npz")) == ["model_rank0.npz", "model_rank1.npz"]
    if rank < GROUP:
        with np.load(run_dir / f"model_rank{rank}.npz") as exported:
            params = dict(stage.namedparams())
            assert sorted(exported.files) == sorted(f"0{name}" for name in params)
            for name, param in params.items():
                np.testing.assert_array_equal(exported[f"0{name}"], param.array)
    assert (
        json.loads((run_dir / "checkpoints" / f"iter_{ITERATIONS:08d}" / "manifest.json").read_text())["world_size"]
        == mpi_comm.size
    )
