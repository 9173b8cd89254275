"""scatter_dataset / scatter_index: ChainerMN's partition, but each rank receives only its shard.

ChainerMN broadcasts the whole (pickled) dataset to every rank and lets each
take a SubDataset of it: every rank pays the time and memory of the full
dataset. Here the root computes the same partition (same ranges, same seeded
permutation, so a seeded run puts every example on the same rank as ChainerMN)
and sends each rank its own examples only:

* NumPy arrays and ``TupleDataset``s of arrays travel as raw bytes in chunks
  (no pickle, no size limit); the shard arrives as an ndarray / TupleDataset.
* anything else is pickled shard by shard and arrives as a list of examples.

The root's decision (layout, ranges, or an error) is broadcast first, so a
problem seen on the root raises the same ``DataSizeError``/``ValueError`` on
every rank instead of leaving the others waiting.
"""

import chainer
import numpy as np

from mnframe.datasets import partition, shuffle_seeds, transport
from mnframe.runtime import oplog
from mnframe.runtime.mpi_comm import mpi_comm_of


class DataSizeError(RuntimeError):
    """A size limit of the scatter was hit (chunk size over the MPI count limit, ...)."""


# ---- layouts: how one kind of dataset is described, cut and moved -------------------------


class _ArrayLayout:
    """A NumPy ndarray (non-object dtype): one raw component."""

    @staticmethod
    def matches(dataset):
        return isinstance(dataset, np.ndarray) and dataset.ndim >= 1 and not dataset.dtype.hasobject

    @staticmethod
    def components(dataset):
        return [dataset]

    @staticmethod
    def build(arrays):
        return arrays[0]


class _TupleLayout:
    """A ``chainer.datasets.TupleDataset`` whose components are all raw NumPy arrays."""

    @staticmethod
    def matches(dataset):
        return isinstance(dataset, chainer.datasets.TupleDataset) and all(
            _ArrayLayout.matches(d) for d in dataset._datasets
        )

    @staticmethod
    def components(dataset):
        return list(dataset._datasets)

    @staticmethod
    def build(arrays):
        return chainer.datasets.TupleDataset(*arrays)


_RAW_LAYOUTS = {"ndarray": _ArrayLayout, "tuple": _TupleLayout}


def _layout_name(dataset):
    for name, layout in _RAW_LAYOUTS.items():
        if layout.matches(dataset):
            return name
    return "pickle"


def _take_local(dataset, order, begin, end):
    """The root's own shard, without a round trip through MPI and without a copy.

    Unshuffled raw data: views of the root's arrays, in the same type as the
    other ranks get. Shuffled raw data: ``SubDataset(dataset, begin, end,
    order)`` (what ChainerMN returns on every rank), because the root already
    holds the data and copying half a dataset would be the root's largest cost.
    """
    name = _layout_name(dataset)
    index = partition.shard_indices(order, begin, end)
    if name == "pickle":
        return _examples(dataset, index)
    if order is not None:
        return chainer.datasets.SubDataset(dataset, begin, end, order)
    layout = _RAW_LAYOUTS[name]
    return layout.build([c[index] for c in layout.components(dataset)])


def _examples(dataset, index):
    if isinstance(index, slice):
        index = range(*index.indices(len(dataset)))
    return [dataset[int(i)] for i in index]


# ---- the root's plan ---------------------------------------------------------------------

# Largest message actually sent: big enough to reach full bandwidth, small enough
# that the root's staging buffers stay in cache-friendly sizes (measured: 16 MiB
# pieces scatter a shuffled 1 GiB dataset markedly faster than 256 MiB ones).
_MESSAGE_BYTES = 16 * 2**20


def _plan(dataset, size, shuffle, seed, max_buf_len, force_equal_length):
    """(header broadcast to all ranks, permutation kept on the root)."""
    if dataset is None:
        return {
            "error": (
                "ValueError",
                "scatter_dataset: the root rank passed dataset=None; "
                "pass the dataset on the root (other ranks may pass None)",
            )
        }, None
    if not 0 < max_buf_len <= transport.MPI_COUNT_MAX:
        return {
            "error": (
                "DataSizeError",
                f"scatter_dataset: max_buf_len={max_buf_len} must be in [1, 2**31 - 1] bytes "
                "(it is the size of one MPI message); the dataset itself may be larger",
            )
        }, None
    n = len(dataset)
    name = _layout_name(dataset)
    header = {
        "error": None,
        "layout": name,
        "n": n,
        "chunk": int(min(max_buf_len, _MESSAGE_BYTES)),
        "ranges": partition.shard_ranges(n, size, force_equal_length),
    }
    if name != "pickle":
        comps = _RAW_LAYOUTS[name].components(dataset)
        lengths = {len(c) for c in comps}
        if len(lengths) != 1:
            return {
                "error": (
                    "ValueError",
                    f"scatter_dataset: TupleDataset components have different lengths {sorted(lengths)}",
                )
            }, None
        header["components"] = [(c.dtype, c.shape[1:]) for c in comps]
    if shuffle:
        # ChainerMN permutes with fresh entropy when seed is None; we draw that seed
        # ourselves so a checkpoint can record it (mnframe.datasets.shuffle_seeds).
        header["seed"] = shuffle_seeds.draw_seed() if seed is None else seed
    return header, partition.permutation(n, shuffle, header.get("seed"))


