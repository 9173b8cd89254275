"""The trainer extension that writes checkpoints and decides when training stops early.

Runs after every other extension of an iteration (priority 0), so the states it
saves are final for that iteration. Each iteration it (1) agrees with the other
ranks (one tiny allreduce, when preemption or the non-finite check is on)
whether a SIGTERM/SIGUSR1/Ctrl-C arrived anywhere and whether any rank saw a
non-finite or runaway loss (``divergence``), (2) on such a loss stops the trainer
without writing a checkpoint (the newest one stays the last finite one), (3)
writes a checkpoint every ``interval`` iterations, when preempted, and on the
trainer's last iteration: inside the loop, before Chainer finalizes the
extensions and iterators (a finalized MultiprocessIterator cannot be saved).
``save_final`` (called by the runner once ``trainer.run()`` returns) is then a
no-op unless the stop came another way. Its own state is the random generators
(see rng.py), saved inside each rank's file.
"""

import sys

from chainer.training import extension

from mnframe.checkpoint import divergence
from mnframe.checkpoint.async_save import AsyncSaver
from mnframe.checkpoint.rng import RngState
from mnframe.checkpoint.store import checkpoint_name
from mnframe.checkpoint.trainer_io import RNG_KEY, save_trainer
from mnframe.runtime import guard, preemption
from mnframe.runtime.errors import SaveError


class _StopTrigger:
    """The trainer's stop trigger, evaluated once per iteration (so the checkpoint extension
    can ask "is this the last iteration?" before the trainer does, and both get the same
    answer from a stateful trigger), plus "stop now" once the ranks agreed to stop early."""

    def __init__(self, inner, ext):
        self.inner = inner
        self.ext = ext
        self._memo = (None, False)

    def last_iteration(self, trainer):
        iteration = trainer.updater.iteration
        if self._memo[0] != iteration:
            self._memo = (iteration, bool(self.inner(trainer)))
        return self._memo[1]

    def __call__(self, trainer):
        return self.last_iteration(trainer) or self.ext.stopping

    def serialize(self, serializer):
        if hasattr(self.inner, "serialize"):
            self.inner.serialize(serializer)

    def __getattr__(self, name):  # get_training_length, period, unit... for ProgressBar & co.
        if name in ("inner", "ext", "_memo"):  # not set yet (copy/unpickle): no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)


