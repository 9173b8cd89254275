"""ChainerMN's private module ``chainermn.communicators._memory_utility``.

The helpers code written against ChainerMN calls: choosing a model's parameters
and counting their elements (CPU and GPU), MPI buffer objects for arrays, and
the CuPy buffers ``HostPinnedMemory``/``DeviceMemory`` with ``pack_params``/
``unpack_params`` and ``ParamsData``. mnframe's own communicators do not use
these (they pack through packing.py and device_packing.py); the GPU helpers
import CuPy when called and have not run on a GPU.
"""

import ctypes

import numpy as np

from mnframe.communicators import _communication_utility  # noqa: F401 - ChainerMN exposes it here
from mnframe.runtime.mpi_comm import MPI


def _cupy():
    try:
        import cupy
    except Exception as e:  # ImportError, or a CUDA driver problem raised at import
        raise RuntimeError(f"this helper needs CuPy, which does not import here ({type(e).__name__}: {e})") from None
    return cupy


def _is_cupy(array):
    return type(array).__module__.split(".")[0] == "cupy"


def _params(model):
    return [param for _, param in sorted(model.namedparams()) if param.array is not None]


def extract_params_set_data(model):
    """The model's initialised parameters, sorted by name."""
    return _params(model)


def extract_params_set_grad(model, zero_fill):
    """The parameters whose gradients are averaged: all initialised ones with ``zero_fill``,
    else those that have a gradient; sorted by name."""
    return [p for p in _params(model) if zero_fill or p.grad is not None]


def count_grad_elements(params, zero_fill):
    """Number of gradient values of ``params`` (data sizes with ``zero_fill``)."""
    return sum(int((p.array if zero_fill else p.grad).size) for p in params)


def get_device_memory_pointer(array):
    """A buffer MPI can read: the contiguous NumPy array, or a ctypes view of a CuPy array's device memory."""
    if isinstance(array, np.ndarray):
        return np.ascontiguousarray(array)
    if _is_cupy(array):
        array = _cupy().ascontiguousarray(array)
        return ctypes.cast(array.data.ptr, ctypes.POINTER(ctypes.c_ubyte * array.nbytes)).contents
    raise ValueError(f"{type(array)} is from an unsupported array module")


def array_to_buffer_object(array, mpi_dtype=None):
    """An MPI message for ``array``: the NumPy array itself, or ``(device buffer, mpi_dtype)`` (None: MPI.FLOAT)."""
    mpi_dtype = MPI.FLOAT if mpi_dtype is None else mpi_dtype
    pointer = get_device_memory_pointer(array)
    return pointer if isinstance(pointer, np.ndarray) else (pointer, mpi_dtype)


class _GrowingMemory:
    """A CuPy allocation that grows to the largest size asked for (``assign``)."""

    def __init__(self):
        self._cp = _cupy()
        self.size = 0
        self.memory = None

    def _allocate(self, size):
        raise NotImplementedError

    def assign(self, size):
        if size > self.size:
            self.size = size
            self.memory = self._allocate(size)

    def buffer(self, size):
        """The first ``size`` bytes as a ctypes array (an MPI buffer)."""
        return ctypes.cast(self.memory.ptr, ctypes.POINTER(ctypes.c_ubyte * size)).contents


class HostPinnedMemory(_GrowingMemory):
    """Page-locked host memory (``cupy.cuda.alloc_pinned_memory``)."""

    def _allocate(self, size):
        return self._cp.cuda.alloc_pinned_memory(size)

    def ptr(self, offset=0):
        return ctypes.c_void_p(self.memory.ptr + offset)

    def array(self, count, offset=0, dtype=np.float32):
        if dtype is None:
            raise TypeError("dtype must be an instance of numpy.dtype class")
        return np.frombuffer(self.memory, count=count, offset=offset, dtype=dtype)


