"""Helpers for testing mnframe and code built on it under MPI."""
from mnframe.testing.launch import MpiResult, mpiexec_path, run_mpi  # noqa: F401
