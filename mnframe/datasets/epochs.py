"""ChainerMN's deprecated epoch helpers (``chainermn.datasets.scatter``), kept for old scripts.

Both take rank 0's shard length as the epoch length of every rank (rank 0 holds
the longest shard of ``scatter_dataset``) and warn with DeprecationWarning, as
ChainerMN does: use Chainer's standard ``(n, 'epoch')`` triggers instead.
``mnframe.datasets.scatter`` serves them under its module path (ChainerMN's); this
module imports nothing of mnframe, so the two do not import each other.
"""

import warnings

from mnframe.runtime.mpi_comm import mpi_comm_of


def get_n_iterations_for_one_epoch(dataset, local_batch_size, comm):
    """Iterations rank 0 needs to see its shard once, broadcast to every rank."""
    warnings.warn(
        "get_n_iterations_for_one_epoch is deprecated. Please use standard epoch triggers.",
        DeprecationWarning,
        stacklevel=2,
    )
    mpi = mpi_comm_of(comm)
    n = -(-len(dataset) // local_batch_size) if mpi.rank == 0 else None
    return mpi.bcast(n, root=0)


def get_epoch_trigger(n_epochs, dataset, local_batch_size, comm):
    """``(n_epochs * iterations per epoch, 'iteration')``: an epoch trigger that agrees on every rank."""
    warnings.warn(
        "get_epoch_trigger is deprecated. Please use standard epoch triggers.", DeprecationWarning, stacklevel=2
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return n_epochs * get_n_iterations_for_one_epoch(dataset, local_batch_size, comm), "iteration"
