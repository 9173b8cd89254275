"""The trainer extension that writes checkpoints and handles preemption.

Runs after every other extension of an iteration (priority 0), so the states it
saves are final for that iteration. ``save_final`` (called by the runner once
``trainer.run()`` returns) writes the last iteration too. Each iteration it (1) if preemption is on,
agrees with the other ranks whether a SIGTERM/SIGUSR1 arrived anywhere (one
tiny allreduce), (2) writes a checkpoint every ``interval`` iterations or when
preempted, (3) when preempted, makes the trainer stop after this iteration so
the run ends normally with status 0. Its own state is the random generators
(see rng.py), saved inside each rank's file.
"""

import sys

from chainer.training import extension

from mnframe.checkpoint.rng import RngState
from mnframe.checkpoint.store import checkpoint_name
from mnframe.checkpoint.trainer_io import RNG_KEY, save_trainer
from mnframe.runtime import guard, preemption
from mnframe.runtime.errors import SaveError


class _StopWhenPreempted:
    """The trainer's stop trigger, plus 'stop when the ranks agreed to preempt'."""

    def __init__(self, inner, ext):
        self.inner = inner
        self.ext = ext

    def __call__(self, trainer):
        return self.ext.preempted or self.inner(trainer)

    def serialize(self, serializer):
        if hasattr(self.inner, "serialize"):
            self.inner.serialize(serializer)

    def __getattr__(self, name):  # get_training_length, period, unit... for ProgressBar & co.
        if name == "inner":  # not set yet (copy/unpickle): no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)


class CheckpointExtension(extension.Extension):
    name = "mnframe_checkpoint"
    trigger = (1, "iteration")
    priority = 0  # below PRIORITY_READER: after every other extension

    def __init__(
        self, store, comm, interval, keep=3, config_hash=None, config=None, preemption_enabled=True, abort_on_error=True
    ):
        self.store = store
        self.comm = comm
        self.interval = int(interval)
        self.keep = keep
        self.config_hash = config_hash
        self.config = config
        self.preemption_enabled = preemption_enabled
        self.abort_on_error = abort_on_error
        self.preempted = False
        self.last_saved = None
        self.resumed_from = None
        self._trainer = None
        self.rng = RngState(self._iterators)

    def _iterators(self):
        updater = getattr(self._trainer, "updater", None)
        return dict(getattr(updater, "_iterators", {}) or {})

    def bind(self, trainer):
        self._trainer = trainer

    def initialize(self, trainer):
        self.bind(trainer)
        if self.preemption_enabled and preemption.install():
            if not isinstance(trainer.stop_trigger, _StopWhenPreempted):
                trainer.stop_trigger = _StopWhenPreempted(trainer.stop_trigger, self)

    def __call__(self, trainer):
        iteration = trainer.updater.iteration
        if self.preemption_enabled and preemption.agree(self.comm):
            self.preempted = True
            self.save(trainer, reason="preemption")
            if self.comm.rank == 0:
                sys.stderr.write(
                    f"mnframe: preempted; checkpoint {self.last_saved} written at iteration {iteration}, stopping\n"
                )
        elif iteration % self.interval == 0:
            self.save(trainer)

    def save(self, trainer, reason="interval"):
        """Write a checkpoint of ``trainer`` now (collective)."""
        self.bind(trainer)
        rank = self.comm.rank
        try:
            self.last_saved = self.store.save(
                trainer.updater.iteration,
                lambda tmp: save_trainer(tmp, trainer, rank),
                config_hash=self.config_hash,
                config=self.config,
                reason=reason,
                keep=self.keep,
            )
        except SaveError as exc:  # every rank has it: one line and exit 1, before Chainer prints a traceback
            if self.abort_on_error and guard.installed():
                guard.handle_uncaught(type(exc), exc, exc.__traceback__)
            raise
        return self.last_saved

    def save_final(self, trainer):
        """After ``trainer.run()`` returned: a checkpoint of the last iteration, unless
        one was just written or loaded (collective). Returns its name or None."""
        iteration = trainer.updater.iteration
        if iteration == 0 or checkpoint_name(iteration) in (self.last_saved, self.resumed_from):
            return None
        return self.save(trainer, reason="final")

    def serialize(self, serializer):
        self.rng.serialize(serializer[RNG_KEY])

    def on_error(self, trainer, exc, tb):
        # Fail fast: abort now rather than after the trainer's finalizers, which
        # may block in a collective the failed rank will never join.
        if self.abort_on_error and guard.installed():
            guard.handle_uncaught(type(exc), exc, tb, kind="exception in the training loop")
