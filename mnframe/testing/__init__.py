"""Helpers for testing mnframe and code built on it under MPI (and ChainerMN's ``get_device``)."""

from mnframe.testing.device import get_device  # noqa: F401
from mnframe.testing.launch import MpiResult, mpiexec_path, run_mpi, run_pytest_module  # noqa: F401
