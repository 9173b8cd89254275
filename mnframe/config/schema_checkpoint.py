"""The ``checkpoint`` section of a run's configuration (``RunConfig.checkpoint`` in ``schema.py``;
the ``mnframe.checkpoint`` package builds from it)."""

from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

# How a job resumes: auto = the newest good checkpoint if any; must = fail (status 2) if none;
# never = start fresh. The runner's top-level ``resume`` key; ``attach(..., resume=...)``.
ResumeMode = Literal["auto", "must", "never"]


class CheckpointConfig(BaseModel):
    """When to write checkpoints, how many to keep, and which one to resume from
    (whether to resume is ``attach``'s ``resume``: the runner's top-level ``resume``)."""

    model_config = ConfigDict(extra="forbid")

    interval: int = Field(1000, gt=0, description="write a checkpoint every N iterations")
    keep: int = Field(3, gt=0, description="number of complete checkpoints kept (oldest removed)")
    load: Optional[str] = Field(
        None, description="resume from exactly this checkpoint (e.g. iter_00000010); fail if it is bad"
    )
    verify: bool = Field(True, description="check every file's size and SHA-256 before loading")
    dir: str = Field("checkpoints", description="checkpoint directory, relative to the run directory")
    preemption: bool = Field(True, description="SIGTERM/SIGUSR1: checkpoint at the next iteration, exit 0")
    async_save: bool = Field(False, description="interval checkpoints: copy the state, write it in a background thread")
    allow_unsafe_config_change: bool = Field(
        False, description="resume even if model/optimizer/dataset settings or the rank graph (topology) changed"
    )
