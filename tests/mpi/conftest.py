"""Runs inside every rank of ``mpiexec -n N python -m pytest tests/mpi/test_x.py``.

A test that fails on one rank would leave the other ranks waiting in a
collective, so the failing rank prints its report (with its rank) and aborts
the whole job at once; the outer runner (tests/test_mpi_suites.py) reports it.
"""

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402

# Before the test module imports chainer (NumPy 2: see mnframe/_numpy_compat.py).
import mnframe  # noqa: E402,F401

# abort the job when a test fails on any rank; the same test order on every rank
from mnframe.testing.mpi_pytest import *  # noqa: E402,F401,F403


@pytest.fixture(scope="session")
def mpi_comm():
    from mpi4py import MPI

    return MPI.COMM_WORLD
