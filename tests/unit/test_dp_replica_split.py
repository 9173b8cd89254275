"""Dual parallelism splits an epoch over the replicas under the strategies that give a whole
model-parallel group the same batches (issue 41, item 5), without MPI: the collectives the
builder uses are replaced by their single-process meaning."""

from types import SimpleNamespace

import numpy as np
import pytest

from mnframe.builder import data as data_builder
from mnframe.config.schema import DatasetConfig


class Comm(SimpleNamespace):
    pass


@pytest.fixture
def no_mpi(monkeypatch):
    import mnframe.datasets.scatter as scatter
    from mnframe.datasets import partition

    def scatter_index(n, comm):
        return partition.shard_ranges(n, comm.size, True)[comm.rank]

    monkeypatch.setattr(scatter, "scatter_index", scatter_index)
    monkeypatch.setattr(data_builder, "_load", lambda *_args, **_kw: (list(range(100)), list(range(20))))
    monkeypatch.setattr(data_builder, "create_multi_node_iterator", lambda it, _comm: it)
    monkeypatch.setattr(data_builder, "create_synchronized_iterator", lambda it, _comm: it)


def _train(strategy, replica, replicas, group_rank=0):
    cfg = DatasetConfig.model_validate({"source": {"_target_": "x.y"}, "strategy": strategy, "batch_size": 10})
    model, data = Comm(rank=group_rank, size=3), Comm(rank=replica, size=replicas)
    built = data_builder.build_data(cfg, Comm(world=None, model=model, data=data), seed=0)
    return sorted(int(x) for x in built.train), len(built.test)


@pytest.mark.usefixtures("no_mpi")
@pytest.mark.parametrize("strategy", ["multi_node_iterator", "synchronized"])
def test_each_replica_gets_its_own_part(strategy):
    parts = [_train(strategy, k, 2)[0] for k in range(2)]
    assert [len(p) for p in parts] == [50, 50]  # 2 replicas: half the iterations of an epoch each
    assert not set(parts[0]) & set(parts[1]) and sorted(parts[0] + parts[1]) == list(range(100))
    assert _train(strategy, 1, 2, group_rank=2)[0] == parts[1]  # every rank of a group: the same part
    assert _train(strategy, 0, 1)[0] == list(range(100))  # one replica: the whole set
    assert _train(strategy, 0, 2)[1] == 10


@pytest.mark.usefixtures("no_mpi")
def test_data_parallel_multi_node_iterator_keeps_the_whole_set():
    cfg = DatasetConfig.model_validate({"source": {"_target_": "x.y"}, "strategy": "multi_node_iterator"})
    world = Comm(rank=1, size=2)  # data parallel: model and data communicator are the world
    built = data_builder.build_data(cfg, Comm(world=world, model=world, data=world), seed=0)
    assert len(built.train) == 100 and np.array_equal(sorted(built.train), np.arange(100))
