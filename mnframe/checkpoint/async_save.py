"""Asynchronous checkpoints (``checkpoint.async_save: true``): the training step pays for a copy.

``start`` (training thread) copies this rank's trainer state into host memory and hands
it to a background thread, which writes ``rank_<R>.npz`` into a staging directory
(``.tmp-async-iter_N``), fsyncs it and hashes it. The background thread makes no MPI
call, so this is safe at every MPI thread level: every collective stays on the training
thread. ``poll`` (training thread, every iteration while a save is in flight, one
two-integer allreduce) tells every rank whether all ranks finished: when they did, the files are
renamed into the checkpoint's temporary directory and committed through
``CheckpointStore.save`` (manifest, signature, atomic rename, garbage collection: the
same code as a synchronous save, with the hashes already computed); when any rank failed,
every rank raises the same SaveError (CheckpointError for a bug) at that iteration.
``drain`` waits for the save in flight and commits it (before a synchronous save, at the
end of training). At most one save is in flight: starting another drains the first.
"""

import os
import shutil
import threading

import numpy

from mnframe._internal.npz_write import serialize
from mnframe.checkpoint import trainer_io
from mnframe.checkpoint.manifest import sha256_file
from mnframe.checkpoint.store import TMP_PREFIX, checkpoint_name, write_error
from mnframe.communicators import host_collectives
from mnframe.runtime.errors import CheckpointError, SaveError
from mnframe.runtime.fs import fsync_dir

STAGING_PREFIX = TMP_PREFIX + "async-"  # a leftover of a killed job is removed by the next save's garbage collection


def snapshot(trainer):
    """{key: array} of ``trainer`` that later training steps cannot change (host copies)."""
    arrays = serialize(trainer)
    return {k: (v.copy() if isinstance(v, numpy.ndarray) else v) for k, v in arrays.items()}


def write_rank_file(directory, rank, arrays):
    """Write (fsynced) this rank's file into ``directory``; return {name: (size, sha256)}.
    Runs on the background thread: files only, never MPI."""
    os.makedirs(directory, exist_ok=True)
    name = trainer_io.write_rank_arrays(directory, rank, arrays)
    path = os.path.join(directory, name)
    return {name: (os.path.getsize(path), sha256_file(path))}


class _Job:
    """One save in flight on this rank: the thread and, once it ended, its outcome."""

    def __init__(self, iteration, reason, staging, rank, arrays, writer):
        self.iteration, self.reason, self.staging = iteration, reason, staging
        self.written, self.error, self.disk = None, None, True
        self._done = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(rank, arrays, writer), name=f"mnframe-async-save-{iteration}", daemon=True
        )
        self._thread.start()

    def _run(self, rank, arrays, writer):
        try:
            self.written = writer(self.staging, rank, arrays)
        except Exception as exc:  # a bug (not the disk's) becomes a CheckpointError: visible
            self.error, self.disk = write_error(rank, self.staging, exc)
        finally:
            del arrays
            self._done.set()

    def done(self):
        return self._done.is_set()

    def wait(self):
        self._done.wait()
        self._thread.join()


class AsyncSaver:
    """This rank's background saves into ``store`` (every method is collective over ``store.comm``)."""

    def __init__(self, store, writer=write_rank_file):
        self.store = store
        self.writer = writer  # (staging dir, rank, arrays) -> {name: (size, sha256)}; tests replace it
        self.job = None

    @property
    def in_flight(self):
        return self.job is not None

    def start(self, trainer, iteration, reason="interval", **commit_args):
        """Copy the state and start writing it; returns None (the name is committed later).
        A save still in flight is committed first (at most one at a time)."""
        self.drain()
        self.commit_args = commit_args
        staging = self.store.path(STAGING_PREFIX + checkpoint_name(iteration))
        arrays = {**snapshot(trainer), **self.store.identity(iteration)}  # whose file it is, inside it
        self.job = _Job(iteration, reason, staging, self.store.comm.rank, arrays, self.writer)

    def poll(self, wait=False):
        """Commit the save in flight if every rank finished writing (or wait until they did, with
        ``wait``); return the committed name or None. A failure on any rank raises on every rank."""
        job = self.job
        if job is None:
            return None
        if wait:
            job.wait()
        done = job.done()  # its outcome is final once done (set last by the thread)
        error, disk = (job.error, job.disk) if done else (None, True)
        flags = numpy.array([0 if done else 1, 1 if error else 0], dtype=numpy.int64)
        writing, failed = host_collectives.allreduce_sum(self.store.comm, flags, name="checkpoint.async_poll")
        if failed:
            self.job = None
            # this rank's own write ends first (one file and an fsync): after the allgather no
            # thread writes, so none can recreate the staging directory that rank 0 removes
            job.wait()
            error, disk = job.error, job.disk  # its final outcome: a rank that was still writing may fail too
            status = host_collectives.allgather_obj(self.store.comm, (error, disk), name="checkpoint.async_errors")
            if self.store.comm.rank == 0:
                shutil.rmtree(job.staging, ignore_errors=True)
            error_type = SaveError if all(d for e, d in status if e) else CheckpointError
            raise error_type(
                f"checkpoint {checkpoint_name(job.iteration)} not written (in the background): "
                + "; ".join(e for e, _ in status if e)
                + self.store._kept()
            )
        if writing:
            return None
        self.job = None
        return self.store.save(job.iteration, lambda tmp: _move(job, tmp), reason=job.reason, **self.commit_args)

    def drain(self):
        """Wait for the save in flight (if any) and commit it; return its name or None."""
        return self.poll(wait=True)


def _move(job, tmp):
    """``write_files`` for ``CheckpointStore.save``: rename this rank's staged file into ``tmp``;
    returns {name: (size, sha256)} so the store does not hash the file again."""
    for name in job.written:
        os.replace(os.path.join(job.staging, name), os.path.join(tmp, name))
    fsync_dir(tmp)
    return job.written
