"""Pydantic models of the runner's configuration, one per ``conf/`` group.

The composed Hydra config (a plain dict by then) is validated against
``RunConfig``. Every model forbids unknown keys so a misspelled key is an
error (with a suggestion, see ``mnframe.config.schema_checks``) instead of being
silently ignored. Checks that need the world size or the GPU live in
``mnframe.config.schema_checks``, those of names and ``_target_``s beside each builder
(``mnframe.builder.validate``); this module only describes shapes and value
ranges, and imports nothing heavy.

Layout (``conf/<group>/<choice>.yaml`` fills each section)::

    name, seed, resume          top level (the recipe sets ``name``)
    communicator                CommunicatorConfig
    optimizer                   OptimizerConfig (+ hooks, lr_schedule: ``schedules.LrSchedule``)
    dataset                     DatasetConfig (source, strategy, batch size, loader)
    model                       Component, or {name: Component} for several models
    topology                    DataParallelTopology | ModelParallelTopology
    updater                     UpdaterConfig
    trainer                     TrainerConfig
    extensions                  {name: ``extensions.Extension``} (kind = ``kind`` or the key)
    checkpoint                  CheckpointConfig
    debug                       DebugConfig (debug modes: fast, overfit, profile)
"""

from __future__ import annotations

from typing import Annotated, Any, Dict, List, Literal, Optional, Tuple, Union

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    NonNegativeInt,
    PositiveInt,
    Tag,
    field_validator,
)

from mnframe.communicators.powersgd import DEFAULT_RANK, DEFAULT_START_ITER
from mnframe.config.fields import Unit
from mnframe.config.schema_checkpoint import CheckpointConfig, ResumeMode
from mnframe.config.schema_extensions import Extensions
from mnframe.config.schema_schedules import LrSchedule
from mnframe.config.schema_tune import TuneConfig


