"""Let Chainer 7.8.1 import under NumPy 2.

Chainer 7 reads ``numpy.sctypes`` (removed in NumPy 2.0) while importing. Before
Chainer is imported we put back an equivalent read-only table; nothing else in
NumPy is touched, and under NumPy 1.x this is a no-op.
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
