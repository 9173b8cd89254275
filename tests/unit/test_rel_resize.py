"""Checkpoint layouts and resume at another world size, without MPI (issue 31): what the manifest
records, which old file each rank loads at 1-4 ranks, the refusals, the replica check, old manifests."""

import json
import os
from types import SimpleNamespace

import numpy as np
import pytest

from mnframe.checkpoint import layout as L
from mnframe.checkpoint import reshard
from mnframe.checkpoint.manifest import FileEntry, Manifest, layout_of
from mnframe.checkpoint.store import CheckpointStore
from mnframe.runtime.errors import ConfigError, ResumeFailed

STAGE = {"module": {"_target_": "m.A", "n_units": 4}, "rank_in": None, "rank_out": 1}
TOPO = {
    "kind": "model_parallel",
    "ranks": [
        {"dataset": "input", "classifier": True, "stages": [STAGE, {**STAGE, "rank_in": 1, "rank_out": None}]},
        {"dataset": "empty", "stages": [{"module": {"_target_": "m.B"}, "rank_in": 0, "rank_out": 0}]},
    ],
}


def Comm(rank, size):
    return SimpleNamespace(rank=rank, size=size)


def manifest_for(world_size, topology=None, files=None, layout=True):
    files = files or {L.rank_file(r): FileEntry(size=1, sha256="0", rank=r) for r in range(world_size)}
    return Manifest(
        iteration=6,
        world_size=world_size,
        config_hash=None,
        files=files,
        config={"topology": topology} if topology else None,
        layout=L.make_layout(world_size, topology) if layout else None,
    )


def test_layout_records_stage_replica_and_graph():
    lay = L.make_layout(4, TOPO)
    assert lay["kind"] == "model_parallel" and lay["stages"] == 2 and lay["replicas"] == 2
    assert lay["files"]["rank_00003.npz"] == {"rank": 3, "stage": 1, "replica": 1}
    assert lay["graph"][1]["stages"] == [{"module": "m.B", "rank_in": 0, "rank_out": 0}]
    # module arguments are not the graph; the module class and the wiring are
    wider = json.loads(json.dumps(TOPO))
    wider["ranks"][0]["stages"][0]["module"]["n_units"] = 8
    assert L.make_layout(2, wider)["graph_digest"] == lay["graph_digest"]
    rewired = json.loads(json.dumps(TOPO))
    rewired["ranks"][1]["stages"][0]["module"]["_target_"] = "m.C"
    assert L.make_layout(2, rewired)["graph_digest"] != lay["graph_digest"]
    dp = L.make_layout(3)
    assert dp["kind"] == "data_parallel" and dp["stages"] == 1 and dp["replicas"] == 3 and dp["graph"] is None
    assert L.describe(lay, graph=False) == "model parallel, 2 stages x 2 replicas"
    assert L.describe(dp) == "data parallel, 3 ranks"


@pytest.mark.parametrize(
    "old,new,expected",
    [
        (2, 4, ["rank_00000.npz", "rank_00001.npz", "rank_00000.npz", "rank_00001.npz"]),  # grow
        (4, 2, ["rank_00000.npz", "rank_00001.npz"]),  # shrink
        (4, 4, [L.rank_file(r) for r in range(4)]),  # same world size: each rank its own file
        (2, 2, ["rank_00000.npz", "rank_00001.npz"]),
    ],
)
def test_each_rank_loads_its_own_stage_model_parallel(old, new, expected):
    got = L.sources(L.make_layout(old, TOPO), L.make_layout(new, TOPO))
    assert [got[r] for r in range(new)] == expected


@pytest.mark.parametrize("old,new", [(o, n) for o in range(1, 5) for n in range(1, 5)])
def test_data_parallel_sources_at_1_to_4_ranks(old, new):
    got = L.sources(L.make_layout(old), L.make_layout(new))
    assert [got[r] for r in range(new)] == [L.rank_file(r % old) for r in range(new)]


