"""The gradient-averaging strategy interface and its buffer cache.

A communicator owns one ``GradReducer``. ``mean(layout, params)`` packs the
gradients into the layout's persistent buffer, averages the buffer over all
ranks (the strategy's ``reduce``) and hands the averaged gradients back as views.
Buffers are cached per layout (a few, least recently used first out), so a
communicator serving two models (e.g. a GAN's generator and discriminator)
keeps one buffer for each instead of reallocating on every call. Every rank
sees the same sequence of layouts, so allocation and eviction (collective for
shared memory) happen at the same point on every rank.
"""

import collections

import numpy as np

from mnframe.communicators import packing

CACHED_LAYOUTS = 4


class Buffer:
    """One layout's persistent buffer: ``buf`` is this rank's bytes."""

    def __init__(self, buf):
        self.buf = buf
        self.params = None  # the params last unpacked into it (for release)
        self.kept = {}  # {param index: weakref to a gradient} a strategy averaged in place, not a view
        self.views = None  # layout.entry_views(buf), built on first use
        self.groups = None  # layout.group_arrays(buf), built on first use

    def entry_views(self, layout):
        if self.views is None:
            self.views = layout.entry_views(self.buf)
        return self.views

    def group_views(self, layout):
        """This rank's typed 1-d array of every dtype group (cached)."""
        if self.groups is None:
            self.groups = layout.group_arrays(self.buf)
        return self.groups

    def free(self):
        self.buf = None


class GradReducer:
    """Averages gradients over ``mpi_comm``; subclasses implement ``reduce``."""

    cached_layouts = CACHED_LAYOUTS  # buffers kept (the overlap's bucket communicator keeps one per bucket)

    def __init__(self, mpi_comm, topology, options=None):
        self.comm = mpi_comm
        self.topo = topology
        self.options = {} if options is None else options  # the communicator's live config
        self._buffers = collections.OrderedDict()

    # -- what a strategy provides
    def layout_dtype(self, wire):
        """The dtype gradients are packed in for ``allreduce_grad_dtype=wire`` (None: their own)."""
        return wire

    def allocate(self, layout):
        """A Buffer of ``layout.nbytes`` for this strategy (private memory by default)."""
        return Buffer(np.empty(max(1, layout.nbytes), dtype=np.uint8))

    def reduce(self, layout, buffer):
        """Replace the packed sums in ``buffer`` by their mean over all ranks."""
        raise NotImplementedError

    # -- the common flow
    def mean(self, layout, params):
        buffer = self._buffer(layout)
        views = buffer.entry_views(layout)
        packing.pack(views, params)
        self.reduce(layout, buffer)
        packing.unpack(views, params)
        buffer.params = params

    def _buffer(self, layout):
        buffer = self._buffers.get(layout.key)
        if buffer is not None:
            self._buffers.move_to_end(layout.key)
            return buffer
        if len(self._buffers) >= self.cached_layouts:
            old_key, old = self._buffers.popitem(last=False)
            self._drop(old)
        buffer = self.allocate(layout)
        buffer.layout = layout
        self._buffers[layout.key] = buffer
        return buffer

    def _drop(self, buffer):
        if buffer.params is not None:
            packing.release(buffer.entry_views(buffer.layout), buffer.params)
        buffer.free()

    def close(self):
        """Free every buffer (gradients that were views become copies). Collective."""
        while self._buffers:
            _, buffer = self._buffers.popitem(last=False)
            self._drop(buffer)


def scale_inplace(arr, scale):
    if scale != 1 and arr.size:
        np.multiply(arr, scale, out=arr, casting="unsafe")
