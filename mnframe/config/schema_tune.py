"""The ``tune`` section: what a hyper-parameter search (``tune=optuna``) optimises.

Set by ``conf/tune/optuna.yaml``; ``mnframe.commands.tune.objective`` reads it at the end of
each trial (a sweep job) and returns the value to the sweeper.
"""

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveInt


class TuneConfig(BaseModel):
    """The objective of a search: one LogReport metric, reduced over the run's log."""

    model_config = ConfigDict(extra="forbid")

    metric: str = Field(
        min_length=1, description="a key of the LogReport log, e.g. validation/main/accuracy or main/loss"
    )
    reduce: Literal["last", "min", "max"] = Field(
        "last", description="last: the metric's last logged value; min/max: its best over the log"
    )
    n_trials: PositiveInt = Field(
        20, description="trials of the whole study: a resumed study runs only the ones left (mnframe.commands.tune)"
    )