class CheckpointExtension(extension.Extension):
    name = "mnframe_checkpoint"
    trigger = (1, "iteration")
    priority = 0  # below PRIORITY_READER: after every other extension

    def __init__(
        self,
        store,
        comm,
        interval,
        keep=3,
        config_hash=None,
        config=None,
        preemption_enabled=True,
        abort_on_error=True,
        on_nonfinite="stop",
        async_save=False,
        divergence_factor=1.0e4,
        divergence_warmup=10,
    ):
        self.store = store
        self.comm = comm
        self.interval = int(interval)
        self.keep = keep
        self.config_hash = config_hash
        self.config = config
        self.preemption_enabled = preemption_enabled
        self.abort_on_error = abort_on_error
        self.on_nonfinite = on_nonfinite
        self.watch = divergence.Watch(divergence_factor, divergence_warmup)  # the finite (runaway) rule
        self.preempted = False
        self.interrupted = False  # the stop was a Ctrl-C (the runner exits 130)
        self.diverged = None  # the one line saying where the loss became non-finite
        self.stopping = False
        self._stop = None
        self.last_saved = None
        self.resumed_from = None
        self._trainer = None
        self.rng = RngState(self._iterators)
        self.background = AsyncSaver(store) if async_save else None  # interval saves only (async_save.py)

    def _iterators(self):
        updater = getattr(self._trainer, "updater", None)
        return dict(getattr(updater, "_iterators", {}) or {})

    def bind(self, trainer):
        self._trainer = trainer

    def initialize(self, trainer):
        self.bind(trainer)
        if self.preemption_enabled:
            preemption.install(interrupt=True)
        if not isinstance(trainer.stop_trigger, _StopTrigger):
            trainer.stop_trigger = _StopTrigger(trainer.stop_trigger, self)
        self._stop = trainer.stop_trigger

    def __call__(self, trainer):
        iteration = trainer.updater.iteration
        self._poll_background()
        stop, code, rank, key = self._agree(trainer)
        if code:
            self._diverge(iteration, code, rank, key)
            return
        if stop:
            self.preempted = self.stopping = True
            self.interrupted = preemption.interrupted()
            if self._save_finite(trainer, "interrupt" if self.interrupted else "preemption") and self.comm.rank == 0:
                if not self.interrupted:  # the runner's last line speaks for an interruption
                    sys.stderr.write(
                        f"mnframe: preempted; checkpoint {self.last_saved} written at iteration {iteration}, stopping\n"
                    )
        elif iteration % self.interval == 0:
            background = self.background is not None and not (  # the last one is synchronous
                self._stop is not None and self._stop.last_iteration(trainer)
            )
            self._save_finite(trainer, "interval", background=background)
        if not self.stopping and self._stop is not None and self._stop.last_iteration(trainer):
            if self.last_saved != checkpoint_name(iteration):  # the last one, before anything is finalized
                self._save_finite(trainer, "final")

    def _agree(self, trainer):
        """(stop requested anywhere, non-finite code, lowest rank that saw it, its key here)."""
        checking = self.on_nonfinite == "stop"
        if not (checking or self.preemption_enabled):
            return False, 0, None, None
        code, key = self.watch.code(trainer.observation) if checking else (0, None)
        size, rank = self.comm.size, self.comm.rank
        stop, (code_max, first) = preemption.agree(self.comm, extra=(code, size - rank if code else 0))
        return stop, code_max, (size - first if first else None), key

    def _diverge(self, iteration, code, rank, key):
        self._poll_background(wait=True)  # the save in flight holds finite weights: commit it
        self.stopping = True
        detail = self.watch.detail if key else None  # this rank saw it: the value, its lowest
        self.diverged = divergence.message(iteration, code, rank, key, self.last_saved or self.resumed_from, detail)

    def _save_finite(self, trainer, reason, background=False):
        """Save unless the weights are non-finite somewhere (then stop as diverged). Collective."""
        if self.on_nonfinite == "stop" and not divergence.weights_finite(trainer, self.comm):
            self._diverge(trainer.updater.iteration, 4, None, None)
            return False
        self.save(trainer, reason=reason, background=background)
        return True

    def _poll_background(self, wait=False):
        """Commit the asynchronous save in flight once every rank wrote it (or wait for it);
        its failure on any rank stops every rank here, as a failed save does (collective)."""
        if self.background is not None and self.background.in_flight:
            name = self._saving(lambda: self.background.poll(wait=wait))
            self.last_saved = name or self.last_saved

    def _saving(self, save):
        try:
            return save()
        except SaveError as exc:  # every rank has it: one line and exit 1, before Chainer prints a traceback
            if self.abort_on_error and guard.installed():
                guard.handle_uncaught(type(exc), exc, exc.__traceback__)
            raise

    def save(self, trainer, reason="interval", background=False):
        """Write a checkpoint of ``trainer`` now (collective); with ``background`` only copy the
        state now and write it in the background (``async_save``; ``last_saved`` names it once committed)."""
        self.bind(trainer)
        rank = self.comm.rank
        iteration = trainer.updater.iteration
        extra = dict(config_hash=self.config_hash, config=self.config, keep=self.keep)
        if background:
            self._poll_background(wait=True)  # at most one save in flight, and in order
            self._saving(lambda: self.background.start(trainer, iteration, reason, **extra))
            return None
        self._poll_background(wait=True)  # at most one save in flight, and in order
        self.last_saved = self._saving(
            lambda: self.store.save(
                iteration,
                lambda tmp: save_trainer(tmp, trainer, rank, self.store.identity(iteration)),
                reason=reason,
                **extra,
            )
        )
        return self.last_saved

    def save_final(self, trainer):
        """After ``trainer.run()`` returned: a checkpoint of the last iteration, unless
        one was just written or loaded (collective). Returns its name or None."""
        self._poll_background(wait=True)
        iteration = trainer.updater.iteration
        if self.diverged or iteration == 0 or checkpoint_name(iteration) in (self.last_saved, self.resumed_from):
            return None
        return self.last_saved if self._save_finite(trainer, "final") else None

    def serialize(self, serializer):
        self.rng.serialize(serializer[RNG_KEY])

    def on_error(self, trainer, exc, tb):  # noqa: ARG002 (Chainer's Extension.on_error signature)
        # Fail fast: abort now rather than after the trainer's finalizers, which
        # may block in a collective the failed rank will never join.
        if self.abort_on_error and guard.installed():
            guard.handle_uncaught(type(exc), exc, tb, kind="exception in the training loop")