class Strict(BaseModel):
    """Base of every section: unknown keys are errors, values are not coerced loosely."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class Component(BaseModel):
    """``{_target_: dotted.path, **kwargs}``: something the builder instantiates.

    Extra keys are the keyword arguments; ``mnframe._internal.targets.check_target`` checks
    them against the target's signature (unknown or missing arguments).
    """

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    target: str = Field(alias="_target_", min_length=1)

    @property
    def kwargs(self) -> Dict[str, Any]:
        return dict(self.model_extra or {})


# -- communicator ------------------------------------------------------------


class CommunicatorConfig(Strict):
    """Arguments of ``mnframe.create_communicator``; ``name`` is checked against
    ``mnframe.communicators.registry.COMMUNICATORS`` (GPU needs included).
    ``auto`` is replaced during validation by the best name for the training
    device (pure_nccl on GPUs, two_dimensional on CPUs)."""

    name: str = "auto"
    # set by validation when ``name`` was auto: optimizer.autotune may try the other exact strategies
    chosen_by_auto: bool = False
    # auto: float16 on the wire where the first calls measure it faster (communicators/wire_choice.py)
    allreduce_grad_dtype: Optional[Literal["float16", "float32", "float64", "auto"]] = None
    batched_copy: bool = False
    # powersgd: low-rank gradients with error feedback (communicators/powersgd.py, docs/powersgd.md)
    compression: Literal["none", "powersgd"] = "none"
    powersgd_rank: PositiveInt = DEFAULT_RANK  # columns of P and Q
    powersgd_start_iter: NonNegativeInt = DEFAULT_START_ITER  # uncompressed averages first, per parameter


# -- optimizer ---------------------------------------------------------------


class OptimizerConfig(BaseModel):
    """A Chainer optimizer, its hyper-parameters and the multi-node wrapping.

    ``name`` picks a row of ``mnframe.builder.optimizer.OPTIMIZERS`` (e.g.
    ``momentum_sgd``) unless ``_target_`` names an optimizer class directly.
    Every other key is a constructor argument (``optimizer.lr=0.01``), checked
    against the optimizer's signature (``mnframe.builder.optimizer.optimizer_issues``).
    """

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    name: Optional[str] = "momentum_sgd"
    target: Optional[str] = Field(None, alias="_target_")
    double_buffering: bool = False
    # auto (not set): the runner's trial picks it with optimizer.autotune, else off (docs/autotune.md)
    overlap: Union[bool, Literal["auto"]] = "auto"
    # try the exact settings not set (overlap, bucket sizes, communicator) in the first steps; keep the fastest.
    # true: overlap only where every rank has a spare core for its thread; all: overlap anyway (docs/autotune.md)
    autotune: Union[bool, Literal["all"]] = True
    bucket_cap_mb: Optional[float] = Field(None, gt=0)
    zero_fill: bool = True
    weight_decay: Optional[float] = Field(None, ge=0)
    gradient_clipping: Optional[float] = Field(None, gt=0)
    lr_schedule: Optional[LrSchedule] = None

    @property
    def hparams(self) -> Dict[str, Any]:
        return dict(self.model_extra or {})


# -- dataset -----------------------------------------------------------------


class DatasetConfig(Strict):
    """Where the data comes from and how it is spread over the data-parallel ranks.

    ``source`` is a function returning ``(train, test)``. ``strategy`` is a key of
    ``mnframe.builder.data.STRATEGIES``: ``scatter`` (root loads, scatter_dataset),
    ``shard`` (every rank loads and keeps its scatter_index shard),
    ``multi_node_iterator`` (the root's batches are broadcast),
    ``synchronized`` (every rank iterates the full set in the same order),
    ``replicate`` (every rank iterates the full set independently).
    Receive-only model-parallel ranks get an empty dataset (``topology``).
    ``batch_size`` is per data-parallel rank; ``global_batch_size``, when set,
    wins and must divide evenly over the data-parallel ranks.
    """

    source: Component
    strategy: str = "scatter"
    shuffle: bool = True
    batch_size: PositiveInt = 100
    global_batch_size: Optional[PositiveInt] = None
    test_batch_size: Optional[PositiveInt] = None
    loader: Literal["serial", "multiprocess"] = "serial"
    n_processes: Optional[PositiveInt] = None


# -- model and topology ------------------------------------------------------

RankRef = Union[None, int, List[int]]


class Stage(Strict):
    """One component of a rank's MultiNodeChainList: ``add_link(module, rank_in, rank_out)``."""

    module: Component
    rank_in: RankRef = None
    rank_out: RankRef = None


class RankPlan(Strict):
    """What one rank of a model-parallel group runs."""

    stages: List[Stage] = Field(min_length=1)
    dataset: Literal["input", "empty"] = "input"
    classifier: bool = False


class DataParallelTopology(Strict):
    """Every rank holds the whole ``model``; gradients are averaged."""

    kind: Literal["data_parallel"] = "data_parallel"
    classifier: bool = True


class ModelParallelTopology(Strict):
    """A model split over ``len(ranks)`` ranks; ``ranks[i]`` is the plan of rank i
    of the group (``topology.ranks.1.stages.0.rank_out=0`` on the command line).

    With a world larger than the group, the world is split into
    ``world_size / group_size`` replicas (dual parallelism): model
    communicator ``color = rank // group_size``, data communicator
    ``color = rank % group_size``.
    """

    kind: Literal["model_parallel"] = "model_parallel"
    ranks: List[RankPlan] = Field(min_length=1)  # index = rank inside the group

    @field_validator("ranks", mode="before")
    @classmethod
    def _mapping_to_list(cls, value: Any) -> Any:
        # {0: plan, 1: plan} is accepted too; its keys must be 0..n-1
        if isinstance(value, dict):
            keys = sorted(int(k) for k in value)
            if keys != list(range(len(value))):
                raise ValueError(f"ranks must be numbered 0..{len(value) - 1} (got {keys})")
            return [value[k] if k in value else value[str(k)] for k in keys]
        return value

    @property
    def group_size(self) -> int:
        return len(self.ranks)


Topology = Annotated[Union[DataParallelTopology, ModelParallelTopology], Field(discriminator="kind")]


def _accumulate(value: Any) -> Any:
    """``updater.accumulate``: a positive integer or ``auto`` (one message for both forms)."""
    if value == "auto" or (isinstance(value, int) and not isinstance(value, bool) and value > 0):
        return value
    raise ValueError("must be a positive integer (micro-batches per update) or auto")


class UpdaterConfig(Strict):
    """The updater; ``_target_`` picks a custom one (called with iterator=,
    optimizer=, device=, plus ``models=`` when it accepts it, and ``kwargs``).

    ``accumulate``: N micro-batches of ``dataset.batch_size`` per rank are summed
    before one averaged update (``mnframe.training.micro_batch``); ``auto`` keeps the
    global batch of the checkpoint a run resumes from (1 on a fresh start), e.g.
    when it resumes on fewer ranks. Needs the standard updater and one model."""

    target: str = Field("chainer.training.updaters.StandardUpdater", alias="_target_")
    kwargs: Dict[str, Any] = Field(default_factory=dict)
    accumulate: Annotated[Union[int, str], BeforeValidator(_accumulate)] = 1


# -- trainer -----------------------------------------------------------------


class TrainerConfig(Strict):
    """Stop trigger, device choice and output directory.

    ``device``: ``cpu``; ``gpu`` (GPU number ``intra_rank``, fails without CUDA);
    ``auto`` (``gpu`` when CuPy sees a device, else ``cpu``).
    ``out``: null means the run directory.
    ``threads``: BLAS/OpenMP threads per rank: ``auto`` gives each rank its
    share of the node's cores when training on CPUs and no ``*_NUM_THREADS``
    variable is set; a number sets it; ``keep`` leaves the pools alone
    (``mnframe.runtime.threads``).
    ``on_nonfinite``: ``stop`` ends the run when a reported loss (or the weights about
    to be checkpointed) is NaN or infinite, on every rank at the same iteration, with
    exit status 4 and no model written; ``ignore`` trains on regardless.
    ``divergence_factor``: with ``on_nonfinite: stop``, a finite loss stops the run the same
    way once it is above this factor times its lowest value so far and above its first
    value, after ``divergence_warmup`` iterations of this run (``mnframe.checkpoint.divergence``);
    null turns this rule off.
    """

    stop: Tuple[PositiveInt, Unit] = Field(
        (20, "epoch"), json_schema_extra={"form": "[N, epoch] or [N, iteration], e.g. trainer.stop=[5,epoch]"}
    )
    device: Literal["auto", "cpu", "gpu"] = "cpu"
    out: Optional[str] = None
    threads: Union[Literal["auto", "keep"], PositiveInt] = "auto"
    on_nonfinite: Literal["stop", "ignore"] = "stop"
    divergence_factor: Optional[float] = Field(1.0e4, gt=1)
    divergence_warmup: NonNegativeInt = 10


# -- debug -------------------------------------------------------------------


class DebugConfig(Strict):
    """Debug modes (``debug=fast|overfit|profile``; ``mnframe.training.debug``).

    ``overfit_batches``: train (and evaluate) on only the first N batches of every
    rank's shard, in a fixed order: the loss must go to about zero.
    ``profile``: time each phase of every iteration on every rank and print the
    breakdown (and the slowest rank) at the end; written to ``profile.json``.
    """

    mode: Literal["none", "fast", "overfit", "profile"] = "none"
    overfit_batches: Optional[PositiveInt] = None
    profile: bool = False


# -- checkpoint --------------------------------------------------------------

# ``CheckpointConfig`` is in ``mnframe.config.schema_checkpoint`` (imported above).


# -- the whole run -----------------------------------------------------------


def _model_tag(value: Any) -> str:
    has_target = isinstance(value, Component) or (isinstance(value, dict) and "_target_" in value)
    return "one" if has_target else "named"


# One model ({_target_: ...}) or several by name ({gen: {...}, dis: {...}}).
ModelSection = Annotated[
    Union[Annotated[Component, Tag("one")], Annotated[Dict[str, Component], Tag("named")]],
    Discriminator(_model_tag),
]


class RunConfig(Strict):
    """The composed configuration of one run (one Hydra job)."""

    name: str = Field(min_length=1)
    seed: int = 0
    resume: ResumeMode = "auto"
    communicator: CommunicatorConfig
    optimizer: OptimizerConfig
    dataset: DatasetConfig
    model: Optional[ModelSection] = None
    topology: Topology
    updater: UpdaterConfig = Field(default_factory=UpdaterConfig)
    trainer: TrainerConfig
    # name -> typed entry; the kind is ``kind`` or the key (mnframe.config.schema_extensions)
    extensions: Extensions = Field(default_factory=dict)
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig)
    tune: Optional[TuneConfig] = None  # the objective of a search (tune=optuna; mnframe.commands.tune)
    debug: DebugConfig = Field(default_factory=DebugConfig)
