"""create_multi_node_optimizer: data-parallel training with any Chainer optimizer.

The wrapper holds the real optimizer (composition, nothing is patched) and
forwards every attribute read and write to it, so hooks (WeightDecay,
GradientClipping, ...), ``lr``/``alpha``, ``t``, ``serialize`` and the rest
behave exactly as on the wrapped optimizer. It adds two things:

* synchronisation: rank 0's parameters are broadcast (``comm.bcast_data``)
  before they are first used -- at ``setup`` and whenever the set of
  initialised parameters changes (a lazy ``Linear(None, n)`` materialising);
* averaging: every ``update`` averages the gradients over all ranks
  (``comm.multi_node_mean_grad``) before the real optimizer's update, so the
  hooks see the averaged gradient, as in one process over the global batch.

A step whose gradients were computed from parameters that were not yet
synchronised (new lazy parameters appeared in this forward) only broadcasts and
skips the update, as ChainerMN does: those gradients belong to other weights.
With ``double_buffering=True`` see :mod:`mnframe.optimizers.double_buffering`
(non-blocking MPI, any device) and :mod:`mnframe.optimizers.double_buffering_nccl`
(NCCL on a side CUDA stream, for communicators that declare
``double_buffering = "nccl"``).
"""
from mnframe._import_path import resolve
from mnframe.optimizers.double_buffering import StaleGradientAverager

# a communicator's ``double_buffering`` attribute -> the averager that overlaps its exchange
AVERAGERS = {
    "mpi": StaleGradientAverager,
    "nccl": "mnframe.optimizers.double_buffering_nccl:StreamStaleAverager",
}


def _averager(communicator):
    return resolve(AVERAGERS[getattr(communicator, "double_buffering", "mpi")])(communicator)


_OWN = ("actual_optimizer", "communicator", "zero_fill", "_synced_layout", "_averager")


def _layout(target):
    """Which parameters exist and are initialised: changes mean "broadcast again"."""
    return tuple((name, p.array is not None) for name, p in sorted(target.namedparams()))


class _MultiNodeOptimizer:
    """A Chainer optimizer that trains data-parallel over ``communicator``."""

    def __init__(self, actual_optimizer, communicator, zero_fill, averager=None):
        d = self.__dict__  # own state bypasses the forwarding __setattr__
        d["actual_optimizer"] = actual_optimizer
        d["communicator"] = communicator
        d["zero_fill"] = zero_fill
        d["_synced_layout"] = None
        d["_averager"] = averager

    # ---- forwarding: the wrapper is the wrapped optimizer plus synchronisation
    def __getattr__(self, name):
        if name in _OWN:  # not set yet (e.g. during unpickling): do not recurse
            raise AttributeError(name)
        return getattr(self.actual_optimizer, name)

    def __setattr__(self, name, value):
        if name in _OWN:
            self.__dict__[name] = value
        elif isinstance(getattr(type(self), name, None), property):
            object.__setattr__(self, name, value)
        else:
            setattr(self.actual_optimizer, name, value)

    @property
    def needs_broadcast(self):
        """True while the parameters have not been synchronised in their current layout.

        The multi-node checkpointer sets it to False after every rank resumed
        from its own snapshot of the same iteration: the ranks already agree.
        """
        target = self.actual_optimizer.target
        return target is None or _layout(target) != self._synced_layout

    @needs_broadcast.setter
    def needs_broadcast(self, value):
        target = self.actual_optimizer.target
        self._synced_layout = None if value or target is None else _layout(target)

    def __repr__(self):
        return f"MultiNodeOptimizer({self.actual_optimizer!r})"

    def setup(self, link):
        """Set up the real optimizer on ``link``, broadcast rank 0's parameters; returns the wrapper."""
        self.actual_optimizer.setup(link)
        self._sync_if_changed(link)
        return self

    # ---- the update
    def update(self, lossfun=None, *args, **kwds):
        """Like ``chainer.Optimizer.update``, with broadcast and gradient averaging."""
        target = self.actual_optimizer.target
        settled = False  # every parameter initialised before the forward: it cannot change the set
        if lossfun is not None:
            # parameters must agree before the forward pass that produces the gradients
            self._sync_if_changed(target)
            settled = all(initialised for _, initialised in self._synced_layout)
            loss = lossfun(*args, **kwds)
            if getattr(self.actual_optimizer, "_use_cleargrads", True):
                target.cleargrads()
            else:
                target.zerograds()
            loss.backward(loss_scale=self.actual_optimizer._loss_scale)
            del loss
        if not settled and self._sync_if_changed(target):
            return  # these gradients were computed from unsynchronised weights (e.g. lazily initialised)
        if self._averager is None:
            self.communicator.multi_node_mean_grad(target, self.zero_fill)
            self.actual_optimizer.update(None, *args, **kwds)
        elif self._averager.exchange(target):
            self.actual_optimizer.update(None, *args, **kwds)

    def _sync_if_changed(self, target):
        """Broadcast rank 0's parameters if the initialised set changed; True if it did."""
        layout = _layout(target)
        if layout == self._synced_layout:
            return False
        if self._averager is not None:
            self._averager.reset()  # a pending average refers to the old parameters
        self.communicator.bcast_data(target)
        self._synced_layout = layout
        return True

    def wait(self):
        """Finish any gradient averaging still in flight (double buffering)."""
        if self._averager is not None:
            self._averager.reset()

    def finalize(self):
        """Finish the averaging in flight and release the averager's resources (its NCCL group)."""
        if self._averager is not None:
            close = getattr(self._averager, "close", self._averager.reset)
            close()


def create_multi_node_optimizer(actual_optimizer, communicator, double_buffering=False, zero_fill=True):
    """Wrap a Chainer optimizer for data-parallel training over ``communicator``.

    Args:
        actual_optimizer: a ``chainer.Optimizer`` (set up already, or set up
            through the returned wrapper's ``setup``).
        communicator: a mnframe communicator.
        double_buffering: overlap the averaging of step t with step t+1; the
            update at step t then uses the average of step t-1's gradients (one
            step stale; the first step after a broadcast makes no update).
            pure_nccl overlaps on a separate CUDA stream; every other
            communicator through non-blocking MPI (CPU and GPU).
        zero_fill: unused initialised parameters contribute zero gradients
            (otherwise they are skipped by the communicator).
    """
    if not (hasattr(actual_optimizer, "update") and hasattr(actual_optimizer, "setup")):
        raise TypeError(f"create_multi_node_optimizer: actual_optimizer must be a chainer.Optimizer "
                        f"(e.g. chainer.optimizers.Adam()), got {type(actual_optimizer).__name__}")
    missing = [m for m in ("bcast_data", "multi_node_mean_grad", "mpi_comm") if not hasattr(communicator, m)]
    if missing:
        raise TypeError(f"create_multi_node_optimizer: communicator lacks {missing}; pass the result of "
                        f"mnframe.create_communicator(...)")
    averager = _averager(communicator) if double_buffering else None
    return _MultiNodeOptimizer(actual_optimizer, communicator, zero_fill, averager)
