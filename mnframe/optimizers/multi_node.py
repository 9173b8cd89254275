"""create_multi_node_optimizer: data-parallel training with any Chainer optimizer.

The wrapper holds the real optimizer (composition, nothing is patched) and
forwards every attribute read and write to it, so hooks (WeightDecay,
GradientClipping, ...), ``lr``/``alpha``, ``t`` and the rest behave exactly as
on the wrapped optimizer. It adds:

* synchronisation: rank 0's parameters are broadcast (``comm.bcast_data``) at
  ``setup`` and before a forward pass whenever the set of initialised
  parameters changed since the last broadcast (a lazy ``Linear(None, n)``
  materialising), so the ranks agree before they compute;
* ChainerMN's first update: the first ``update()`` -- and the first after new
  parameters appeared -- broadcasts rank 0's parameters and makes no step
  (``optimizer.t`` stays 0): its gradients may belong to weights the ranks did
  not share. ChainerMN does the same; counts of updates, ``t`` and the training
  trajectory therefore match it;
* averaging: every other ``update`` averages the gradients over all ranks
  (``comm.multi_node_mean_grad``) before the real optimizer's update, so the
  hooks see the averaged gradient, as in one process over the global batch.

``serialize`` writes the real optimizer's state plus one key,
``multi_node_broadcast_done``: whether the broadcast-only update was made in
the current parameter layout. A run resumed from a checkpoint therefore does
not repeat it and continues bitwise like an uninterrupted run. The ranks agree
on it in their first update (one tiny allreduce): unless every rank loaded such
a file, all of them broadcast (e.g. a file loaded on rank 0 only). (ChainerMN
keeps this flag in memory only: after a resume its first ``update()`` again
only broadcasts, one update fewer than the uninterrupted run. A file without
the key -- written by ChainerMN or a plain Chainer optimizer -- gives
ChainerMN's behaviour.)

With ``double_buffering=True`` see :mod:`mnframe.optimizers.double_buffering`
(non-blocking MPI, any device) and :mod:`mnframe.optimizers.double_buffering_nccl`
(NCCL on a side CUDA stream, for communicators that declare
``double_buffering = "nccl"``).
"""

import chainer
import numpy as np

from mnframe._internal.import_path import resolve
from mnframe.communicators import host_collectives
from mnframe.communicators.powersgd import STATE_KEY as POWERSGD_KEY  # per rank (checkpoint/trainer_io.py)
from mnframe.optimizers.double_buffering import StaleGradientAverager

# a communicator's ``double_buffering`` attribute -> the averager that overlaps its exchange
AVERAGERS = {
    "mpi": StaleGradientAverager,
    "nccl": "mnframe.optimizers.double_buffering_nccl:StreamStaleAverager",
}


def _averager(communicator):
    return resolve(AVERAGERS[getattr(communicator, "double_buffering", "mpi")])(communicator)


_OWN = (
    "actual_optimizer",
    "communicator",
    "zero_fill",
    "_synced_layout",
    "_update_layout",
    "_averager",
    "_overlap",
    "_tuner",
)

# the serialized flag: the broadcast-only update was made in the parameter layout of the file
BROADCAST_DONE_KEY = "multi_node_broadcast_done"
_LOADED = "loaded"  # _update_layout after loading a file whose broadcast was done: the layout at the next update
# double buffering's gradient sums in flight, per wire dtype (float16 travels as float32)
PENDING_SUM_KEY = "double_buffering_sum_{}"
_WIRE_DTYPES = ("float32", "float64")


def _compression(communicator):
    get = getattr(communicator, "get_config", None)
    try:
        return None if get is None else get("compression")
    except KeyError:  # a communicator without compression
        return None


def _refuse_model_parallel(communicator, link):
    """PowerSGD is not made for model-parallel links (their ranks hold different parameters)."""
    if _compression(communicator) is None:
        return
    parts = [type(sub).__name__ for sub in link.links() if getattr(sub, "mnframe_model_parallel", False)]
    if parts:
        raise ValueError(
            f"create_multi_node_optimizer: compression={_compression(communicator)!r} is not supported with "
            f"model-parallel links ({parts[0]}); use a communicator without compression for this model"
        )


def _layout(target):
    """Which parameters exist and are initialised: changes mean "broadcast again"."""
    return tuple((name, p.array is not None) for name, p in sorted(target.namedparams()))


def _init_rule_states(target):
    """Create the update rules' states (zeros) that the first step would create, without stepping.

    So a checkpoint written at setup or after the broadcast-only update holds
    the whole optimizer state and loads (Chainer cannot load a file written
    before an optimizer's first step). Chainer's own initialisation: the same
    arrays as at the first step. float16 parameters are left to the first step
    (``use_fp32_update()``, usually called after setup, gives them float32 states).
    """
    for param in target.params():
        rule = param.update_rule
        if rule is None or not rule.enabled or rule.state is not None or param.array is None:
            continue
        if param.dtype == np.float16:
            continue
        rule._init_states(param)


