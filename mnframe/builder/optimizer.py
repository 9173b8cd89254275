"""Step 5: the multi-node optimizer, its hooks and learning-rate schedule.

``OPTIMIZERS`` maps ``optimizer.name`` to the Chainer class (``_target_``
overrides it); ``HOOKS`` maps config fields to optimizer hooks;
the ``lr_schedule`` builds its own extension (``mnframe.config.schema_schedules``).
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Dict, List, Optional

import numpy as np

from mnframe._internal.config_issue import unknown_name
from mnframe._internal.import_path import resolve as import_target
from mnframe._internal.targets import check_target
from mnframe.config.issues import ConfigIssue, join_path
from mnframe.config.schema import CommunicatorConfig, OptimizerConfig

log = logging.getLogger("mnframe.optimizers")
AUTO = "auto"  # optimizer.overlap not set: optimizer.autotune decides, else off

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


def build_optimizer(
    cfg: OptimizerConfig, model, comm, comm_cfg: Optional[CommunicatorConfig] = None, data_parallel=True
):
    """``create_multi_node_optimizer(actual, comm, ...)`` set up on ``model``, hooks added; with
    ``optimizer.autotune``, the trial of the exact settings left unset (``autotune_plan``)."""
    from mnframe.optimizers.multi_node import create_multi_node_optimizer  # imports mpi4py.MPI

    actual = import_target(cfg.target or OPTIMIZERS[cfg.name])(**optimizer_kwargs(cfg))
    optimizer = create_multi_node_optimizer(
        actual,
        comm,
        double_buffering=cfg.double_buffering,
        zero_fill=cfg.zero_fill,
        overlap=cfg.overlap is True,
        bucket_cap_mb=cfg.bucket_cap_mb if cfg.overlap is True else None,
    )
    optimizer.setup(model)
    cands, why_not = autotune_plan(cfg, comm_cfg, comm, model, data_parallel)
    if cands:
        from mnframe.optimizers import autotune

        autotune.attach(optimizer, cands, comm_cfg.name)
    elif comm.rank == 0 and cfg.overlap == AUTO:
        log.info("autotune: off (%s): %s, no overlap", why_not, getattr(comm_cfg, "name", "the communicator"))
    for field, make_hook in HOOKS.items():
        value = getattr(cfg, field)
        if value is not None:
            optimizer.add_hook(make_hook(value))
    return optimizer


def autotune_plan(cfg: OptimizerConfig, comm_cfg, comm, model, data_parallel):
    """(the candidates of ``optimizer.autotune``'s trial, or [] and why there is none). Only
    settings whose results are bitwise the old default's are tried, and only those the user
    left unset: an explicit option always wins; float16 or ``auto`` on the wire, compression
    and double buffering are the user's choice of numerics or staleness, so they end the trial."""
    from mnframe.optimizers.autotune import candidates

    if not cfg.autotune:
        return [], "optimizer.autotune=false"
    reasons = [
        (comm_cfg is None, "no communicator settings given"),
        (not data_parallel, "a model-parallel topology"),
        (getattr(comm, "size", 1) < 2, "one rank averages nothing"),
        (
            getattr(model, "xp", np) is not np,
            "GPU gradients (NCCL's sums may depend on the message size, so buckets could change bits; "
            "optimizer.overlap=true chooses overlap)",
        ),
        (cfg.double_buffering, "optimizer.double_buffering=true"),
        (comm_cfg is not None and comm_cfg.compression != "none", "communicator.compression is set"),
        (comm_cfg is not None and comm_cfg.allreduce_grad_dtype == "auto", "allreduce_grad_dtype=auto"),
    ]
    for hit, why in reasons:
        if hit:
            return [], why
    overlap = None if cfg.overlap == AUTO else cfg.overlap
    spare, machine = True, ""
    if overlap is None and cfg.autotune != "all":
        from mnframe.runtime.threads import spare_core_everywhere

        spare, machine = spare_core_everywhere(comm)  # collective: every rank got here alike
    cands = candidates(
        comm_cfg.name,
        comm.size,
        getattr(comm, "inter_size", 1),
        overlap=overlap,
        bucket_cap_mb=cfg.bucket_cap_mb,
        communicator_free=comm_cfg.chosen_by_auto,
        spare_core=spare,
    )
    no_spare = f"no spare core for overlap's thread, {machine}"
    if len(cands) > 1:
        if not spare and comm.rank == 0:
            log.info("autotune: overlap not tried (%s; optimizer.autotune=all tries it anyway)", no_spare)
        return cands, ""
    if not spare:
        return [], f"{no_spare}, nothing else to try; optimizer.autotune=all tries overlap anyway"
    return [], "every averaging option is set"


def schedule_extension(cfg: OptimizerConfig, optimizer):
    """(extension, trigger) of the lr schedule, or None."""
    if cfg.lr_schedule is None:
        return None
    return cfg.lr_schedule.build(optimizer)


# -- checks (``mnframe.builder.validate``) ---------------------------------------


def optimizer_issues(cfg: OptimizerConfig) -> List[ConfigIssue]:
    """``optimizer.name`` (or ``_target_``) and the hyper-parameters it takes, and the
    averaging options that exclude each other."""
    if cfg.target:
        dotted = cfg.target
    elif cfg.name in OPTIMIZERS:
        dotted = OPTIMIZERS[cfg.name]
    else:
        return [unknown_name("optimizer.name", "optimizer", cfg.name, OPTIMIZERS, " (or set optimizer._target_)")]
    issues, bad = _hparam_issues(cfg)
    aliases = {} if cfg.target else HPARAM_ALIASES.get(cfg.name or "", {})
    unchecked = {aliases.get(key, key) for key in bad}
    kwargs = {k: v for k, v in optimizer_kwargs(cfg).items() if k not in unchecked}
    issues += check_target("optimizer", dotted, kwargs)
    return issues + _averaging_issues(cfg)


def _hparam_issues(cfg: OptimizerConfig):
    """(issues, the keys that are not numbers), reported under the key the user wrote
    (``lr``, not the ``alpha`` it stands for)."""
    issues, bad = [], set()
    for key, value in cfg.hparams.items():
        if not isinstance(value, (int, float, bool, type(None))) or value == "???":
            bad.add(key)
            issues.append(
                ConfigIssue(join_path("optimizer", key), "hyper-parameters must be numbers or booleans", value=value)
            )
    aliases = {} if cfg.target else HPARAM_ALIASES.get(cfg.name or "", {})
    for alias, real in aliases.items():
        if cfg.hparams.get(alias) is not None and cfg.hparams.get(real) is not None:
            issues.append(
                ConfigIssue(
                    join_path("optimizer", alias),
                    f"{alias!r} is another name of {real!r} for {cfg.name}, and both are set",
                    value=cfg.hparams[alias],
                    allowed=f"set one of them: optimizer.{real}=null optimizer.{alias}=..., "
                    f"or optimizer.{real}=... alone",
                )
            )
    return issues, bad


def _averaging_issues(cfg: OptimizerConfig) -> List[ConfigIssue]:
    # double_buffering works with every communicator (pure_nccl: NCCL on a CUDA stream; the others:
    # non-blocking MPI, CPU or GPU), so it needs no check here; nor does overlap
    issues = []
    if cfg.overlap is True and cfg.double_buffering:
        issues.append(
            ConfigIssue(
                "optimizer.overlap",
                "overlap and double_buffering both overlap the averaging",
                value=True,
                allowed="set one of them: optimizer.double_buffering=false (overlap: every step its own "
                "average) or optimizer.overlap=false (double buffering: one step stale)",
            )
        )
    if cfg.bucket_cap_mb is not None and (cfg.overlap is False or (cfg.overlap == AUTO and not cfg.autotune)):
        issues.append(
            ConfigIssue(
                "optimizer.bucket_cap_mb",
                "sizes the buckets of optimizer.overlap, which is off",
                value=cfg.bucket_cap_mb,
                allowed="optimizer.overlap=true (or auto with optimizer.autotune=true), or bucket_cap_mb=null",
            )
        )
    return issues
