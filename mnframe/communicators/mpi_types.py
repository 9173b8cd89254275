"""How to sum an array of a given NumPy dtype with MPI.

MPI has no float16 and no boolean "sum", so the table maps each dtype to an
(MPI datatype, MPI op) pair: native types use ``MPI.SUM``; float16 travels as
16-bit words reduced by a user-defined op that adds them in NumPy; bool uses
logical OR (what ``numpy.add`` does to booleans).
"""

import functools

import numpy as np

from mnframe.runtime.mpi_comm import MPI


def _float16_sum(inbuf, inoutbuf, _datatype):
    a = np.frombuffer(inbuf, dtype=np.float16)
    b = np.frombuffer(inoutbuf, dtype=np.float16)
    np.add(a, b, out=b)


@functools.lru_cache(maxsize=None)
def _float16_op():
    return MPI.Op.Create(_float16_sum, commute=True)


@functools.lru_cache(maxsize=None)
def sum_spec(dtype):
    """(MPI datatype, MPI op) that sums arrays of ``dtype`` element-wise."""
    dtype = np.dtype(dtype)
    if dtype == np.float16:
        return MPI.UINT16_T, _float16_op()
    if dtype == np.bool_:
        return MPI.C_BOOL, MPI.LOR
    native = MPI._typedict.get(dtype.char)  # predefined types: MPI.FLOAT, MPI.INT64_T, ...
    if native is not None:
        return native, MPI.SUM
    from mpi4py.util import dtlib  # imports mpi4py.MPI: here, not when the module is imported

    try:
        return dtlib.from_numpy_dtype(dtype), MPI.SUM
    except (ValueError, KeyError) as e:
        raise TypeError(f"cannot sum arrays of dtype {dtype} with MPI: use a numeric dtype") from e