class _MultiNodeOptimizer:
    """A Chainer optimizer that trains data-parallel over ``communicator``."""

    def __init__(self, actual_optimizer, communicator, zero_fill, averager=None, overlap=None):
        d = self.__dict__  # own state bypasses the forwarding __setattr__
        d["actual_optimizer"] = actual_optimizer
        d["communicator"] = communicator
        d["zero_fill"] = zero_fill
        d["_synced_layout"] = None  # layout of the last broadcast (setup, before a forward, update)
        d["_update_layout"] = None  # layout in which update() made its broadcast-only call
        d["_averager"] = averager  # double buffering
        d["_overlap"] = overlap  # averaging overlapped with backward (mnframe.optimizers.overlap)
        d["_tuner"] = None  # the runner's trial of exact settings (mnframe.optimizers.autotune)

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
        _refuse_model_parallel(self.communicator, link)
        self.actual_optimizer.setup(link)
        self._sync_if_changed(link)
        _init_rule_states(link)  # a checkpoint written before the first step loads, too
        return self

    # ---- the update
    def update(self, lossfun=None, *args, **kwds):
        """Like ``chainer.Optimizer.update``, with ChainerMN's broadcast-only first call and gradient averaging.

        The first call (and the first after the set of initialised parameters
        changed) broadcasts rank 0's parameters and returns without a step:
        ``t`` is not incremented. Every later call averages the gradients over
        the ranks and updates (with double buffering: see
        ``create_multi_node_optimizer``).
        """
        if self._tuner is not None:  # the runner's autotune picks this update's communicator and overlap
            return self._tuner.update(lossfun, args, kwds)
        return self._update(lossfun, *args, **kwds)

    def _update(self, lossfun=None, *args, **kwds):
        target = self.actual_optimizer.target
        if self._update_layout is None or self._update_layout is _LOADED:
            self._agree_on_resume(target)
        settled = False  # the layout cannot change in this call: no need to read it again
        if lossfun is not None:
            # parameters must agree before the forward pass that produces the gradients
            self._sync_if_changed(target)
            settled = self._synced_layout == self._update_layout and all(i for _, i in self._synced_layout)
            loss = lossfun(*args, **kwds)
            if getattr(self.actual_optimizer, "_use_cleargrads", True):
                target.cleargrads()
            else:
                target.zerograds()
            if self._overlap is None:
                loss.backward(loss_scale=self.actual_optimizer._loss_scale)
            elif self._overlap.backward(
                loss, self.actual_optimizer._loss_scale, target, self._update_layout if settled else None
            ):  # averaged during backward
                del loss
                self.actual_optimizer.update(None, *args, **kwds)
                return
            del loss
        if not settled:
            layout = _layout(target)
            if layout != self._update_layout:
                # the first update in this layout: share rank 0's weights, make no step (ChainerMN)
                self._broadcast(target, layout)
                self._update_layout = layout
                _init_rule_states(target)
                return
        if self._averager is None:
            self.communicator.multi_node_mean_grad(target, self.zero_fill)
            self.actual_optimizer.update(None, *args, **kwds)
        elif self._averager.exchange(target):
            self.actual_optimizer.update(None, *args, **kwds)

    def _agree_on_resume(self, target):
        """On a rank's first update, fresh or after loading: is the broadcast-only update still due?

        Only if every rank loaded a file in which it was made is it skipped (a
        resume): ranks that start fresh, or loaded nothing, or a file without
        it, make every rank broadcast, so they never disagree on the collective.
        """
        done = self._update_layout is _LOADED
        if getattr(self.communicator, "size", 1) > 1:
            done = host_collectives.all_agree(self.communicator, done, name="multi_node_optimizer.resume")
        self._update_layout = _layout(target) if done else None
        if done:  # every rank loaded the state of a run whose ranks agreed: nothing to broadcast
            self._synced_layout = self._update_layout

    def _sync_if_changed(self, target):
        """Broadcast rank 0's parameters if the initialised set changed since the last broadcast."""
        layout = _layout(target)
        if layout != self._synced_layout:
            self._broadcast(target, layout)

    def _broadcast(self, target, layout):
        if self._averager is not None:
            self._averager.reset()  # a pending average refers to the old parameters
        self.communicator.bcast_data(target)
        self._synced_layout = layout

    def serialize(self, serializer):
        """The real optimizer's state, plus whether the broadcast-only update was made (see the module doc)."""
        self.actual_optimizer.serialize(serializer)
        target = self.actual_optimizer.target
        done = self._update_layout is _LOADED or (
            self._update_layout is not None and target is not None and self._update_layout == _layout(target)
        )
        if isinstance(serializer, chainer.serializer.Deserializer):
            try:
                done = bool(serializer(BROADCAST_DONE_KEY, int(done)))
            except KeyError:  # written by ChainerMN or a plain optimizer: ChainerMN's behaviour
                done = False
            # the model is loaded after its optimizer: take its layout at the next update
            self._update_layout = _LOADED if done else None
        else:
            serializer(BROADCAST_DONE_KEY, int(done))
        self._serialize_pending(serializer)
        self._serialize_compression(serializer)

    def _serialize_compression(self, serializer):
        """PowerSGD's Q and error feedback of this rank (``communicators/powersgd.py``)."""
        target = self.actual_optimizer.target
        if _compression(self.communicator) is None or target is None:
            return
        comm = self.communicator
        comm.powersgd.serialize(serializer[POWERSGD_KEY], target, comm.size, say_rank0=comm.rank == 0)

    def _serialize_pending(self, serializer):
        """Double buffering (MPI): the gradient sums in flight, so a resume steps with them."""
        averager = self._averager
        if averager is None or not hasattr(averager, "pending_sums"):
            return  # the NCCL averager keeps them on the GPU only: a resume restarts the overlap
        if isinstance(serializer, chainer.serializer.Deserializer):
            sums = {}
            for name in _WIRE_DTYPES:
                try:
                    value = serializer(PENDING_SUM_KEY.format(name), None)
                except KeyError:
                    value = None
                if value is not None:
                    sums[np.dtype(name)] = np.array(value, dtype=name)
            averager.restore_pending(sums)
        else:
            for dtype, buf in averager.pending_sums().items():
                serializer(PENDING_SUM_KEY.format(dtype.name), buf.copy())

    def wait(self):
        """Finish any gradient averaging still in flight (double buffering)."""
        if self._averager is not None:
            self._averager.reset()

    def finalize(self):
        """Finish the averaging in flight and release the averager's resources (its NCCL group, the
        overlap's thread and communicator). Collective."""
        if self._averager is not None:
            close = getattr(self._averager, "close", self._averager.reset)
            close()
        if self._overlap is not None:
            self._overlap.close()
        if self._tuner is not None:
            self._tuner.close()


