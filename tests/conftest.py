"""The test tiers and the MPI suite (mnframe/testing/mpi_suite.py).

    pytest -q           the fast tier: tests/unit, tests/mpi at 1 and 2 ranks, job-level tests marked smoke
    pytest -q --full    everything: slow tests, every job-level test, tests/mpi at every declared size

tests/mpi/test_*.py run inside the ranks of one ``mpiexec`` launch per rank count.
"""

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

# Before any test module imports chainer: under NumPy 2, Chainer 7.8.1 imports
# only after mnframe's compatibility shim (mnframe/_internal/numpy_compat.py) has run.
import mnframe  # noqa: E402,F401
from mnframe.testing.mpi_suite import *  # noqa: E402,F401,F403
