"""mnframe.checkpoint without MPI: atomic store, verification, fall-back, config diff, RNG states."""

import os
import random

import chainer
import numpy as np
import pytest
from pydantic import ValidationError

from mnframe.checkpoint import config_diff
from mnframe.checkpoint.manifest import MANIFEST, Manifest
from mnframe.checkpoint.resume import check_config
from mnframe.checkpoint.rng import RngState
from mnframe.checkpoint.store import CheckpointStore
from mnframe.config.schema_checkpoint import CheckpointConfig
from mnframe.runtime.errors import CheckpointError, ConfigError


def SoloComm():
    """A one-rank communicator (MPI's own COMM_SELF)."""
    from mpi4py import MPI

    return MPI.COMM_SELF


def _writer(payload):
    def write(tmp):
        with open(os.path.join(tmp, "rank_00000.bin"), "wb") as f:
            f.write(payload)
        return ["rank_00000.bin"]

    return write


@pytest.fixture
def store(tmp_path):
    s = CheckpointStore(tmp_path / "ck", SoloComm())
    for it in (5, 10, 15):
        s.save(it, _writer(f"state {it}".encode()), config_hash="h", keep=3)
    return s


def test_save_commits_with_manifest_and_keeps_newest(store):
    assert store.committed() == ["iter_00000015", "iter_00000010", "iter_00000005"]
    m = Manifest.read(store.path("iter_00000015"))
    assert m.iteration == 15 and m.world_size == 1 and m.config_hash == "h"
    assert m.files["rank_00000.bin"].size == len("state 15") and m.files["rank_00000.bin"].rank == 0
    store.save(20, _writer(b"state 20"), keep=2)
    assert store.committed() == ["iter_00000020", "iter_00000015"]
    assert not [e for e in os.listdir(store.root) if e.startswith(".")]


def test_select_newest_good(store):
    name, m = store.select("auto")
    assert name == "iter_00000015" and m.iteration == 15


def test_flipped_byte_falls_back_and_says_so(store, capsys):
    path = os.path.join(store.path("iter_00000015"), "rank_00000.bin")
    data = bytearray(open(path, "rb").read())
    data[0] ^= 1
    open(path, "wb").write(bytes(data))
    with pytest.raises(CheckpointError, match="written by rank 0"):
        store.select("auto", load="iter_00000015")
    name, _ = store.select("auto")
    assert name == "iter_00000010"
    err = capsys.readouterr().err
    assert "rank_00000.bin (written by rank 0) has a wrong SHA-256" in err and "falling back" in err
    assert f"moved aside to {store.path('iter_00000015.damaged')}" in err  # issue 30: never overwritten


def test_missing_manifest_and_temp_dirs_are_never_loaded(store):
    os.remove(os.path.join(store.path("iter_00000015"), MANIFEST))
    os.makedirs(os.path.join(store.root, ".tmp-iter_00000020"))
    with pytest.raises(CheckpointError, match="no manifest.json"):
        store.select("auto", load="iter_00000015")
    assert store.select("auto")[0] == "iter_00000010"
    assert os.path.isdir(store.path("iter_00000015.damaged"))  # moved aside by resume


def test_truncated_file_detected(store):
    path = os.path.join(store.path("iter_00000015"), "rank_00000.bin")
    open(path, "wb").write(b"st")
    assert store.select("auto")[0] == "iter_00000010"


def test_resume_modes(tmp_path, store):
    empty = CheckpointStore(tmp_path / "none", SoloComm())
    assert empty.select("auto") is None
    assert store.select("never") is None
    with pytest.raises(ConfigError, match="resume=must but there is no complete checkpoint"):
        empty.select("must")
    with pytest.raises(ConfigError, match="checkpoint.load: .* is not in"):
        store.select("auto", load="iter_00000099")


def test_failed_writer_commits_nothing(tmp_path):
    s = CheckpointStore(tmp_path / "ck", SoloComm())

    def broken(_tmp):
        raise OSError("disk full")

    with pytest.raises(CheckpointError, match="rank 0 could not write into .*: disk full"):
        s.save(5, broken)
    assert s.committed() == [] and not os.listdir(s.root)


def test_config_diff_and_unsafe_changes():
    old = {"model": {"units": 8}, "trainer": {"epochs": 5}}
    changes = config_diff.diff(old, {"model": {"units": 8}, "trainer": {"epochs": 9}})
    assert changes == [("trainer.epochs", 5, 9)]
    m = Manifest(iteration=1, world_size=2, config_hash="a", files={}, config=old)
    check_config(SoloComm(), m, "iter_1", "b", {"model": {"units": 8}, "trainer": {"epochs": 9}}, False)
    with pytest.raises(ConfigError, match="model.units"):
        check_config(SoloComm(), m, "iter_1", "b", {"model": {"units": 16}, "trainer": {"epochs": 5}}, False)
    check_config(SoloComm(), m, "iter_1", "b", {"model": {"units": 16}}, True)


def test_rng_state_roundtrip(tmp_path):
    sampler_rs = np.random.RandomState(7)

    class It:
        order_sampler = chainer.iterators.ShuffleOrderSampler(sampler_rs)

    state = RngState(lambda: {"main": It()})
    np.random.seed(1)
    random.seed(2)
    np.random.randn()  # leave a cached gaussian around
    saver = chainer.serializers.DictionarySerializer()
    state.serialize(saver)
    expected = (np.random.rand(3), random.random(), sampler_rs.permutation(5))
    np.savez(tmp_path / "s.npz", **saver.target)
    np.random.seed(99)
    random.seed(99)
    sampler_rs.seed(99)
    with np.load(tmp_path / "s.npz") as f:
        state.serialize(chainer.serializers.NpzDeserializer(f))
    got = (np.random.rand(3), random.random(), sampler_rs.permutation(5))
    assert np.array_equal(expected[0], got[0]) and expected[1] == got[1]
    assert np.array_equal(expected[2], got[2])


def test_checkpoint_config_schema():
    cfg = CheckpointConfig(interval=10, load="iter_00000010")
    assert cfg.keep == 3 and cfg.verify
    with pytest.raises(ValidationError):  # whether to resume is attach's resume=, the runner's top-level key
        CheckpointConfig(resume="must")
    with pytest.raises(ValidationError):
        CheckpointConfig(intervall=10)
    with pytest.raises(ValidationError):
        CheckpointConfig(interval=0)
