"""Runs inside every rank of ``mpiexec -n N python -m pytest tests/mpi/test_x.py``.

A test that fails on one rank would leave the other ranks waiting in a
collective, so the failing rank prints its report (with its rank) and aborts
the whole job at once; the outer runner (tests/test_mpi_suites.py) reports it.
"""
import os
import sys

os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402

# Before the test module imports chainer (NumPy 2: see mnframe/_numpy_compat.py).
import mnframe  # noqa: E402,F401


@pytest.fixture(scope="session")
def mpi_comm():
    from mpi4py import MPI
    return MPI.COMM_WORLD


def pytest_runtest_logreport(report):
    if report.failed:
        from mpi4py import MPI
        rank = MPI.COMM_WORLD.rank
        sys.stderr.write(f"\n===== rank {rank}: {report.nodeid} FAILED ({report.when}) =====\n")
        sys.stderr.write(report.longreprtext + "\n")
        sys.stderr.flush()
        MPI.COMM_WORLD.Abort(1)


def pytest_collection_modifyitems(config, items):
    # The same order on every rank, whatever pytest plugins do.
    items.sort(key=lambda item: item.nodeid)
