"""Let Chainer 7.8.1 import under NumPy 2.

Chainer 7 reads ``numpy.sctypes`` (removed in NumPy 2.0) while importing. Before
Chainer is imported we put back an equivalent read-only table; nothing else in
NumPy is touched, and under NumPy 1.x this is a no-op.

Processes started by multiprocessing's ``forkserver`` (what mnframe picks for
MultiprocessIterator workers under MPI) unpickle Chainer objects in a fresh
interpreter that never ran ``import mnframe``, unless its ``__main__`` does. So
under NumPy 2 ``apply()`` also adds ``mnframe`` to the forkserver's preload
list: the server imports it once, and every worker forked from it inherits the
table. (Under ``spawn``, the main module must import mnframe before chainer.)
"""
import numpy


def apply():
    if hasattr(numpy, "sctypes"):
        return
    numpy.sctypes = {
        "int": [numpy.int8, numpy.int16, numpy.int32, numpy.int64],
        "uint": [numpy.uint8, numpy.uint16, numpy.uint32, numpy.uint64],
        "float": [numpy.float16, numpy.float32, numpy.float64],
        "complex": [numpy.complex64, numpy.complex128],
        "others": [bool, object, bytes, str, numpy.void],
    }
    _preload_in_forkserver()


def _preload_in_forkserver():
    try:
        from multiprocessing import forkserver
    except ImportError:  # a platform without forkserver
        return
    # CPython keeps the list on the module's server object; the default is ['__main__'].
    modules = list(getattr(forkserver._forkserver, "_preload_modules", ["__main__"]))
    if "mnframe" not in modules:
        forkserver.set_forkserver_preload(modules + ["mnframe"])
