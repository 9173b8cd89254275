"""Runs inside every rank of the GPU MPI modules (see tests/gpu/test_gpu_mpi.py).

Each rank uses GPU ``world rank % device count`` (fake nodes restart
``intra_rank`` at 0, so the world rank keeps ranks on distinct GPUs when there
are enough). A failing rank prints its report and aborts the job, as in tests/mpi.
"""

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402

import mnframe  # noqa: E402,F401  (before chainer: NumPy 2 shim)
from mnframe.testing.mpi_pytest import *  # noqa: E402,F401,F403  (abort on failure, same order)


@pytest.fixture(scope="session")
def cupy():
    import cupy
    from mpi4py import MPI

    cupy.cuda.Device(MPI.COMM_WORLD.rank % cupy.cuda.runtime.getDeviceCount()).use()
    return cupy


@pytest.fixture(scope="session")
def names():
    return [n for n in os.environ["MNFRAME_GPU_NAMES"].split(",") if n]
