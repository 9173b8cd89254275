"""Step 4: the multi-node optimizer, its hooks and learning-rate schedule.

``OPTIMIZERS`` maps ``optimizer.name`` to the Chainer class (``_target_``
overrides it); ``HOOKS`` maps config fields to optimizer hooks;
the ``lr_schedule`` builds its own extension (``mnframe.config.schedules``).
"""

from __future__ import annotations

from typing import Any, Callable, Dict

from mnframe.builder.instantiate import import_target
from mnframe.config.schema import OptimizerConfig

OPTIMIZERS: Dict[str, str] = {
    "sgd": "chainer.optimizers.SGD",
    "momentum_sgd": "chainer.optimizers.MomentumSGD",
    "corrected_momentum_sgd": "chainer.optimizers.CorrectedMomentumSGD",
    "nesterov_ag": "chainer.optimizers.NesterovAG",
    "adam": "mnframe.optimizers.fused.Adam",  # chainer's Adam with a faster CPU update (bitwise the same)
    "chainer_adam": "chainer.optimizers.Adam",  # chainer's own update rule
    "adagrad": "chainer.optimizers.AdaGrad",
    "adadelta": "chainer.optimizers.AdaDelta",
    "rmsprop": "chainer.optimizers.RMSprop",
    "rmsprop_graves": "chainer.optimizers.RMSpropGraves",
    "smorms3": "chainer.optimizers.SMORMS3",
    "msvag": "chainer.optimizers.MSVAG",
}


def _weight_decay(rate: float):
    from chainer.optimizer_hooks import WeightDecay

    return WeightDecay(rate)


def _gradient_clipping(threshold: float):
    from chainer.optimizer_hooks import GradientClipping

    return GradientClipping(threshold)


# Names users type for an optimizer whose constructor calls it otherwise
# (``optimizer.lr=0.01`` with Adam sets ``alpha``). Null means "not set" for
# both names (the constructor's default); the validator refuses both set.
HPARAM_ALIASES: Dict[str, Dict[str, str]] = {
    "adam": {"lr": "alpha"},
    "chainer_adam": {"lr": "alpha"},
}


def optimizer_kwargs(cfg: OptimizerConfig) -> Dict[str, Any]:
    """The constructor arguments: hyper-parameters with aliases resolved."""
    kwargs = dict(cfg.hparams)
    aliases = {} if cfg.target else HPARAM_ALIASES.get(cfg.name or "", {})
    for alias, real in aliases.items():
        value = kwargs.pop(alias, None)
        if value is not None:
            kwargs[real] = value
        elif kwargs.get(real, 0) is None:
            del kwargs[real]
    return kwargs


# config field -> hook factory (called with the field's value when it is set)
HOOKS: Dict[str, Callable[[float], Any]] = {
    "weight_decay": _weight_decay,
    "gradient_clipping": _gradient_clipping,
}


def build_optimizer(cfg: OptimizerConfig, model, comm):
    """``create_multi_node_optimizer(actual, comm, ...)`` set up on ``model``, hooks added."""
    from mnframe.optimizers.multi_node import create_multi_node_optimizer  # imports mpi4py.MPI

    actual = import_target(cfg.target or OPTIMIZERS[cfg.name])(**optimizer_kwargs(cfg))
    optimizer = create_multi_node_optimizer(
        actual,
        comm,
        double_buffering=cfg.double_buffering,
        zero_fill=cfg.zero_fill,
        overlap=cfg.overlap,
        bucket_cap_mb=cfg.bucket_cap_mb,
    )
    optimizer.setup(model)
    for field, make_hook in HOOKS.items():
        value = getattr(cfg, field)
        if value is not None:
            optimizer.add_hook(make_hook(value))
    return optimizer


def schedule_extension(cfg: OptimizerConfig, optimizer):
    """(extension, trigger) of the lr schedule, or None."""
    if cfg.lr_schedule is None:
        return None
    return cfg.lr_schedule.build(optimizer)
