"""Asynchronous checkpoints on one rank (mnframe.checkpoint.async_save, issue 31): same files as a
synchronous save, the state of the save's iteration, at most one in flight, a failure reported."""

import errno
import os
import threading
import time

import chainer
import chainer.links as L
import numpy as np
import pytest
from chainer import training

from mnframe.checkpoint import async_save
from mnframe.checkpoint.attach import attach
from mnframe.checkpoint.manifest import Manifest
from mnframe.runtime.errors import SaveError


def SoloComm():
    from mpi4py import MPI

    return MPI.COMM_SELF


def _trainer(out, stop):
    np.random.seed(0)
    model = L.Classifier(L.Linear(3, 2))
    optimizer = chainer.optimizers.MomentumSGD(lr=0.1)
    optimizer.setup(model)
    rng = np.random.RandomState(1)
    data = chainer.datasets.TupleDataset(
        rng.randn(16, 3).astype(np.float32), rng.randint(0, 2, size=16).astype(np.int32)
    )
    it = chainer.iterators.SerialIterator(data, 4, shuffle=True)
    return training.Trainer(training.updaters.StandardUpdater(it, optimizer), (stop, "iteration"), out=str(out))


def _run(out, stop, async_save_on, interval=2):
    trainer = _trainer(out, stop)
    ext = attach(trainer, {"interval": interval, "async_save": async_save_on, "keep": 10}, out, SoloComm())
    ext.abort_on_error = False
    trainer.run()
    ext.save_final(trainer)
    return trainer, ext


def _params(out, name, stop=100):
    trainer = _trainer(out, stop)
    attach(trainer, {"load": name, "keep": 10}, out, SoloComm())
    model = trainer.updater.get_optimizer("main").target
    return trainer.updater.iteration, {k: p.array.copy() for k, p in model.namedparams()}


def test_async_checkpoints_hold_what_synchronous_ones_hold(tmp_path):
    _run(tmp_path / "sync", 6, False)
    _, ext = _run(tmp_path / "async", 6, True)
    assert ext.last_saved == "iter_00000006" and not ext.background.in_flight
    for name in ("iter_00000002", "iter_00000004", "iter_00000006"):
        manifest = Manifest.read(str(tmp_path / "async" / "checkpoints" / name))
        assert manifest.reason == "interval" and manifest.world_size == 1
        it_sync, sync = _params(tmp_path / "sync", name)
        it_async, asy = _params(tmp_path / "async", name)
        assert it_sync == it_async == manifest.iteration
        assert sync.keys() == asy.keys() and all(np.array_equal(sync[k], asy[k]) for k in sync)
    assert not [e for e in os.listdir(tmp_path / "async" / "checkpoints") if e.startswith(".")]


def test_the_file_holds_the_state_at_the_save_even_if_training_changes_it_meanwhile(tmp_path):
    release = threading.Event()

    def slow(directory, rank, arrays):
        release.wait(30)
        return async_save.write_rank_file(directory, rank, arrays)

    trainer = _trainer(tmp_path, 2)
    ext = attach(trainer, {"interval": 1000, "async_save": True}, tmp_path, SoloComm())
    trainer.run()  # (a trainer is saved once it ran; its last checkpoint is synchronous)
    ext.background.writer = slow
    model = trainer.updater.get_optimizer("main").target
    before = model.predictor.W.array.copy()
    ext.save(trainer, background=True)
    model.predictor.W.array[...] += 1  # the next steps change the live arrays
    assert ext.background.poll() is None  # still writing: nothing committed, training goes on
    release.set()
    assert ext.background.drain() == "iter_00000002"
    loaded = _trainer(tmp_path, 100)
    attach(loaded, {"load": "iter_00000002"}, tmp_path, SoloComm())
    np.testing.assert_array_equal(loaded.updater.get_optimizer("main").target.predictor.W.array, before)


def test_at_most_one_save_in_flight(tmp_path):
    active, most = [0], [0]
    lock = threading.Lock()

    def counting(directory, rank, arrays):
        with lock:
            active[0] += 1
            most[0] = max(most[0], active[0])
        time.sleep(0.05)
        with lock:
            active[0] -= 1
        return async_save.write_rank_file(directory, rank, arrays)

    trainer = _trainer(tmp_path, 6)
    ext = attach(trainer, {"interval": 1, "async_save": True, "keep": 10}, tmp_path, SoloComm())
    ext.background.writer = counting
    trainer.run()
    assert most[0] == 1
    names = sorted(os.listdir(tmp_path / "checkpoints"))
    assert names == [f"iter_{i:08d}" for i in range(1, 7)]


def test_a_failed_background_save_stops_the_run_and_keeps_the_previous_checkpoint(tmp_path):
    calls = [0]

    def fails_second_time(directory, rank, arrays):
        calls[0] += 1
        if calls[0] == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return async_save.write_rank_file(directory, rank, arrays)

    trainer = _trainer(tmp_path, 20)
    ext = attach(trainer, {"interval": 2, "async_save": True}, tmp_path, SoloComm())
    ext.abort_on_error = False
    ext.background.writer = fails_second_time
    with pytest.raises(SaveError) as info:
        trainer.run()
    text = str(info.value)
    assert "checkpoint iter_00000004 not written (in the background)" in text
    assert "No space left on device" in text and "iter_00000002 is kept" in text
    assert 4 < trainer.updater.iteration < 20  # reported at an iteration after the save, not at the end
    assert os.listdir(tmp_path / "checkpoints") == ["iter_00000002"]


def test_config_accepts_async_save_and_names_a_bad_value():
    from pydantic import ValidationError

    from mnframe.config.schema_checkpoint import CheckpointConfig

    assert CheckpointConfig().async_save is False
    assert CheckpointConfig(async_save=True).async_save is True
    with pytest.raises(ValidationError, match="async_save"):
        CheckpointConfig(async_save="sometimes")


def test_the_preemption_checkpoint_is_synchronous_and_commits_the_one_in_flight_first(tmp_path):
    from mnframe.runtime import preemption

    trainer = _trainer(tmp_path, 20)
    ext = attach(trainer, {"interval": 2, "async_save": True, "keep": 10}, tmp_path, SoloComm())

    @chainer.training.make_extension(trigger=(1, "iteration"), priority=1000)
    def signal_at_5(trainer):
        if trainer.updater.iteration == 5:
            preemption.request()

    trainer.extend(signal_at_5)
    saved = dict(preemption._state)
    try:
        trainer.run()
    finally:
        preemption._flag.clear()
        preemption._state.update(saved)
    assert ext.preempted and trainer.updater.iteration == 5 and ext.last_saved == "iter_00000005"
    assert not ext.background.in_flight
    reasons = {n: Manifest.read(str(tmp_path / "checkpoints" / n)).reason for n in os.listdir(tmp_path / "checkpoints")}
    assert reasons == {"iter_00000002": "interval", "iter_00000004": "interval", "iter_00000005": "preemption"}


@pytest.mark.slow  # a subprocess or many config compositions: the full tier
def test_the_runner_config_takes_async_save_and_names_a_bad_value():
    from mnframe.commands.cli import check
    from mnframe.config.issues import ConfigError

    assert "config OK" in check(["checkpoint.async_save=true"], 2)
    with pytest.raises(ConfigError, match="checkpoint.async_save"):
        check(["checkpoint.async_save=maybe"], 2)