@pytest.mark.parametrize("size,why", [(1, "fewer than the 2 stages"), (3, "not a multiple of the 2 stages")])
def test_a_world_that_cannot_hold_the_stages_is_refused_naming_both_layouts(tmp_path, size, why):
    with pytest.raises(ConfigError) as err:
        reshard.plan(Comm(0, size), str(tmp_path), "iter_00000006", manifest_for(2, TOPO), L.make_layout(size, TOPO))
    text = str(err.value)
    assert "\n" not in text and why in text and "model parallel, 2 stages x 1 replica" in text
    assert f"cannot be resumed on {size} ranks" in text and "mpiexec -n 2" in text


def test_a_changed_rank_graph_is_refused_unless_allowed(tmp_path):
    rewired = json.loads(json.dumps(TOPO))
    rewired["ranks"][1]["stages"][0]["module"]["_target_"] = "m.C"
    args = (Comm(0, 2), str(tmp_path), "iter_00000006", manifest_for(2, TOPO), L.make_layout(2, rewired))
    with pytest.raises(ConfigError) as err:
        reshard.plan(*args)
    text = str(err.value)
    assert "\n" not in text and "rank graph (topology) changed" in text
    assert "checkpoint.allow_unsafe_config_change=true" in text
    assert reshard.plan(*args, allow_unsafe=True) == ("rank_00000.npz", "")
    # data parallel -> model parallel is a changed graph too
    with pytest.raises(ConfigError, match="data parallel, 2 ranks, this run is model parallel"):
        reshard.plan(Comm(0, 2), str(tmp_path), "x", manifest_for(2), L.make_layout(2, TOPO))


def test_old_manifest_without_layout_loads_at_its_world_size(tmp_path):
    """A manifest written before layouts (no 'layout' key) reads, gets a derived layout, and each
    rank loads its own file at the same world size."""
    from mpi4py import MPI

    store = CheckpointStore(tmp_path / "ck", MPI.COMM_SELF)
    store.save(6, lambda tmp: _npz(tmp, 0, 1.0), config={"topology": TOPO})  # store.layout unset
    path = os.path.join(store.path("iter_00000006"), "manifest.json")
    raw = json.loads(open(path).read())
    assert "layout" not in raw  # a store without a layout writes the manifest as before
    manifest = Manifest.read(store.path("iter_00000006"))
    assert manifest.layout is None
    old = layout_of(manifest)
    assert old["recorded"] is False and old["kind"] == "model_parallel" and old["stages"] == 2
    dp = layout_of(Manifest.from_json(json.dumps({**raw, "config": None})))
    assert dp["kind"] == "data_parallel" and list(dp["files"]) == ["rank_00000.npz"]
    same = {**manifest.__dict__, "world_size": 1, "config": None}
    source, note = reshard.plan(
        MPI.COMM_SELF, store.path("iter_00000006"), "iter_00000006", Manifest(**same), L.make_layout(1)
    )
    assert (source, note) == ("rank_00000.npz", "")


def _npz(directory, rank, value, extra=0.0):
    name = L.rank_file(rank)
    np.savez(
        os.path.join(directory, name),
        **{
            "updater/model:main/0/l1/W": np.full((2, 3), value, np.float32),
            "updater/model:main/0/bn/avg_mean": np.full(3, rank, np.float32),  # each replica its own
            "updater/optimizer:main/t": np.asarray(5),
            "updater/iterator:main/current_position": np.asarray(rank),  # per rank: not compared
            "updater/iteration": np.asarray(6 + extra),
        },
    )
    return [name]


PARAMS = {"updater/model:main/0/l1/W"}  # the parameters (param_keys of the trainer)


def _resize_checkpoint(tmp_path, values):
    from mnframe.checkpoint.manifest import sha256_file

    d = tmp_path / "iter_00000006"
    d.mkdir()
    files = {}
    for r, v in enumerate(values):
        (name,) = _npz(d, r, v)
        p = d / name
        files[name] = FileEntry(size=p.stat().st_size, sha256=sha256_file(p), rank=r)
    return d, manifest_for(len(values), TOPO, files=files)


