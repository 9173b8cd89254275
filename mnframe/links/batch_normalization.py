"""Batch normalization over the global batch of all ranks.

``MultiNodeBatchNormalization`` normalizes with the mean and variance of the
concatenation of every rank's local batch, so a data-parallel run behaves like
one process with the whole batch (useful when per-rank batches are small).

Statistics are combined with Chan's parallel formula: every rank sends
``(count, local mean, local sum of squared deviations)`` and each rank merges
them in rank order, which is exact up to rounding and does not suffer the
cancellation of ``E[x^2] - E[x]^2``. Per-rank batch sizes may differ (even be
zero). The backward pass needs two more per-channel sums (of ``gy`` and
``gy * x_hat``) over the global batch. Parameter gradients stay *local* (the
rank's share), as for any parameter: the multi-node optimizer averages them.

The channel exchange is a strategy object (``mnframe.functions.batch_normalization``)
chosen through ``_BACKENDS``:
``'mpi'`` moves the few per-channel numbers through host MPI; ``'nccl'`` keeps
them on the GPU (CuPy + NCCL, imported only then); ``'auto'`` picks NCCL when
the input is a CuPy array, NCCL is usable on every rank and no two ranks share
a GPU (NCCL refuses that), else MPI; rank 0 logs the choice once per process.
An NCCL group the link creates is destroyed by ``finalize()`` (or by the
communicator's ``finalize()``), not left to garbage collection.
"""

import copy
import logging

import chainer
import numpy
from chainer import backend, configuration, function_node
from chainer.links import BatchNormalization
from chainer.utils import argument

from mnframe.communicators import host_collectives
from mnframe.functions.batch_normalization import _MpiExchange, _NcclExchange
from mnframe.runtime.mpi_comm import mpi_comm_of

__all__ = ["MultiNodeBatchNormalization"]

log = logging.getLogger("mnframe.links")
_LOGGED = set()  # (backend, reason) already logged by this process


# ------------------------------------------------- choosing the exchange (functions/batch_normalization.py)


def _choose_mpi(comm, _x):
    return _MpiExchange(comm)


def _choose_nccl(comm, _x):
    reason = _NcclExchange.unavailable_reason()
    host_collectives.share_verdict(  # the same error on every rank, none left in a collective
        comm,
        None
        if reason is None
        else f"communication_backend='nccl' cannot be used: {reason}; install CuPy with NCCL or use 'mpi' or 'auto'",
        "mnbn.choose_backend",
    )
    return _NcclExchange(comm)


def _gpu_of(x):
    """(host, PCI bus id) of the GPU holding ``x``."""
    import cupy

    from mnframe.communicators.nccl_ops import _gpu_identity

    with cupy.cuda.Device(x.device.id):
        return _gpu_identity(cupy)


def _choose_auto(comm, x):
    """NCCL only if every rank has a CuPy input, a usable NCCL and a GPU of its own; else MPI."""
    on_gpu = backend.get_device_from_array(x).name.startswith("@cupy")
    reason = None if on_gpu else "the input is not a CuPy array"
    if reason is None:
        reason = _NcclExchange.unavailable_reason()
    gpu = _gpu_of(x) if reason is None else None
    use_nccl, why = _auto_choice(host_collectives.allgather_obj(comm, (reason, gpu), name="mnbn.choose_backend"))
    chosen = _NcclExchange(comm) if use_nccl else _MpiExchange(comm)
    _log_choice(comm, chosen.name, why or "CuPy inputs, NCCL on every rank, one GPU per rank")
    return chosen


def _auto_choice(seen):
    """(use NCCL?, why not) from every rank's (reason NCCL is unusable or None, GPU identity)."""
    for rank, (why, _) in enumerate(seen):
        if why:
            return False, f"rank {rank}: {why}"
    gpus = [gpu for _, gpu in seen]
    if len(set(gpus)) < len(gpus):
        return False, "ranks share a GPU, and NCCL needs one GPU per rank"
    return True, None


def _log_choice(comm, backend_name, reason):
    if mpi_comm_of(comm).rank != 0 or (backend_name, reason) in _LOGGED:
        return
    _LOGGED.add((backend_name, reason))
    log.info("MultiNodeBatchNormalization(communication_backend='auto'): %s (%s)", backend_name, reason)


# communication_backend -> function(comm, first input) giving the exchange; the
# choice is made at the first training forward, identically on every rank.
_BACKENDS = {"auto": _choose_auto, "mpi": _choose_mpi, "nccl": _choose_nccl}


# --------------------------------------------------------------------------- functions


def _reduce_axes(x_ndim, gamma_ndim, axis):
    if axis is None:
        return (0,) + tuple(range(1 + gamma_ndim, x_ndim))
    return tuple(axis)


