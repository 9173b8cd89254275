"""Double buffering on GPUs: NCCL averages step t's gradients on a side CUDA stream.

The schedule is the one of :mod:`mnframe.optimizers.double_buffering` (every
update uses the previous step's averaged gradients). Here, as in ChainerMN,
the exchange runs on its own CUDA stream, so it overlaps the next step's
forward and backward on the GPU without any host thread:

    main stream:  pack g_t (scaled by 1/size) into buffer t%2 -> record ``packed``
    side stream:  wait ``packed`` -> ncclAllReduce(buffer t%2) -> record ``done``
    main stream:  wait ``done`` of step t-1 -> param.grad = views of buffer (t-1)%2

Two device buffers alternate: step t packs into one while the other, in flight
since step t-1, is unpacked. The ranks check that they hold the same gradients
before every exchange (a mismatch would make NCCL wait forever). Used by
``create_multi_node_optimizer(double_buffering=True)`` with communicators whose
``double_buffering`` is ``"nccl"`` (pure_nccl). CuPy is imported on creation.

Its NCCL group is destroyed by ``close()``: called by the optimizer's
``finalize()`` and, at the latest, by the communicator's ``finalize()``.
"""

import numpy as np

from mnframe.communicators import options, packing
from mnframe.communicators.device_packing import DevicePacker
from mnframe.communicators.nccl_ops import NcclGroup
from mnframe.communicators.reducer_base import Buffer
from mnframe.runtime import oplog


class StreamStaleAverager:
    """Averages gradients one step late with NCCL on a separate CUDA stream."""

    def __init__(self, communicator):
        import cupy

        self.communicator = communicator
        self._cupy = cupy
        self._stream = cupy.cuda.Stream(non_blocking=True)
        self._nccl = None  # created at the first exchange (collective)
        self._packer = DevicePacker(cupy)
        self._slots = {}  # layout key -> (layout, [Buffer, Buffer])
        self._step = 0
        self._pending = None  # (layout, slot buffer, params, done event)
        register = getattr(communicator, "close_on_finalize", None)
        if register is not None:
            register(self.close)

    def exchange(self, target):
        """Start averaging this step's gradients; put last step's mean in ``param.grad``.

        Returns True when ``param.grad`` now holds an average to update with,
        False on the first step after a (re)start.
        """
        comm = self.communicator
        params, sig = packing.describe(target, zero_fill=True)
        wire = comm.get_config("allreduce_grad_dtype")
        if wire == options.WIRE_AUTO:  # its buffers hold one step's wire for the next: no per-call choice
            wire = np.dtype(np.float16)
        key = packing.signature_key(sig, wire)
        comm._agree_on_params(sig, "double_buffering", key)
        devices = {s[4] for s in sig}  # the same on every rank: the signatures just agreed
        if devices != {"cupy"}:
            raise TypeError(
                f"double buffering with {type(comm).__name__} averages CuPy gradients on a CUDA "
                f"stream, but the model's are {'/'.join(sorted(devices))} arrays: move the model "
                f"to the GPU (model.to_device('@cupy:N')) or use a CPU communicator"
            )
        if self._nccl is None:
            self._nccl = NcclGroup(comm.mpi_comm, "double_buffering")
        layout, buf = self._slot(key, params, sig, wire)
        groups = buf.group_views(layout)
        self._packer.pack(
            layout, groups, buf.entry_views(layout), params, 1.0 / comm.size, bool(comm.get_config("batched_copy"))
        )
        main = self._cupy.cuda.get_current_stream()
        packed = main.record()
        had_previous = self._pending is not None
        if had_previous:
            self._finish(main)
        self._stream.wait_event(packed)
        with self._stream:
            for arr in groups:
                self._nccl.allreduce(arr)
            done = self._stream.record()
        self._pending = (layout, buf, params, done)
        self._step += 1
        return had_previous

    def reset(self):
        """Wait for and drop the average in flight (parameters are about to change)."""
        if self._pending is not None:
            with oplog.op("double_buffering.wait"):
                self._pending[3].synchronize()
            self._pending = None

    def _slot(self, key, params, sig, wire):
        """(layout, this step's Buffer): layout and both buffers are built once per parameter set."""
        entry = self._slots.get(key)
        if entry is None:
            if len(self._slots) >= 2:  # a model whose parameters changed: drop the old buffers
                self._slots.clear()
            layout = packing.build_layout(params, sig, wire)
            entry = self._slots[key] = (
                layout,
                [Buffer(self._cupy.empty(max(1, layout.nbytes), dtype=np.uint8)) for _ in range(2)],
            )
        layout, buffers = entry
        return layout, buffers[self._step % 2]

    def _finish(self, main):
        layout, buf, params, done = self._pending
        main.wait_event(done)  # the update below runs after the allreduce on the GPU
        self._packer.unpack(
            layout,
            buf.group_views(layout),
            buf.entry_views(layout),
            params,
            bool(self.communicator.get_config("batched_copy")),
        )
        self._pending = None

    def close(self):
        """Finish the average in flight, destroy the NCCL group, drop the buffers (idempotent)."""
        self.reset()
        if self._nccl is not None:
            self._nccl.close()
            self._nccl = None
        self._slots.clear()
