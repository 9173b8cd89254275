"""The MPI harness itself: ranks see the world they were started with."""

import numpy as np

MPI_SIZES = (1, 2, 3)
MPI_TIMEOUT = 60


def test_allreduce_of_ranks(mpi_comm):
    x = np.array([mpi_comm.rank], dtype=np.int64)

    from mpi4py import MPI

    mpi_comm.Allreduce(MPI.IN_PLACE, x)
    n = mpi_comm.size
    assert x[0] == n * (n - 1) // 2
