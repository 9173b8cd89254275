"""Whether the MPI library can read and write GPU memory (CUDA-aware MPI).

Detected, not assumed: ``MNFRAME_CUDA_AWARE=1|0`` decides when set (for MPIs
that cannot be asked); otherwise the library is asked through its extension
``MPIX_Query_cuda_support()`` (Open MPI, MPICH >= 4, MVAPICH2) or
``MPIX_GPU_query_support`` (MPICH), looked up in the loaded MPI library with
ctypes. An MPI that offers neither counts as not CUDA-aware: GPU data is then
staged through host memory, which is always correct. ``agreed`` makes every
rank of a communicator take the same answer (all must take the same path).
"""

import ctypes
import os

from mnframe.runtime import oplog

ENV = "MNFRAME_CUDA_AWARE"
_TRUE, _FALSE = {"1", "true", "yes", "on"}, {"0", "false", "no", "off"}
_MPIX_GPU_SUPPORT_CUDA = 0  # MPICH's enum value for CUDA


def from_env():
    """True/False from ``MNFRAME_CUDA_AWARE``, None when unset; a bad value raises."""
    value = os.environ.get(ENV)
    if value is None or value.strip() == "":
        return None
    v = value.strip().lower()
    if v in _TRUE | _FALSE:
        return v in _TRUE
    raise ValueError(f"{ENV}={value!r}: expected 1 or 0 (whether the MPI library is CUDA-aware)")


def query_library():
    """The MPI library's own answer (True/False), or None when it offers no query."""
    try:
        from mpi4py import MPI

        lib = ctypes.CDLL(MPI.__file__)  # dlsym also searches its dependency, libmpi
    except OSError:
        return None
    fn = getattr(lib, "MPIX_Query_cuda_support", None)
    if fn is not None:
        fn.restype, fn.argtypes = ctypes.c_int, []
        return bool(fn())
    fn = getattr(lib, "MPIX_GPU_query_support", None)
    if fn is not None:
        fn.restype = ctypes.c_int
        out = ctypes.c_int(0)
        if fn(_MPIX_GPU_SUPPORT_CUDA, ctypes.byref(out)) == 0:
            return bool(out.value)
    return None


def detect():
    """(aware, how): this process's answer and where it came from."""
    env = from_env()
    if env is not None:
        return env, f"{ENV}={int(env)}"
    lib = query_library()
    if lib is not None:
        return lib, "MPIX query of the MPI library"
    return False, "the MPI library offers no CUDA query (assumed not CUDA-aware)"


def agreed(mpi_comm):
    """True only when every rank of ``mpi_comm`` detects a CUDA-aware MPI (collective)."""
    from mpi4py import MPI

    mine = detect()[0]
    with oplog.op("cuda_aware:agree"):
        return bool(mpi_comm.allreduce(int(mine), op=MPI.MIN))
