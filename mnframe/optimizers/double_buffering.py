"""Double buffering: average step t's gradients while step t+1 computes.

Documented schedule (the same as ChainerMN's double-buffering optimizer):

    update 1 (also the first after new parameters appeared):
                  broadcast rank 0's parameters; no step (multi_node.py)
    update 2:     start averaging g_2; no step
    update t >= 3: wait for mean(g_{t-1}), start averaging g_t,
                  step with mean(g_{t-1})

so every step uses the gradients of the previous update (one update stale),
and ``t`` is 1 after three updates. A checkpoint holds the sums in flight
(``pending_sums``; the wrapper writes them), so a resumed run steps with them
exactly as the uninterrupted run would.
ChainerMN does this with a CUDA stream and NCCL only; here the gradients are
packed into one flat buffer per dtype and averaged with non-blocking
``MPI.Iallreduce`` on the communicator's ``mpi_comm``, so it also works on CPU.
Two buffer sets alternate: one is in flight while the next step packs into the
other. How much of the averaging really overlaps the next forward/backward
depends on the MPI library's asynchronous progress (MPICH without a progress
thread advances it mostly inside the wait); the schedule above holds either way.
"""

import chainer
import numpy as np
from mpi4py import MPI

from mnframe.runtime import oplog

# MPI has no half type: such gradients are averaged in float32
_WIRE_DTYPE = {np.dtype(np.float16): np.dtype(np.float32)}


def _wire(dtype):
    dtype = np.dtype(dtype)
    return _WIRE_DTYPE.get(dtype, dtype)


def _to_host(array):
    return array if isinstance(array, np.ndarray) else chainer.backend.CpuDevice().send(array)


class StaleGradientAverager:
    """Averages gradients one step late, with non-blocking allreduce."""

    def __init__(self, communicator):
        self.communicator = communicator
        self._pending = None  # (requests, {dtype: buffer}, params)
        self._spare = {}  # the buffer set not in flight

    def exchange(self, target):
        """Start averaging this step's gradients; put last step's mean in ``param.grad``.

        Returns True when ``param.grad`` now holds an average to update with,
        False on the first exchange after a (re)start.
        """
        params = [p for _, p in sorted(target.namedparams()) if p.array is not None]
        buffers = self._pack(params)
        had_previous = self._pending is not None
        if had_previous:
            self._finish(self._pending, params)
        self._start(buffers, params)
        return had_previous

    def pending_sums(self):
        """Wait for the exchange in flight; its summed buffers by wire dtype ({} if none), kept pending."""
        if self._pending is None:
            return {}
        requests, buffers, params = self._pending
        with oplog.op("double_buffering.wait"):
            MPI.Request.Waitall(requests)
        self._pending = ([], buffers, params)
        return buffers

    def restore_pending(self, sums):
        """Continue from a checkpoint's ``pending_sums``: the next exchange updates with them."""
        self.reset()
        if sums:
            self._pending = ([], dict(sums), None)  # the parameters: those of the next exchange

    def reset(self):
        """Wait for and drop the average in flight (parameters are about to change)."""
        if self._pending is not None:
            requests, buffers, _ = self._pending
            with oplog.op("double_buffering.wait"):
                MPI.Request.Waitall(requests)
            self._spare = buffers
            self._pending = None

    # ---- internals
    def _pack(self, params):
        groups = {}
        for p in params:
            groups.setdefault(_wire(p.array.dtype), []).append(p)
        buffers = {}
        for dtype, group in groups.items():
            total = sum(p.array.size for p in group)
            buf = self._spare.get(dtype)
            if buf is None or buf.size != total:
                buf = np.empty(total, dtype)
            offset = 0
            for p in group:
                view = buf[offset : offset + p.array.size]
                if p.grad is None:  # unused parameter: contributes zero (zero_fill)
                    view[...] = 0
                else:
                    np.copyto(view, _to_host(p.grad).reshape(-1), casting="unsafe")
                offset += p.array.size
            buffers[dtype] = buf
        self._spare = {}
        return buffers

    def _start(self, buffers, params):
        mpi = self.communicator.mpi_comm
        requests = []
        for buf in buffers.values():
            with oplog.op("double_buffering.iallreduce", array=buf):
                requests.append(mpi.Iallreduce(MPI.IN_PLACE, buf, op=MPI.SUM))
        self._pending = (requests, buffers, params)

    def _finish(self, pending, current_params):
        requests, buffers, params = pending
        if params is None:  # restored from a checkpoint
            params = current_params
            for dtype, buf in buffers.items():
                expected = sum(p.array.size for p in params if _wire(p.array.dtype) == dtype)
                if buf.size != expected:
                    raise ValueError(
                        f"double buffering: the checkpoint's gradient sums ({buf.size} {dtype} "
                        f"values) do not fit this model ({expected}); was the model changed?"
                    )
        with oplog.op("double_buffering.wait"):
            MPI.Request.Waitall(requests)
        scale = 1.0 / self.communicator.mpi_comm.size
        offsets = dict.fromkeys(buffers, 0)
        for p in params:
            dtype = _wire(p.array.dtype)
            off = offsets[dtype]
            mean = buffers[dtype][off : off + p.array.size].reshape(p.array.shape)
            offsets[dtype] = off + p.array.size
            if isinstance(p.array, np.ndarray):
                if p.grad is None or p.grad.dtype != p.array.dtype:
                    p.grad = np.empty_like(p.array)
                np.multiply(mean, scale, out=p.grad, casting="unsafe")
            else:  # device arrays: average on the host, send back
                p.grad = p.device.send((mean * scale).astype(p.array.dtype))
        self._pending = None
        self._spare = buffers
