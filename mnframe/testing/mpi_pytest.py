"""pytest hooks for test modules that run inside every rank of an MPI job.

A test that fails on one rank would leave the other ranks waiting in a
collective, so the failing rank prints its report (with its rank) and aborts
the whole job at once; the launcher that started the job reports it. Tests are
collected in the same order on every rank. A conftest uses them with
``from mnframe.testing.mpi_pytest import *``.
"""

import sys

__all__ = ["pytest_runtest_logreport", "pytest_collection_modifyitems"]


def pytest_runtest_logreport(report):
    if report.failed:
        from mpi4py import MPI

        rank = MPI.COMM_WORLD.rank
        sys.stderr.write(f"\n===== rank {rank}: {report.nodeid} FAILED ({report.when}) =====\n")
        sys.stderr.write(report.longreprtext + "\n")
        sys.stderr.flush()
        MPI.COMM_WORLD.Abort(1)


def pytest_collection_modifyitems(items):
    # The same order on every rank, whatever pytest plugins do.
    items.sort(key=lambda item: item.nodeid)