def _expander(ndim, axes):
    """Index that turns a per-channel array into one broadcastable against x."""
    return tuple(None if i in axes else slice(None) for i in range(ndim))


def _compute_dtype(dtype):
    return numpy.float64 if dtype == numpy.float64 else numpy.float32


class _MultiNodeBNFunction(function_node.FunctionNode):
    """y = gamma * (x - mean) / sqrt(var + eps) + beta with global batch statistics."""

    def __init__(self, exchange, eps, axis, running_mean=None, running_var=None, decay=0.9):
        self.exchange = exchange
        self.eps = eps
        self.axis = axis
        self.running_mean = running_mean
        self.running_var = running_var
        self.decay = decay

    def forward(self, inputs):
        self.retain_inputs((0, 1))
        x, gamma, beta = inputs
        xp = backend.get_array_module(x)
        axes = _reduce_axes(x.ndim, gamma.ndim, self.axis)
        ex = _expander(x.ndim, axes)
        cdtype = _compute_dtype(x.dtype)
        xc = x.astype(cdtype, copy=False)
        n_local = int(numpy.prod([x.shape[a] for a in axes], dtype=numpy.int64))
        c = gamma.size

        # Local moments: mean and sum of squared deviations from the local mean.
        if n_local > 0:
            local_mean = xc.mean(axis=axes)
            local_m2 = xp.square(xc - local_mean[ex]).sum(axis=axes)
        else:
            local_mean = xp.zeros(gamma.shape, dtype=cdtype)
            local_m2 = xp.zeros(gamma.shape, dtype=cdtype)
        packed = xp.concatenate(
            [
                xp.full((1,), n_local, dtype=numpy.float64),
                local_mean.astype(numpy.float64).ravel(),
                local_m2.astype(numpy.float64).ravel(),
            ]
        )
        table = self.exchange.allgather(xp, packed)  # (size, 1 + 2c), same on every rank
        counts = table[:, 0]
        means = table[:, 1 : 1 + c]
        m2s = table[:, 1 + c :]
        total = float(counts.sum())
        if total == 0:
            raise ValueError(
                "MultiNodeBatchNormalization got an empty batch on every rank; feed at least one example somewhere"
            )
        # Chan et al.: merge the per-rank moments in rank order (deterministic on all ranks).
        mean = (counts[:, None] * means).sum(axis=0) / total
        m2 = m2s.sum(axis=0) + (counts[:, None] * xp.square(means - mean)).sum(axis=0)
        var = m2 / total

        self.total = total
        self.mean = mean.astype(cdtype).reshape(gamma.shape)
        self.inv_std = (1.0 / xp.sqrt(var + self.eps)).astype(cdtype).reshape(gamma.shape)
        x_hat = (xc - self.mean[ex]) * self.inv_std[ex]
        y = gamma.astype(cdtype)[ex] * x_hat + beta.astype(cdtype)[ex]

        if self.running_mean is not None:
            # Same update as chainer's BatchNormalization, with the *global* count
            # for the unbiased variance.
            adjust = total / max(total - 1.0, 1.0)
            rm, rv = self.running_mean, self.running_var
            rm *= self.decay
            rm += ((1 - self.decay) * mean.reshape(rm.shape)).astype(rm.dtype)
            rv *= self.decay
            rv += ((1 - self.decay) * adjust * var.reshape(rv.shape)).astype(rv.dtype)
        return (y.astype(x.dtype, copy=False),)

    def backward(self, _indexes, grad_outputs):
        x, gamma = self.get_retained_inputs()
        (gy,) = grad_outputs
        return _MultiNodeBNGrad(self).apply((x, gamma, gy))


class _MultiNodeBNGrad(function_node.FunctionNode):
    """Gradients of _MultiNodeBNFunction; x's gradient needs two global channel sums."""

    def __init__(self, fwd):
        self.fwd = fwd

    def forward(self, inputs):
        x, gamma, gy = inputs
        fwd = self.fwd
        xp = backend.get_array_module(x)
        axes = _reduce_axes(x.ndim, gamma.ndim, fwd.axis)
        ex = _expander(x.ndim, axes)
        cdtype = _compute_dtype(x.dtype)
        x_hat = (x.astype(cdtype, copy=False) - fwd.mean[ex]) * fwd.inv_std[ex]
        gyc = gy.astype(cdtype, copy=False)
        gbeta = gyc.sum(axis=axes)
        ggamma = (gyc * x_hat).sum(axis=axes)

        packed = xp.concatenate([gbeta.astype(numpy.float64).ravel(), ggamma.astype(numpy.float64).ravel()])
        summed = fwd.exchange.allreduce_sum(xp, packed)
        c = gamma.size
        gbeta_all = summed[:c].astype(cdtype).reshape(gamma.shape)
        ggamma_all = summed[c:].astype(cdtype).reshape(gamma.shape)
        coeff = gamma.astype(cdtype) * fwd.inv_std
        gx = coeff[ex] * (gyc - (gbeta_all[ex] + x_hat * ggamma_all[ex]) / fwd.total)
        # Parameter gradients are this rank's share; the optimizer averages them.
        return gx.astype(x.dtype, copy=False), ggamma.astype(gamma.dtype), gbeta.astype(gamma.dtype)

    def backward(self, indexes, grad_outputs):  # noqa: ARG002 - a stand-in that only raises
        raise NotImplementedError("double backpropagation through MultiNodeBatchNormalization is not supported")


