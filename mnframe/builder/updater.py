"""Step 5a: the updater (StandardUpdater, or ``updater._target_``)."""
from __future__ import annotations

from typing import Any, Dict

from mnframe.builder.instantiate import call_target
from mnframe.config.schema import UpdaterConfig


def build_updater(cfg: UpdaterConfig, train_iter, optimizers: Dict[str, Any], device):
    """One optimizer is passed as is; several as ``{name: optimizer}`` plus ``models``."""
    if list(optimizers) == ["main"]:
        return call_target(cfg.target, cfg.kwargs, iterator=train_iter,
                           optimizer=optimizers["main"], device=device)
    models = tuple(opt.target for opt in optimizers.values())
    return call_target(cfg.target, cfg.kwargs, iterator=train_iter, optimizer=dict(optimizers),
                       device=device, models=models)
