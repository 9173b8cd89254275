"""Step 3: datasets and iterators.

``STRATEGIES`` maps ``dataset.strategy`` to how the data reaches the
data-parallel ranks. Every strategy returns this rank's (train, test) and may
wrap the iterators; receive-only model-parallel ranks swap their data for an
empty dataset of the same length (``create_empty_dataset``).

With several model-parallel replicas (dual parallelism) every accepted strategy
splits an epoch over them: ``scatter`` and ``shard`` split over the data
communicator (the replicas); the strategies of span "model" (the same batches on
every rank of a group) get the replica's part first (``shard`` over the data
communicator), so N replicas run 1/N of the iterations per epoch each.
``replicate`` cannot split and is refused there (``config.data_flow``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from mnframe._internal.config_issue import unknown_name
from mnframe._internal.targets import check_target
from mnframe.builder.instantiate import agree_on_faults, instantiate
from mnframe.config.issues import ConfigIssue
from mnframe.config.schema import DatasetConfig
from mnframe.datasets.empty import create_empty_dataset
from mnframe.iterators.multi_node import create_multi_node_iterator
from mnframe.iterators.synchronized import create_synchronized_iterator

log = logging.getLogger("mnframe.data")


def _load(cfg: DatasetConfig, world, here: bool = True):
    """``dataset.source`` called on this rank (``(None, None)`` where not ``here``).

    Collective over ``world``: a source that fails on any rank (a missing file,
    a bad argument) is one ConfigError naming ``dataset.source`` on every rank."""
    with agree_on_faults(world):
        return instantiate(cfg.source, path="dataset.source") if here else (None, None)


class Strategy:
    """How one strategy loads/shards data and wraps iterators."""

    # which communicator the strategy spans: "data" (the replicas that average
    # gradients) or "model" (the ranks of one model-parallel group, which must
    # see the same batches; the world for data parallelism)
    span = "data"

    # the interface's defaults: the strategies that use ``comm``, ``seed`` or ``train`` override them
    def datasets(self, cfg: DatasetConfig, comm, seed: int, world) -> Tuple[Any, Any]:  # noqa: ARG002
        return _load(cfg, world)

    def wrap_iterator(self, iterator, comm, train: bool):  # noqa: ARG002
        return iterator


class Scatter(Strategy):
    """Data-rank 0 loads; ``scatter_dataset`` sends each rank its shard (ChainerMN's way)."""

    def datasets(self, cfg, comm, seed, world):
        from mnframe.datasets.scatter import scatter_dataset  # imports mpi4py.MPI: not when validating

        train, test = _load(cfg, world, here=comm.rank == 0)
        train = scatter_dataset(train, comm, shuffle=cfg.shuffle, seed=seed)
        test = scatter_dataset(test, comm, shuffle=False)
        return train, test


def shard(ds, comm, seed: int, shuffle: bool):
    """``comm``'s rank's ``scatter_index`` slice of ``ds`` (of a permutation drawn from ``seed``
    when ``shuffle``): the same slice on every rank with the same ``comm.rank``."""
    import chainer

    from mnframe.datasets.scatter import scatter_index  # imports mpi4py.MPI: not when validating

    begin, end = scatter_index(len(ds), comm)
    order = np.random.RandomState(seed).permutation(len(ds)) if shuffle else None
    return chainer.datasets.SubDataset(ds, begin, end, order)


class Shard(Strategy):
    """Every rank loads and keeps its ``scatter_index`` slice (no data traffic)."""

    def datasets(self, cfg, comm, seed, world):
        train, test = _load(cfg, world)
        return shard(train, comm, seed, cfg.shuffle), shard(test, comm, seed, False)


class MultiNodeIterator(Strategy):
    """Rank 0 of the group iterates; its batches are broadcast (the same batch everywhere)."""

    span = "model"

    def wrap_iterator(self, iterator, comm, train):
        return create_multi_node_iterator(iterator, comm) if train else iterator


class Synchronized(Strategy):
    """Every rank of the group iterates the full set in the same shuffled order."""

    span = "model"

    def wrap_iterator(self, iterator, comm, train):
        return create_synchronized_iterator(iterator, comm) if train else iterator


class Replicate(Strategy):
    """Every rank iterates the full set independently (no communication)."""


STRATEGIES: Dict[str, Strategy] = {
    "scatter": Scatter(),
    "shard": Shard(),
    "multi_node_iterator": MultiNodeIterator(),
    "synchronized": Synchronized(),
    "replicate": Replicate(),
}


def dataset_issues(cfg: DatasetConfig, dp_width: Optional[int]) -> List[ConfigIssue]:
    """``dataset.strategy`` is in ``STRATEGIES``; the global batch divides over the
    ``dp_width`` data-parallel ranks (None: not known, not checked)."""
    issues = []
    if cfg.strategy not in STRATEGIES:
        issues.append(unknown_name("dataset.strategy", "data strategy", cfg.strategy, STRATEGIES))
    if cfg.global_batch_size is not None and dp_width is not None:
        if cfg.global_batch_size % dp_width:
            issues.append(
                ConfigIssue(
                    "dataset.global_batch_size",
                    f"must be divisible by the {dp_width} data-parallel ranks",
                    value=cfg.global_batch_size,
                    allowed=f"a multiple of {dp_width}",
                )
            )
    return issues


def source_issues(cfg: DatasetConfig) -> List[ConfigIssue]:
    """``dataset.source``'s ``_target_`` imports and takes its arguments."""
    return check_target("dataset.source", cfg.source.target, cfg.source.kwargs)


@dataclass
class Data:
    train: Any
    test: Any
    train_iter: Any
    test_iter: Any


def _iterator(cfg: DatasetConfig, dataset, batch_size: int, train: bool):
    import chainer

    if cfg.loader == "multiprocess":
        return chainer.iterators.MultiprocessIterator(
            dataset, batch_size, repeat=train, shuffle=train and cfg.shuffle, n_processes=cfg.n_processes
        )
    return chainer.iterators.SerialIterator(dataset, batch_size, repeat=train, shuffle=train and cfg.shuffle)


def per_rank_batch_size(cfg: DatasetConfig, data_width: int) -> int:
    if cfg.global_batch_size is not None:
        return cfg.global_batch_size // data_width
    return cfg.batch_size


def warn_batch_larger_than_shard(batch: int, train, data_comm) -> None:
    """One warning (data-parallel rank 0) when a batch holds more examples than the rank's
    training set: every iteration then wraps around the shard and an "epoch" is less than
    one iteration, which is rarely what was meant."""
    try:
        size = len(train)
    except TypeError:  # no dataset on this rank (a multi-node iterator's non-root)
        return
    if data_comm.rank == 0 and 0 < size < batch:
        log.warning(
            "the batch (%d examples per rank) is larger than this rank's shard of the training set "
            "(%d examples): every iteration passes the end of an epoch; lower dataset.batch_size "
            "(or dataset.global_batch_size), or use more data or fewer ranks",
            batch,
            size,
        )


def build_data(cfg: DatasetConfig, comms, seed: int, empty: bool = False, overfit_batches=None) -> Data:
    """This rank's datasets and iterators; ``empty``: a receive-only rank's empty dataset;
    ``overfit_batches`` (debug=overfit): train and test on the first N batches of the shard,
    never shuffled.

    ``comms`` has ``.world``, ``.data`` and ``.model`` communicators (builder.communicator)."""
    strategy = STRATEGIES[cfg.strategy]
    data_comm = comms.data
    comm = comms.model if strategy.span == "model" else data_comm
    train, test = strategy.datasets(cfg, comm, seed, comms.world)
    if strategy.span == "model" and comms.model is not data_comm and data_comm.size > 1:
        # dual parallelism: each replica (data_comm.rank, the same on all ranks of a group)
        # iterates its own part of the data, the ranks of one group the same part
        train = shard(train, data_comm, seed, cfg.shuffle)
        test = shard(test, data_comm, seed, False)
    batch = per_rank_batch_size(cfg, data_comm.size)
    if overfit_batches:
        from mnframe.training.debug import overfit_subset

        train = test = overfit_subset(train, overfit_batches * batch)
        cfg = cfg.model_copy(update={"shuffle": False})
    if empty:
        train = create_empty_dataset(train)
        test = create_empty_dataset(test)
    warn_batch_larger_than_shard(batch, train, data_comm)
    train_iter = strategy.wrap_iterator(_iterator(cfg, train, batch, True), comm, True)
    test_iter = _iterator(cfg, test, cfg.test_batch_size or batch, False)
    return Data(train, test, train_iter, test_iter)