def create_multi_node_optimizer(
    actual_optimizer, communicator, double_buffering=False, zero_fill=True, overlap=False, bucket_cap_mb=None
):
    """Wrap a Chainer optimizer for data-parallel training over ``communicator``.

    As in ChainerMN, the first ``update()`` broadcasts rank 0's parameters and
    makes no step (``t`` stays 0); see the module documentation.

    Args:
        actual_optimizer: a ``chainer.Optimizer`` (set up already, or set up
            through the returned wrapper's ``setup``).
        communicator: a mnframe communicator.
        double_buffering: overlap the averaging of update t's gradients with
            update t+1, which then steps with that (one update stale) average.
            As in ChainerMN, the first update only broadcasts and the second
            only starts averaging, so the first step is made by the third
            (``t`` is 1 after three updates). pure_nccl overlaps on a separate
            CUDA stream; every other communicator through non-blocking MPI
            (CPU and GPU). Checkpoints hold the MPI averager's sums in
            flight (a resume continues exactly); with pure_nccl they stay on
            the GPU, so a resume restarts the overlap (one update without
            a step).
        zero_fill: unused initialised parameters contribute zero gradients
            (otherwise they are skipped by the communicator).
        overlap: average the gradients during backward, bucket by bucket as
            their gradients become final (mnframe.optimizers.overlap; not in
            ChainerMN). Each step uses its own average, bitwise the same as
            without overlap. Needs ``update(lossfun, ...)`` (the optimizer runs
            backward); with ``update()`` after the caller's own backward the
            average is taken after backward. Not with ``double_buffering``.
        bucket_cap_mb: the largest bucket with ``overlap`` (MiB of gradients;
            PyTorch DDP's default is 25). Default (None): a quarter of the
            model's gradients, between 1 and 25 MiB, so that a small model
            still overlaps. As in DDP the first bucket holds at most 1 MiB.
    """
    if not (hasattr(actual_optimizer, "update") and hasattr(actual_optimizer, "setup")):
        raise TypeError(
            f"create_multi_node_optimizer: actual_optimizer must be a chainer.Optimizer "
            f"(e.g. chainer.optimizers.Adam()), got {type(actual_optimizer).__name__}"
        )
    missing = [m for m in ("bcast_data", "multi_node_mean_grad", "mpi_comm") if not hasattr(communicator, m)]
    if missing:
        raise TypeError(
            f"create_multi_node_optimizer: communicator lacks {missing}; pass the result of "
            f"mnframe.create_communicator(...)"
        )
    if overlap and double_buffering:
        raise ValueError(
            "create_multi_node_optimizer: overlap=True and double_buffering=True both overlap the averaging; "
            "pick one (overlap keeps every step's own average, double buffering steps one update stale)"
        )
    if double_buffering and _compression(communicator) is not None:
        raise ValueError(
            f"create_multi_node_optimizer: double_buffering=True is not supported with the communicator's "
            f"compression={_compression(communicator)!r}; use overlap=True, or a communicator without compression"
        )
    if bucket_cap_mb is not None and not (isinstance(bucket_cap_mb, (int, float)) and bucket_cap_mb > 0):
        raise ValueError(f"create_multi_node_optimizer: bucket_cap_mb must be a positive number, got {bucket_cap_mb!r}")
    averager = _averager(communicator) if double_buffering else None
    overlapper = None
    if overlap:
        from mnframe.optimizers.overlap import OverlapAverager

        overlapper = OverlapAverager(communicator, zero_fill, bucket_cap_mb)
    return _MultiNodeOptimizer(actual_optimizer, communicator, zero_fill, averager, overlapper)
