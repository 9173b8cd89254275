"""Step 6: the updater (StandardUpdater, or ``updater._target_``).

``PROVIDED`` is the one table of the arguments the builder passes to the
updater itself; the validator accepts an updater that needs any of them
without asking the config for it.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Dict, List, NamedTuple

from mnframe._internal.import_path import resolve as import_target
from mnframe._internal.targets import call_target, check_target
from mnframe.config.issues import ConfigIssue
from mnframe.config.schema import UpdaterConfig


class Built(NamedTuple):
    """What the steps before built, that an updater's arguments are taken from."""

    train_iter: Any
    optimizers: Dict[str, Any]  # name -> optimizer
    device: Any


def _optimizer(built: Built):
    """One optimizer is passed as is; several as ``{name: optimizer}``."""
    optimizers = built.optimizers
    return optimizers["main"] if list(optimizers) == ["main"] else dict(optimizers)


# argument name -> its value from what was built; an updater gets those its
# signature accepts. ``models`` goes to an updater that names it, and with
# several models to one that takes **kwargs too (as a GAN updater expects); a
# single model's **kwargs updater is not handed it.
PROVIDED: Dict[str, Callable[[Built], Any]] = {
    "iterator": lambda built: built.train_iter,
    "optimizer": _optimizer,
    "device": lambda built: built.device,
    "models": lambda built: tuple(opt.target for opt in built.optimizers.values()),
}


# the updaters ``updater.accumulate`` and ``debug=profile`` work with (they become MicroBatchUpdater)
STANDARD_UPDATERS = ("chainer.training.updaters.StandardUpdater", "mnframe.training.micro_batch.MicroBatchUpdater")


def build_updater(cfg: UpdaterConfig, train_iter, optimizers: Dict[str, Any], device, micro_batch=None, timer=None):
    """The updater; with ``accumulate`` other than 1, or a ``timer`` (debug=profile), the
    standard updater becomes ``MicroBatchUpdater`` (``micro_batch``: examples per micro-batch
    over all data-parallel ranks, which ``accumulate=auto`` keeps a multiple of)."""
    if cfg.accumulate != 1 or timer is not None:
        from mnframe.training.micro_batch import MicroBatchUpdater

        accumulate = 1 if cfg.accumulate == "auto" else cfg.accumulate  # auto: resolve_auto after resuming
        global_batch = None if micro_batch is None else micro_batch * accumulate
        return MicroBatchUpdater(
            train_iter,
            optimizers["main"],
            accumulate=accumulate,
            global_batch=global_batch,
            timer=timer,
            device=device,
            **cfg.kwargs,
        )
    built = Built(train_iter, optimizers, device)
    provided = {name: value(built) for name, value in PROVIDED.items()}
    if len(optimizers) == 1 and "models" not in _parameters(cfg.target):
        del provided["models"]
    return call_target(cfg.target, cfg.kwargs, **provided)


def _parameters(dotted: str):
    try:
        return inspect.signature(import_target(dotted)).parameters
    except (TypeError, ValueError):
        return {}


def updater_issues(sections: Dict[str, Any]) -> List[ConfigIssue]:
    """``updater._target_`` takes its arguments (``PROVIDED`` come from the builder), and
    ``updater.accumulate`` / ``debug=profile`` have what they need."""
    updater = sections["updater"]
    issues = check_target("updater", updater.target, updater.kwargs, set(PROVIDED))
    return issues + _micro_batch_issues(sections)


def _micro_batch_issues(s: Dict[str, Any]) -> List[ConfigIssue]:
    """``updater.accumulate`` and ``debug=profile`` replace the standard updater: not a custom one."""
    updater = s["updater"]
    profile = "debug" in s and s["debug"].profile
    if updater.accumulate == 1 and not profile:
        return []
    key, value = ("updater.accumulate", updater.accumulate) if updater.accumulate != 1 else ("debug.profile", True)
    if updater.target.replace(":", ".") not in STANDARD_UPDATERS:
        return [
            ConfigIssue(
                key,
                f"works with the standard updater only, not updater._target_={updater.target}",
                value=value,
                allowed="the default updater (drop updater._target_)",
            )
        ]
    if isinstance(s.get("model"), dict) and len(s["model"]) > 1:
        return [ConfigIssue(key, "works with one model only (this recipe has several)", value=value)]
    return []
