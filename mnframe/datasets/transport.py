"""Point-to-point moves of one rank's shard, as raw bytes, in chunks.

The sender and the receiver walk the same schedule (``pieces``): row blocks
that fit the chunk size, each split into byte pieces of at most the chunk size,
so every MPI message stays under the 2 GiB count limit and payloads of any size
work. The receiver writes straight into the final array (no staging copy, no
pickle). When the rows to send are not one contiguous block (a shuffled shard),
the sender gathers them block by block into two staging buffers and overlaps
gathering the next block with sending the previous one, so the root never holds
a second copy of a whole shard.
"""

import pickle

import numpy as np
from mpi4py import MPI

from mnframe.runtime import oplog

MPI_COUNT_MAX = 2**31 - 1  # MPI counts are C ints
_TAG = 0x5CA7


def pieces(n_rows, row_bytes, chunk):
    """Yield ``(row0, row1, [(byte_offset, byte_count), ...])`` covering all rows."""
    if n_rows == 0 or row_bytes == 0:
        return
    rows_per_block = max(1, chunk // row_bytes)
    for r0 in range(0, n_rows, rows_per_block):
        r1 = min(n_rows, r0 + rows_per_block)
        start, stop = r0 * row_bytes, r1 * row_bytes
        yield r0, r1, [(o, min(chunk, stop - o)) for o in range(start, stop, chunk)]


def _as_bytes(a):
    return a.reshape(-1).view(np.uint8)


def send_rows(comm, arr, index, dest, chunk):
    """Send ``arr[index]`` (``index``: slice or int array) to ``dest`` in chunked raw pieces."""
    row_bytes = arr.dtype.itemsize * int(np.prod(arr.shape[1:], dtype=np.int64))
    if isinstance(index, slice):
        begin, end, _ = index.indices(len(arr))
        n_rows = max(0, end - begin)
    else:
        n_rows = len(index)
    view = arr[index] if isinstance(index, slice) else None
    if view is not None and view.flags.c_contiguous:
        flat = _as_bytes(view)  # zero copy: send straight from the dataset
        for _, _, parts in pieces(n_rows, row_bytes, chunk):
            for off, count in parts:
                with oplog.op("scatter_dataset.send", peer=dest, nbytes=count):
                    comm.Send([flat[off : off + count], MPI.BYTE], dest, _TAG)
        return
    rows_per_block = max(1, chunk // max(1, row_bytes))
    stages = [np.empty((min(rows_per_block, n_rows),) + arr.shape[1:], arr.dtype) for _ in range(2)]
    pending = [[], []]
    for block, (r0, r1, parts) in enumerate(pieces(n_rows, row_bytes, chunk)):
        slot = block % 2
        with oplog.op("scatter_dataset.wait", peer=dest):
            MPI.Request.Waitall(pending[slot])  # this staging buffer is free again
        stage = stages[slot][: r1 - r0]
        if view is not None:
            np.copyto(stage, view[r0:r1])
        else:
            np.take(arr, index[r0:r1], axis=0, out=stage)
        flat = _as_bytes(stage)
        base = r0 * row_bytes
        reqs = []
        for off, count in parts:
            with oplog.op("scatter_dataset.isend", peer=dest, nbytes=count):
                reqs.append(comm.Isend([flat[off - base : off - base + count], MPI.BYTE], dest, _TAG))
        pending[slot] = reqs
    for reqs in pending:
        with oplog.op("scatter_dataset.wait", peer=dest):
            MPI.Request.Waitall(reqs)


def recv_rows(comm, n_rows, tail, dtype, source, chunk):
    """Receive the rows ``send_rows`` sends into a new ``(n_rows, *tail)`` array."""
    out = np.empty((n_rows,) + tuple(tail), dtype)
    row_bytes = out.dtype.itemsize * int(np.prod(tail, dtype=np.int64))
    flat = _as_bytes(out) if out.size else None
    for _, _, parts in pieces(n_rows, row_bytes, chunk):
        for off, count in parts:
            with oplog.op("scatter_dataset.recv", peer=source, nbytes=count):
                comm.Recv([flat[off : off + count], MPI.BYTE], source, _TAG)
    return out


def send_object(comm, obj, dest, chunk):
    """Pickle ``obj`` and send it as a length then chunked bytes; a failure is sent as an error."""
    try:
        payload = np.frombuffer(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL), np.uint8)
        error = None
    except Exception as e:  # the receiver must learn of it, or it waits forever
        payload, error = None, f"{type(e).__name__}: {e}"
    if error is not None:
        send_error(comm, error, dest)
        return error
    with oplog.op("scatter_dataset.send_len", peer=dest):
        comm.Send(np.array([len(payload)], np.int64), dest, _TAG)
    send_rows(comm, payload, slice(0, len(payload)), dest, chunk)
    return None


def send_error(comm, message, dest):
    """Tell a waiting receiver that its shard will not come, and why."""
    with oplog.op("scatter_dataset.send_error", peer=dest):
        comm.Send(np.array([-1], np.int64), dest, _TAG)
        comm.send(message, dest, _TAG)


def recv_object(comm, source, chunk):
    """``(obj, None)`` or ``(None, error message)`` for what ``send_object`` sent."""
    length = np.empty(1, np.int64)
    with oplog.op("scatter_dataset.recv_len", peer=source):
        comm.Recv(length, source, _TAG)
    if length[0] < 0:
        with oplog.op("scatter_dataset.recv_error", peer=source):
            return None, comm.recv(source=source, tag=_TAG)
    payload = recv_rows(comm, int(length[0]), (), np.uint8, source, chunk)
    return pickle.loads(memoryview(payload)), None
