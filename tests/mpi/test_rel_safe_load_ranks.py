"""A malicious entry in the last rank's checkpoint file is refused on every rank with the same
one-line message (a shared verdict), and nothing runs (issue 27), on 3 ranks. Since issue 38 a
refused checkpoint is treated as a damaged one: resume=auto moves it aside and loads the previous
checkpoint; checkpoint.load naming it fails on every rank with the same message."""

import io
import json
import os
import shutil
import tempfile
import zipfile

import chainer
import chainer.links as L
import numpy as np
import pytest
from chainer import training

MPI_SIZES = (3,)  # 1 rank: tests/unit/test_rel_safe_load.py; 2 ranks: tests/test_rel_safe_load_jobs.py
MPI_TIMEOUT = 120


class Payload:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


@pytest.fixture
def shared_dir(mpi_comm):
    path = tempfile.mkdtemp(prefix="mnframe-safe-") if mpi_comm.rank == 0 else None
    path = mpi_comm.bcast(path, root=0)
    yield path
    mpi_comm.Barrier()
    if mpi_comm.rank == 0:
        shutil.rmtree(path, ignore_errors=True)


def _trainer(out, stop):
    np.random.seed(0)
    model = L.Classifier(L.Linear(3, 2))
    optimizer = chainer.optimizers.MomentumSGD(lr=0.1)
    optimizer.setup(model)
    rng = np.random.RandomState(1)
    data = chainer.datasets.TupleDataset(rng.randn(8, 3).astype(np.float32), rng.randint(0, 2, size=8).astype(np.int32))
    it = chainer.iterators.SerialIterator(data, 4, shuffle=True)
    return training.Trainer(training.updaters.StandardUpdater(it, optimizer), (stop, "iteration"), out=out)


def test_entry_planted_in_the_last_ranks_file_is_refused_everywhere(mpi_comm, shared_dir):
    from mnframe.checkpoint.attach import attach
    from mnframe.checkpoint.manifest import sha256_file
    from mnframe.runtime.errors import CheckpointError

    rank, size = mpi_comm.rank, mpi_comm.size
    trainer = _trainer(shared_dir, 4)
    attach(trainer, {"interval": 2}, shared_dir, mpi_comm)
    trainer.run()
    mpi_comm.Barrier()
    directory = os.path.join(shared_dir, "checkpoints", "iter_00000004")
    victim = os.path.join(directory, f"rank_{size - 1:05d}.npz")
    marker = os.path.join(shared_dir, "pwned")
    key = "updater/optimizer:main/predictor/W/v"
    if rank == size - 1:
        with zipfile.ZipFile(victim) as z:
            members = {i.filename: z.read(i) for i in z.infolist()}
        assert key + ".npy" in members
        buf = io.BytesIO()
        np.lib.format.write_array(buf, np.array([Payload(marker)], dtype=object), allow_pickle=True)
        members[key + ".npy"] = buf.getvalue()
        with zipfile.ZipFile(victim, "w") as z:
            for name, data in members.items():
                z.writestr(name, data)
        manifest_path = os.path.join(directory, "manifest.json")
        manifest = json.loads(open(manifest_path).read())
        manifest["files"][os.path.basename(victim)].update(size=os.path.getsize(victim), sha256=sha256_file(victim))
        open(manifest_path, "w").write(json.dumps(manifest))
    mpi_comm.Barrier()

    with pytest.raises(CheckpointError) as info:
        attach(_trainer(shared_dir, 6), {"interval": 2, "load": "iter_00000004"}, shared_dir, mpi_comm)
    message = str(info.value)
    assert victim in message and repr(key + ".npy") in message and "\n" not in message
    assert len(set(mpi_comm.allgather(message))) == 1  # the same verdict on every rank
    ext = attach(_trainer(shared_dir, 6), {"interval": 2}, shared_dir, mpi_comm)
    assert mpi_comm.allgather(ext.resumed_from) == ["iter_00000002"] * size
    mpi_comm.Barrier()
    assert os.path.isdir(directory + ".damaged")
    assert not os.path.exists(marker)