# --------------------------------------------------------------------------- link


class MultiNodeBatchNormalization(BatchNormalization):
    """Batch normalization whose batch statistics cover every rank's batch.

    A drop-in for ``chainer.links.BatchNormalization`` (same parameters,
    persistents and serialization; ``isinstance`` holds): in training mode it
    normalizes with the mean/variance of the global batch and updates
    ``avg_mean``/``avg_var`` with them (unbiased with the global count); in test
    mode it uses the running statistics and does not communicate. Every rank
    must call it the same number of times in training mode (it is a collective).

    Args:
        size: channel size (or shape) of the statistics.
        comm: a mnframe communicator (or an mpi4py communicator).
        decay, eps, dtype, use_gamma, use_beta, initial_gamma, initial_beta:
            as in ``chainer.links.BatchNormalization`` (``dtype=None``: the
            parameters take ``chainer.config.dtype``, float32 for ``mixed16``, as
            ChainerMN's link does).
        communication_backend: ``'auto'``, ``'mpi'`` or ``'nccl'`` (``'nccl'``
            raises ValueError at construction where CuPy with NCCL is unusable).
        axis: (keyword, extension) batch axes as in chainer's link.
    """

    def __init__(
        self,
        size,
        comm,
        decay=0.9,
        eps=2e-05,
        dtype=None,
        use_gamma=True,
        use_beta=True,
        initial_gamma=None,
        initial_beta=None,
        communication_backend="auto",
        *,
        axis=None,
    ):
        if communication_backend not in _BACKENDS:
            raise ValueError(f"communication_backend must be one of {tuple(_BACKENDS)}, got {communication_backend!r}")
        if communication_backend == "nccl":  # ChainerMN refuses it here too (on a communicator without NCCL)
            reason = _NcclExchange.unavailable_reason()
            if reason is not None:
                raise ValueError(f"communication_backend='nccl' cannot be used here: {reason}; use 'mpi' or 'auto'")
        super().__init__(
            size,
            decay=decay,
            eps=eps,
            dtype=dtype,
            use_gamma=use_gamma,
            use_beta=use_beta,
            initial_gamma=initial_gamma,
            initial_beta=initial_beta,
            axis=axis,
        )
        self.comm = comm
        self.communication_backend = communication_backend
        self._exchange = None

    def finalize(self):
        """Release the exchange's resources (its NCCL group); the next training forward picks again."""
        close = getattr(self._exchange, "close", None)
        if close is not None:
            close()
        self._exchange = None

    def __deepcopy__(self, memo):
        # The communicator is shared, never copied (it wraps an MPI handle).
        memo[id(self.comm)] = self.comm
        if self._exchange is not None:
            memo[id(self._exchange)] = self._exchange
        cls = type(self)
        new = cls.__new__(cls)
        memo[id(self)] = new
        for k, v in self.__dict__.items():
            new.__dict__[k] = copy.deepcopy(v, memo)
        return new

    def forward(self, x, **kwargs):
        """forward(self, x, finetune=False): as chainer's BatchNormalization."""
        (finetune,) = argument.parse_kwargs(
            kwargs, ("finetune", False), test="test argument is not supported anymore. Use chainer.using_config"
        )
        if not configuration.config.train:
            return super().forward(x)  # running statistics only: no communication

        x_arr = x.array if isinstance(x, chainer.Variable) else x
        if self.avg_mean is None:
            self._initialize_params(tuple(d for i, d in enumerate(x_arr.shape) if i not in self.axis))
        if self._exchange is None:
            self._exchange = _BACKENDS[self.communication_backend](self.comm, x_arr)

        gamma = self.gamma if self.gamma is not None else self._get_gamma()[0]
        beta = self.beta if self.beta is not None else self._get_beta()[0]
        if finetune:
            self.N += 1
            decay = 1.0 - 1.0 / self.N
        else:
            decay = self.decay
        avg_mean, avg_var = self.avg_mean, self.avg_var
        if chainer.config.in_recomputing:
            if finetune:
                self.N -= 1
            avg_mean = avg_var = None
        func = _MultiNodeBNFunction(
            self._exchange, self.eps, self.axis, running_mean=avg_mean, running_var=avg_var, decay=decay
        )
        (y,) = func.apply((x, gamma, beta))
        return y