def test_replicas_that_agree_resize_with_a_note(tmp_path):
    from mpi4py import MPI

    d, manifest = _resize_checkpoint(tmp_path, [1.0, 2.0, 1.0, 2.0])  # stage 0: 1.0, stage 1: 2.0
    source, note = reshard.plan(MPI.COMM_SELF, str(d), "iter_00000006", manifest, L.make_layout(2, TOPO), params=PARAMS)
    assert source == "rank_00000.npz"
    assert note.startswith(
        "world size 4 -> 2: data re-sharded, iterators restart their epoch (the epoch count goes on)"
    )
    assert "model parallel, 2 stages x 2 replicas -> model parallel, 2 stages x 1 replica" in note
    assert "\n" not in note


def test_replicas_that_differ_are_refused(tmp_path):
    from mpi4py import MPI

    d, manifest = _resize_checkpoint(tmp_path, [1.0, 2.0, 1.5, 2.0])  # stage 0's replicas differ
    with pytest.raises(ResumeFailed) as err:
        reshard.plan(MPI.COMM_SELF, str(d), "iter_00000006", manifest, L.make_layout(2, TOPO), params=PARAMS)
    text = str(err.value)
    assert "replicas of stage 0 hold different parameters" in text and "rank_00002.npz" in text
    assert "resume it on 4 ranks" in text
    # at its own world size it still resumes (every rank its own file)
    assert reshard.plan(Comm(3, 4), str(d), "iter_00000006", manifest, L.make_layout(4, TOPO)) == ("rank_00003.npz", "")


def test_running_statistics_are_not_compared_with_the_parameter_keys(tmp_path):
    """BatchNormalization's running statistics differ between data-parallel replicas: with the
    trainer's parameter keys only parameters and optimizer state are compared."""
    from mpi4py import MPI

    d, manifest = _resize_checkpoint(tmp_path, [1.0, 2.0, 1.0, 2.0])  # avg_mean differs per rank
    with pytest.raises(ResumeFailed):
        reshard.plan(MPI.COMM_SELF, str(d), "iter_00000006", manifest, L.make_layout(2, TOPO))
    source, note = reshard.plan(MPI.COMM_SELF, str(d), "iter_00000006", manifest, L.make_layout(2, TOPO), params=PARAMS)
    assert source == "rank_00000.npz" and "world size 4 -> 2" in note


@pytest.mark.parametrize(
    "old,new,expected",
    [
        (4, 2, [["rank_00000.npz", "rank_00002.npz"], ["rank_00001.npz", "rank_00003.npz"]]),
        (4, 6, [["rank_00000.npz"], ["rank_00001.npz"], ["rank_00002.npz"], ["rank_00003.npz"], [], []]),
        (2, 4, [[], [], [], []]),  # one replica per stage: nothing to compare
    ],
)
def test_each_stage_files_are_hashed_by_the_new_ranks_of_that_stage(old, new, expected):
    got = [reshard._mine(Comm(r, new), L.make_layout(old, TOPO), L.make_layout(new, TOPO))[1] for r in range(new)]
    assert got == expected


def test_param_keys_name_the_parameters_not_the_running_statistics():
    import chainer
    import chainer.links as CL
    from chainer import training

    model = chainer.Sequential(CL.Linear(3, 2), CL.BatchNormalization(2))
    opt = chainer.optimizers.SGD()
    opt.setup(model)
    it = chainer.iterators.SerialIterator([(np.zeros(3, np.float32), 0)], 1)
    trainer = training.Trainer(training.updaters.StandardUpdater(it, opt), (1, "iteration"))
    assert reshard.param_keys(trainer) == {
        "updater/model:main/0/W",
        "updater/model:main/0/b",
        "updater/model:main/1/gamma",
        "updater/model:main/1/beta",
    }


