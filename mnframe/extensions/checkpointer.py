"""Generational per-rank checkpoints that resume where every rank agrees.

Each rank writes ``<name>.<rank>.<iteration>`` (a ``save_npz`` archive) into
``path`` (default: the trainer's ``out``). After a crash, ``maybe_load`` finds
the newest iteration for which *every* rank has an intact file and loads it on
all ranks, so the job resumes consistently even if some ranks died before
finishing their last checkpoint.

Reliability beyond the spec:
- files are written through ``mnframe.runtime.fs.atomic_path`` (temp file, fsync,
  rename), so a killed writer leaves no partial file under a final name;
- before loading, every rank checks its candidate archive (zip structure and
  CRCs); a truncated or corrupt file is never loaded: the ranks agree to fall
  back to the next older common iteration;
- ``finalize`` deletes the checkpoints only when training ended normally; on an
  exception (including KeyboardInterrupt) or a preemption they are kept for restart;
- preemption (mnframe.runtime.preemption): once the mnframe runtime is active
  (a communicator was created), a SIGTERM/SIGUSR1 to mpiexec or to any rank
  makes every rank write a checkpoint at the end of that iteration; the
  trainer then stops and the script ends normally (status 0);
- ``gc_interval`` really is the number of extra generations that triggers a
  collection (the spec's implementation hard-codes 5).
"""

import os
import re
import sys
import time
import warnings
import zipfile

from chainer.training import extension

from mnframe._internal.npz_read import load_npz
from mnframe._internal.npz_write import save_npz
from mnframe.communicators import host_collectives
from mnframe.runtime import activation, preemption
from mnframe.runtime.fs import atomic_path
from mnframe.runtime.mpi_comm import mpi_comm_of

__all__ = ["create_multi_node_checkpointer"]

# Flags a multi-node optimizer may expose to skip its initial broadcast after a
# complete (all ranks in sync) resume.
_OPTIMIZER_SKIP_BCAST_FLAGS = {"needs_broadcast": False}


def create_multi_node_checkpointer(name, comm, cp_interval=5, gc_interval=5, path=None):
    """Create a multi-node checkpointer (a trainer extension).

    Args:
        name (str): identifier of the run (the file prefix).
        comm: a mnframe communicator (or an mpi4py communicator).
        cp_interval (int): how many common generations to keep.
        gc_interval (int): collect old generations once this many more exist.
        path (str): directory for the files; default: ``trainer.out``.

    Use ``trainer.extend(cp, trigger=(25, 'iteration'))`` and call
    ``cp.maybe_load(trainer, optimizer)`` before ``trainer.run()`` (after
    adding extensions with state). Without a trainer: ``cp.maybe_load(obj)``
    then ``cp.save(obj)`` (or ``cp.save(obj, iteration)``) in the loop. Every
    rank must call ``save`` at the same iterations (it may run a collective).
    """
    return MultiNodeCheckpointer(name, comm, cp_interval, gc_interval, path)


class CheckpointStats:
    """Durations of the saves this rank made."""

    def __init__(self):
        self.durations = []

    def record(self, seconds):
        self.durations.append(seconds)

    def report(self):
        d = self.durations
        if not d:
            return {"count": 0}
        return {
            "count": len(d),
            "mean_s": sum(d) / len(d),
            "min_s": min(d),
            "max_s": max(d),
            "total_s": sum(d),
            "last_s": d[-1],
        }


class TimedCheckpointStats(CheckpointStats):
    """ChainerMN's ``_CheckpointStats`` interface (its tests use it): ``start()``/``end()`` around a
    save record its duration, ``report()`` is one line of text."""

    def __init__(self):
        super().__init__()
        self._started = None

    def start(self):
        self._started = time.perf_counter()

    def end(self):
        if self._started is None:
            raise RuntimeError("_CheckpointStats.end() called without start()")
        self.record(time.perf_counter() - self._started)
        self._started = None

    def report(self):
        stats = super().report()
        return ", ".join(f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v}" for k, v in stats.items())