class DeviceMemory(_GrowingMemory):
    """Device memory (``cupy.cuda.alloc``) that CuPy arrays are copied into and out of."""

    def _allocate(self, size):
        return self._cp.cuda.alloc(size)

    def ptr(self):
        return self.memory.ptr

    def from_device(self, src, size, offset=0, stream=None):
        """Copy ``size`` bytes of the CuPy array ``src`` to byte ``offset`` of this memory."""
        self._copy(self.memory + offset, self._pointer(src), size, stream)

    def to_device(self, dst, size, offset=0, stream=None):
        """Copy ``size`` bytes from byte ``offset`` of this memory into the CuPy array ``dst``."""
        self._copy(self._pointer(dst), self.memory + offset, size, stream)

    def array(self, shape, offset=0, dtype=np.float32):
        if dtype is None:
            raise TypeError("dtype must be an instance of numpy.dtype class")
        return self._cp.ndarray(shape, memptr=self.memory + offset, dtype=dtype)

    @staticmethod
    def _pointer(array):
        if not _is_cupy(array):
            raise ValueError(f"{type(array)} is from an unsupported array module")
        return array.data

    @staticmethod
    def _copy(dst, src, size, stream):
        if stream is None:
            dst.copy_from_device(src, size)
        else:
            dst.copy_from_device_async(src, size, stream)


def _value(param, attr_name, zero_fill, make):
    v = getattr(param, attr_name)
    if v is None and attr_name == "grad" and zero_fill:
        v = make(param.array)
    return v


def pack_params(params, attr_name, buffer, transfer_dtype, zero_fill, stream=None):
    """Copy each parameter's ``attr_name`` array, cast to ``transfer_dtype``, into ``buffer`` back to back.

    A missing gradient counts as zeros with ``zero_fill``.
    """
    offset = 0
    for param in params:
        v = _value(param, attr_name, zero_fill, lambda a, param=param: param.xp.zeros_like(a))
        size = v.size * np.dtype(transfer_dtype).itemsize
        buffer.from_device(v if v.dtype == transfer_dtype else v.astype(transfer_dtype), size, offset, stream)
        offset += size


def unpack_params(params, attr_name, buffer, transfer_dtype, zero_fill, stream=None):
    """The inverse of ``pack_params``: ``buffer``'s values back into each parameter's array."""
    offset = 0
    for param in params:
        v = getattr(param, attr_name)
        if v is None and attr_name == "grad" and zero_fill:
            v = param.xp.empty_like(param.array)
            setattr(param, attr_name, v)
        size = v.size * np.dtype(transfer_dtype).itemsize
        if v.dtype == transfer_dtype:
            buffer.to_device(v, size, offset, stream)
        else:
            wire = param.xp.empty(v.shape, dtype=transfer_dtype)
            buffer.to_device(wire, size, offset, stream)
            v[...] = wire.astype(v.dtype)
        offset += size


class ParamsData:
    """Device tables of the parameters' ``attr_name`` arrays for a batched copy kernel:
    ``dptr`` (pointers), ``dtype`` (NCCL type ids), ``size_csum`` (element offsets),
    ``n_params``, ``n_elems``. A missing gradient becomes zeros with ``zero_fill``."""

    def __init__(self, params, attr_name, zero_fill):
        cp = _cupy()
        arrays = []
        for param in params:
            v = getattr(param, attr_name)
            if v is None and attr_name == "grad" and zero_fill:
                v = param.xp.zeros_like(param.array)
                setattr(param, attr_name, v)
            if not _is_cupy(v):
                raise ValueError(f"{type(v)} is from an unsupported array module")
            arrays.append(v)
        sizes = np.cumsum([0] + [a.size for a in arrays]).astype(np.int32)
        self.n_params = len(arrays)
        self.n_elems = int(sizes[-1])
        self.size_csum = cp.asarray(sizes)
        self.dtype = cp.asarray(
            np.array([_communication_utility._get_nccl_type_id(a.dtype) for a in arrays], dtype=np.int32)
        )
        self.dptr = cp.asarray(np.array([a.data.ptr for a in arrays], dtype=np.int64))