_ERRORS = {"DataSizeError": DataSizeError, "ValueError": ValueError}


def scatter_dataset(
    dataset, comm, root=0, shuffle=False, seed=None, max_buf_len=256 * 1024 * 1024, force_equal_length=True
):
    """Scatter ``dataset`` (significant on ``root`` only) so each rank gets its shard.

    Same partition as ChainerMN: ``shuffle`` permutes with
    ``numpy.random.RandomState(seed)`` (``seed=None``: a seed drawn on the root
    and recorded, so a checkpoint resume restores the same shards); ``force_equal_length=True`` gives every
    rank ``ceil(n / size)`` examples (shards may overlap), ``False`` puts each
    example on exactly one rank. ``max_buf_len`` is the largest single MPI
    message in bytes (at most 2**31 - 1); larger datasets are sent in chunks.
    Collective: every rank of ``comm`` must call it with the same ``root``.

    Returns, on non-root ranks, an ndarray (ndarray input), a TupleDataset
    (TupleDataset of arrays), or a list of examples (any other dataset); the
    root gets the same, except that a shuffled array dataset gives it a
    zero-copy ``SubDataset`` view of its part.
    """
    mpi = mpi_comm_of(comm)
    if not 0 <= root < mpi.size:
        raise ValueError(f"scatter_dataset: root={root} is not a rank of a communicator of size {mpi.size}")
    if mpi.rank == root:
        header, order = _plan(dataset, mpi.size, shuffle, seed, max_buf_len, force_equal_length)
    else:
        header, order = None, None
    with oplog.op("scatter_dataset.header", peer=root):
        header = mpi.bcast(header, root=root)
    if header["error"] is not None:
        kind, message = header["error"]
        raise _ERRORS[kind](message)

    shard = _receive(mpi, dataset, header, order, root)
    if shuffle:
        shuffle_seeds.record(header["n"], header["ranges"], header["seed"], header["layout"], shard)
    return shard


def _receive(mpi, dataset, header, order, root):
    """This rank's shard (the root sends everyone theirs first)."""
    chunk, ranges = header["chunk"], header["ranges"]
    if mpi.rank == root:
        return _send_all(mpi, dataset, header, order, root)
    begin, end = ranges[mpi.rank]
    if header["layout"] == "pickle":
        shard, error = transport.recv_object(mpi, root, chunk)
        if error is not None:
            raise ValueError(f"scatter_dataset: the root could not send rank {mpi.rank}'s shard: {error}")
        return shard
    arrays = [transport.recv_rows(mpi, end - begin, tail, dtype, root, chunk) for dtype, tail in header["components"]]
    return _RAW_LAYOUTS[header["layout"]].build(arrays)


def _send_all(mpi, dataset, header, order, root):
    """Root: send every other rank its shard, then cut out its own."""
    chunk, ranges = header["chunk"], header["ranges"]
    failure = None
    for dest, (begin, end) in enumerate(ranges):
        if dest == root:
            continue
        index = partition.shard_indices(order, begin, end)
        if header["layout"] == "pickle":
            if failure is not None:
                transport.send_error(mpi, failure, dest)
                continue
            try:
                shard = _examples(dataset, index)
            except Exception as e:  # e.g. a failing __getitem__: every waiting rank must hear of it
                failure = f"{type(e).__name__}: {e}"
                transport.send_error(mpi, failure, dest)
                continue
            failure = transport.send_object(mpi, shard, dest, chunk)
        else:
            for comp in _RAW_LAYOUTS[header["layout"]].components(dataset):
                transport.send_rows(mpi, comp, index, dest, chunk)
    if failure is not None:
        raise ValueError(f"scatter_dataset: could not build or send a shard: {failure}")
    begin, end = ranges[root]
    try:
        return _take_local(dataset, order, begin, end)
    except Exception as e:
        raise ValueError(f"scatter_dataset: could not build the root's shard: {type(e).__name__}: {e}") from e


def scatter_index(n_total_samples, comm, root=0, *, force_equal_length=True):
    """``(begin, end)`` of this rank's shard of ``n_total_samples`` (taken from ``root``).

    The partition of ``scatter_dataset`` without moving any data, for ranks
    that can all read the dataset themselves.
    """
    mpi = mpi_comm_of(comm)
    if not 0 <= root < mpi.size:
        raise ValueError(f"scatter_index: root={root} is not a rank of a communicator of size {mpi.size}")
    ranges = None
    if mpi.rank == root:
        ranges = partition.shard_ranges(int(n_total_samples), mpi.size, force_equal_length)
    with oplog.op("scatter_index", peer=root):
        return tuple(mpi.scatter(ranges, root=root))


# ChainerMN's private name for the partition generator (its tests call it).
_scatter_index = partition.iter_shard_ranges


def __getattr__(name):
    # ChainerMN's deprecated helpers live in epochs.py (imported only when asked for).
    if name in ("get_n_iterations_for_one_epoch", "get_epoch_trigger"):
        from mnframe.datasets import epochs

        return getattr(epochs, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