class MultiNodeCheckpointer(extension.Extension):
    """See ``create_multi_node_checkpointer``."""

    priority = -100  # after other extensions updated their state, like snapshot

    def __init__(self, name, comm, cp_interval=5, gc_interval=5, path=None):
        if not isinstance(name, str) or not name or "/" in name or os.sep in name:
            raise ValueError(f"checkpointer name must be a non-empty file-name prefix, got {name!r}")
        for arg, value in (("cp_interval", cp_interval), ("gc_interval", gc_interval)):
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"{arg} must be a positive int, got {value!r}")
        self.name = name
        self.comm = comm
        self.rank = mpi_comm_of(comm).Get_rank()
        self.cp_interval = cp_interval
        self.gc_interval = gc_interval
        self.path = path
        self.files = []  # iterations of this rank's checkpoints, oldest first
        self.corrupt = []  # file names found damaged by maybe_load
        self.stats = CheckpointStats()
        self._failed = False
        self._pattern = re.compile(re.escape(name) + r"\.(\d+)\.(\d+)$")

    # ----------------------------------------------------------------- saving

    def initialize(self, trainer):
        if activation.activated():
            preemption.watch(trainer, self, self.comm)

    def __call__(self, trainer):
        self.save(trainer, trainer.updater.iteration)
        if preemption.preempted() and self.rank == 0:
            sys.stderr.write(
                f"mnframe: preempted; checkpoint {self._filename(trainer.updater.iteration)} "
                f"written in {self.path} at iteration {trainer.updater.iteration}, stopping\n"
            )

    def save(self, target, iteration=None):
        """Write this rank's checkpoint of ``target`` (collective every few calls: GC).

        ``iteration`` defaults to ``target.updater.iteration`` for a trainer,
        ``target.iteration`` for an updater, else one more than the last save.
        """
        if iteration is None:
            iteration = _iteration_of(target, self.files)
        directory = self._directory(target)
        os.makedirs(directory, exist_ok=True)
        start = time.perf_counter()
        with atomic_path(os.path.join(directory, self._filename(iteration))) as tmp:
            save_npz(tmp, target)  # chainer's, but closes its zip even on a full disk
        self.stats.record(time.perf_counter() - start)
        if iteration in self.files:
            self.files.remove(iteration)
        self.files.append(iteration)
        if len(self.files) >= self.cp_interval + self.gc_interval:
            self._collect()

    def _collect(self):
        """Keep the newest ``cp_interval`` generations all ranks share (plus newer local ones)."""
        common = self._common_iterations(self.files)
        keep = set(common[-self.cp_interval :])
        newest_common = common[-1] if common else -1
        keep |= {i for i in self.files if i > newest_common}
        for i in self.files:
            if i not in keep:
                self._remove(self._filename(i))
        self.files = [i for i in self.files if i in keep]

    # ----------------------------------------------------------------- loading

    def maybe_load(self, trainer, optimizer=None, path=None):
        """Load the newest checkpoint every rank has intact; return its iteration or None.

        Collective: call it on every rank. With ``optimizer`` (a multi-node
        optimizer), tells it that all ranks are in sync so its initial
        parameter broadcast can be skipped.
        """
        if self.path is None:
            self.path = path if path is not None else getattr(trainer, "out", None)
        directory = self._directory(trainer)
        local = self._scan(directory)
        self.files = sorted(local)
        loaded = None
        for it in reversed(self._common_iterations(local)):
            fname = self._filename(it)
            problem = _archive_problem(os.path.join(directory, fname))
            if problem is not None:
                warnings.warn(
                    f"checkpoint {fname} in {directory} is damaged ({problem}); it will not be loaded", stacklevel=2
                )
                self.corrupt.append(fname)
                self.files.remove(it)
            if not host_collectives.all_agree(self.comm, problem is None, name="checkpointer.verify"):
                continue  # some rank's copy is bad: try the next older common generation
            error = None
            try:
                load_npz(os.path.join(directory, fname), trainer)  # no pickle: mnframe._internal.npz_read
            except Exception as e:  # share it, so no rank runs on alone
                error = f"loading {fname} failed: {type(e).__name__}: {e}"
            host_collectives.share_verdict(self.comm, error, "checkpointer.load")
            loaded = it
            break
        if loaded is not None and optimizer is not None:
            for flag, value in _OPTIMIZER_SKIP_BCAST_FLAGS.items():
                if hasattr(optimizer, flag):
                    setattr(optimizer, flag, value)
        return loaded

    def _scan(self, directory):
        """Iterations of this rank's finished checkpoint files in ``directory``."""
        try:
            names = os.listdir(directory)
        except FileNotFoundError:
            return []
        found = []
        for n in names:
            m = self._pattern.match(n)
            if m and int(m.group(1)) == self.rank:
                found.append(int(m.group(2)))
        return found

    def _common_iterations(self, iterations):
        """Sorted iterations present on every rank (one allgather)."""
        lists = host_collectives.allgather_obj(self.comm, sorted(set(iterations)), name="checkpointer.sync_files")
        common = set(lists[0])
        for other in lists[1:]:
            common &= set(other)
        return sorted(common)

    # ----------------------------------------------------------------- cleanup

    def on_error(self, _trainer, _exc, _tb):
        self._failed = True

    def finalize(self):
        """Remove this rank's checkpoints, unless training is ending with an error."""
        if self._failed or sys.exc_info()[0] is not None or preemption.preempted():
            return  # keep them: this is what a restart resumes from
        if self.path is None:
            return
        for i in self.files:
            self._remove(self._filename(i))
        for fname in self.corrupt:
            self._remove(fname)
        self.files = []
        self.corrupt = []

    def get_stats(self):
        """Save-time statistics of this rank: count, mean/min/max/total/last seconds."""
        return self.stats.report()

    # ----------------------------------------------------------------- helpers

    def _filename(self, iteration):
        return f"{self.name}.{self.rank}.{iteration}"

    def _filenames(self, iterations):
        """This rank's file names for ``iterations`` (ChainerMN's helper of the same name)."""
        return [self._filename(i) for i in iterations]

    def _parse_filenames(self, filenames):
        """``(name, rank, iteration)`` of each checkpoint file name of this checkpointer, others skipped."""
        for fname in filenames:
            m = self._pattern.match(fname)
            if m:
                yield self.name, int(m.group(1)), int(m.group(2))

    def _directory(self, target):
        if self.path is None:
            out = getattr(target, "out", None)
            if out is None:
                raise ValueError(
                    "the checkpointer needs a directory: pass path= to "
                    "create_multi_node_checkpointer when the target is not a trainer"
                )
            self.path = out
        return self.path

    def _remove(self, fname):
        try:
            os.remove(os.path.join(self.path, fname))
        except FileNotFoundError:
            pass


def _iteration_of(target, saved):
    for holder in (getattr(target, "updater", None), target):  # a trainer, or an updater
        if holder is not None and isinstance(getattr(holder, "iteration", None), int):
            return int(holder.iteration)
    return (max(saved) + 1) if saved else 0


def _archive_problem(path):
    """None if ``path`` is a readable npz (zip) archive with good CRCs, else why not."""
    try:
        with zipfile.ZipFile(path) as z:
            bad = z.testzip()
    except (OSError, zipfile.BadZipFile, EOFError, ValueError) as e:
        return f"{type(e).__name__}: {e}"
    if bad is not None:
        return f"bad CRC in member {bad!r}"
    return None
