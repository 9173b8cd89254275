"""The study's OmegaConf resolvers for ``-m tune=optuna`` (conf/tune/optuna.yaml), used at composition.

``${mnframe_mkdir:DIR}`` creates the sweep directory before the study's SQLite file is
opened in it (the sweeper creates the study before Hydra makes that directory);
``${mnframe_trials_left:...}`` and ``${mnframe_sampler_seed:...}`` let a resumed study run
only the trials left, with a seed that does not repeat the first trials. The trial's
value itself is ``mnframe.commands.tune.objective`` (above this layer).
"""

from __future__ import annotations

import os
import sys
from typing import Any

from mnframe.runtime.errors import ConfigError


def _mkdir(path: str) -> str:
    os.makedirs(path, exist_ok=True)
    return path


_left = {}  # (storage, study, total) -> trials left, computed once per process


def trials_left(storage: str, study_name: str, total: Any) -> int:
    """How many of the study's ``total`` trials are still to run (all of them for a new study).

    Resuming: trials that finished (complete or failed) count; a trial left RUNNING by
    an interrupted job is marked failed (its run stopped) and counts too. Computed
    once per process (rank 0, when Hydra builds the sweeper)."""
    key = (storage, study_name, total)
    if key in _left:
        return _left[key]
    try:
        total = int(total)
    except (TypeError, ValueError):
        total = 0
    if total < 1:
        raise ConfigError(f"tune.n_trials: must be a positive number of trials (got {total!r})")
    import optuna
    from optuna.trial import TrialState

    try:
        study = optuna.load_study(study_name=study_name, storage=storage)
    except KeyError:  # no such study yet: a new one
        _left[key] = total
        return total
    trials = study.get_trials(deepcopy=False)
    for trial in trials:
        if trial.state == TrialState.RUNNING:
            study._storage.set_trial_state(trial._trial_id, TrialState.FAIL)
    left = max(0, total - len(trials))
    print(
        f"mnframe: resuming study {study_name!r} ({storage}): {len(trials)} of {total} trials done, {left} to run",
        file=sys.stderr,
    )
    _left[key] = left
    return left


def register_resolvers() -> None:
    """``${mnframe_mkdir:DIR}``: DIR, created (the study's SQLite file goes in it);
    ``${mnframe_trials_left:STORAGE,STUDY,TOTAL}``: ``trials_left``;
    ``${mnframe_sampler_seed:SEED,STORAGE,STUDY,TOTAL}``: ``sampler_seed``."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("mnframe_mkdir"):
        OmegaConf.register_new_resolver("mnframe_mkdir", _mkdir)
    if not OmegaConf.has_resolver("mnframe_trials_left"):
        OmegaConf.register_new_resolver("mnframe_trials_left", trials_left)
    if not OmegaConf.has_resolver("mnframe_sampler_seed"):
        OmegaConf.register_new_resolver("mnframe_sampler_seed", sampler_seed)


def sampler_seed(seed: Any, storage: str, study_name: str, total: Any) -> int:
    """``seed`` plus the trials already run: a resumed study's seeded sampler does not
    propose the first trials' parameters again."""
    left = trials_left(storage, study_name, total)
    return int(seed) + int(total) - left


# Hydra's Optuna sweeper chosen without tune=optuna (lightning-hydra-template's
# `-m hydra/sweeper=optuna ...`): the trials would return no objective (issue 38)
WITHOUT_TUNE = (
    "hydra/sweeper=optuna alone gives the trials no objective (mnframe's job returns tune.metric only "
    "with tune=optuna); use tune=optuna, which selects the Optuna sweeper, keeps the study in the sweep "
    "directory and sets the objective: python -m mnframe -m tune=optuna tune.metric=validation/main/accuracy "
    "hydra.sweeper.direction=maximize 'optimizer.lr=interval(0.01,0.1)'"
)
