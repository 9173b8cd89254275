"""Hyper-parameter search under MPI with Hydra's Optuna sweeper (``-m tune=optuna``).

The runner already runs ``-m`` sweeps under MPI: rank 0 runs Hydra's command line
(here the Optuna sweeper, which asks the study for each trial's parameters) and
announces each job; the other ranks wait for one job at a time (``mnframe.commands.cli``). This
module adds what a search needs on top: the trial's value (``objective``: ``tune.metric``
of the job's LogReport log, read on rank 0 and shared so every rank agrees on a
failure) and the check that the plugin is installed (exit 3 naming the package). The
study's resolvers, used when the config is composed, are ``mnframe.config.tune_study``.
"""

from __future__ import annotations

import math
from typing import Any, List, Optional, Sequence, Tuple

from mnframe.config.tune_study import WITHOUT_TUNE  # noqa: F401 (cli's tune.WITHOUT_TUNE; it lives with the study)
from mnframe.runtime.errors import ConfigError, DependencyError, agreed

# import name -> what to tell the user, for the modules tune=optuna needs
MODULES = ("optuna", "sqlalchemy", "hydra_plugins.hydra_optuna_sweeper")
FIX = 'pip install "mnframe[tune]" (hydra-optuna-sweeper, optuna>=2.10,<3, sqlalchemy<2)'


def environment_problem(version=None) -> Optional[str]:
    """Why the installed packages cannot run tune=optuna although they import (None: they can):
    optuna 2.x, the newest hydra-optuna-sweeper allows, cannot store a study with SQLAlchemy 2
    (full MLflow brings it); the study then failed inside an OmegaConf resolver with an empty
    "AssertionError raised while resolving interpolation". ``version``: name -> version (tests)."""
    from importlib import metadata

    def installed(name):
        try:
            return (version or metadata.version)(name)
        except metadata.PackageNotFoundError:
            return None

    sqlalchemy, optuna = installed("sqlalchemy"), installed("optuna")
    if sqlalchemy and optuna and int(sqlalchemy.split(".")[0]) >= 2 and int(optuna.split(".")[0]) < 3:
        return (
            f"tune=optuna: optuna {optuna} (hydra-optuna-sweeper pins optuna<3) cannot keep its study with "
            f"SQLAlchemy {sqlalchemy}; install sqlalchemy<2 (pip install 'sqlalchemy>=1.4,<2'), in a virtual "
            f"environment of its own if another package (full mlflow) needs SQLAlchemy 2"
        )
    return None


def requested(argv: Sequence[str]) -> bool:
    """Whether the command line asks for the Optuna sweeper."""
    return any(a in ("tune=optuna", "hydra/sweeper=optuna") for a in argv)


def require(argv: Sequence[str]) -> None:
    """DependencyError (exit 3, one line) when ``tune=optuna`` is asked for without its packages."""
    import importlib

    if not requested(argv):
        return
    for module in MODULES:
        try:
            importlib.import_module(module)
        except Exception as exc:
            raise DependencyError(
                f"tune=optuna needs {module}, which cannot be imported ({type(exc).__name__}: {exc}); fix: {FIX}"
            ) from None
    problem = environment_problem()
    if problem:
        raise DependencyError(problem)


def log_of(trainer) -> Optional[List[dict]]:
    """The entries of the trainer's (first) LogReport, or None when it has none."""
    from chainer.training.extensions import LogReport

    for entry in trainer._extensions.values():
        if isinstance(entry.extension, LogReport):
            return entry.extension.log
    return None


def reduce_metric(log: Optional[List[dict]], metric: str, how: str) -> Tuple[Optional[float], Optional[str]]:
    """(value, None), or (None, why the log yields no value) naming ``tune.metric``."""
    if log is None:
        return None, "tune.metric: the run has no LogReport (enable extensions.log_report)"
    values = [float(e[metric]) for e in log if metric in e]
    if not values:
        keys = sorted({k for e in log for k in e})
        return None, (
            f"tune.metric: {metric!r} is not in the run's log (it logs {', '.join(keys) or 'nothing'}); "
            f"set tune.metric to one of them (validation/* needs extensions.evaluator)"
        )
    value = {"last": values[-1], "min": min(values), "max": max(values)}[how]
    if math.isnan(value):
        return None, f"tune.metric: {metric} is NaN (the trial diverged)"
    return value, None


def objective(cfg, trainer, world) -> Any:
    """The trial's value on every rank (None when the config has no ``tune``: Hydra keeps
    every job's return value, so not the trainer); a ConfigError on every rank when the
    log yields none (the sweeper records a failed trial)."""
    if cfg.tune is None:
        return None
    from mnframe.communicators.host_collectives import bcast_obj

    verdict = None
    if world.rank == 0:  # the LogReport's log is rank 0's (rank0_only)
        verdict = reduce_metric(log_of(trainer), cfg.tune.metric, cfg.tune.reduce)
    value, error = bcast_obj(world, verdict, name="tune.objective")
    if error:
        raise agreed(ConfigError(error))  # rank 0's verdict, raised on every rank
    return value