def _tiny_trainer(tmp_path, stop):
    import chainer
    import chainer.links as CL
    from chainer import training

    model = CL.Classifier(CL.Linear(3, 2, initialW=chainer.initializers.Normal(0.5)))
    opt = chainer.optimizers.MomentumSGD(lr=0.1)
    opt.setup(model)
    rs = np.random.RandomState(0)
    data = chainer.datasets.TupleDataset(rs.randn(8, 3).astype(np.float32), rs.randint(0, 2, 8).astype(np.int32))
    it = chainer.iterators.SerialIterator(data, 4)
    return training.Trainer(training.updaters.StandardUpdater(it, opt), (stop, "iteration"), out=str(tmp_path)), model


def test_a_checkpoint_written_before_layouts_resumes_at_its_world_size(tmp_path):
    """A manifest without 'layout' (as written before this change) resumes exactly: same iteration,
    same parameters."""
    from mpi4py import MPI

    from mnframe.checkpoint.attach import attach

    trainer, model = _tiny_trainer(tmp_path, 4)
    ext = attach(trainer, {"interval": 2, "preemption": False}, tmp_path, MPI.COMM_SELF)
    trainer.run()
    ext.save_final(trainer)
    ckpt = tmp_path / "checkpoints" / "iter_00000004"
    raw = json.loads((ckpt / "manifest.json").read_text())
    assert raw["layout"]["files"] == {"rank_00000.npz": {"rank": 0, "stage": 0, "replica": 0}}
    raw.pop("layout")
    (ckpt / "manifest.json").write_text(json.dumps(raw))
    again, resumed = _tiny_trainer(tmp_path, 4)
    ext = attach(again, {"interval": 2, "preemption": False}, tmp_path, MPI.COMM_SELF)
    assert ext.resumed_from == "iter_00000004" and again.updater.iteration == 4
    for (name, a), (_, b) in zip(sorted(model.namedparams()), sorted(resumed.namedparams())):
        assert np.array_equal(a.array, b.array), name


def test_a_signed_manifest_without_layout_still_verifies():
    """The signature covers the manifest's JSON: one written before layouts (no 'layout' key) must
    give the same body when read back now."""
    from mnframe.checkpoint import signing

    old = manifest_for(2, layout=False)
    text = old.to_json()
    assert "layout" not in json.loads(text)
    read = Manifest.from_json(text)
    read.signature = signing.sign(old, b"k")
    assert signing.problem(read, b"k", "iter_00000006") is None
    new = manifest_for(2, TOPO)
    new.signature = signing.sign(new, b"k")
    assert signing.problem(Manifest.from_json(new.to_json()), b"k", "x") is None
    new.layout["stages"] = 1  # the layout is signed too
    assert signing.problem(new, b"k", "x") is not None


@pytest.mark.parametrize("shuffle", [False, True])
def test_at_another_world_size_the_epoch_count_goes_on_from_the_file(tmp_path, shuffle):
    """Issue 38 item 11: after a 2 -> 1 resume the summary said "40 iterations (0 epochs)"."""
    import chainer
    from chainer import training

    from mnframe.checkpoint.trainer_io import keep_epochs

    def trainer(n):
        data = np.arange(n, dtype=np.float32).reshape(-1, 1)
        it = chainer.iterators.SerialIterator(data, 5, shuffle=shuffle)
        model = chainer.links.Linear(1, 1)
        optimizer = chainer.optimizers.SGD()
        optimizer.setup(model)
        return training.Trainer(training.updaters.StandardUpdater(it, optimizer), (1, "iteration"), out=str(tmp_path))

    old = trainer(10)  # 2 passes over a rank's old shard of 10
    for _ in range(4):
        old.updater.get_iterator("main").next()
    old.updater.get_iterator("main").next()  # and a bit: position 5 of the third pass
    path = tmp_path / "rank_00000.npz"
    state = {}
    old.updater.serialize(chainer.serializers.DictionarySerializer(state)["updater"])  # the trainer file's keys
    np.savez(str(path), **state)
    new = trainer(20)  # this rank's new, larger shard
    keep_epochs(str(path), new)
    iterator = new.updater.get_iterator("main")
    assert new.updater.epoch == 2 and iterator.current_position == 0 and iterator.epoch_detail == 2.0
    assert len(iterator.next()) == 5 and iterator.epoch == 2  # it goes on over the new shard
