"""The trainer extensions a run can ask for: one typed model per kind, each
knowing how to check and build itself.

``extensions`` in the config is a mapping by name; an entry's ``kind``
defaults to its key (``_target_`` without a kind means ``custom``), and the
kind picks the model of ``Extension`` (a discriminated union). Adding a kind
is one class here with ``kind: Literal["name"]`` and a ``build`` method, plus
its name in ``Extension`` below; the validator, the error messages and the
builder (``mnframe.builder.extensions``) derive everything from it.

Only pydantic and the ground floor (``mnframe._internal.targets``) are imported at module
level; ``build`` imports Chainer lazily.
"""

from __future__ import annotations

import importlib.util
from typing import Annotated, Any, ClassVar, Dict, List, Literal, Optional, Union

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PositiveInt
from typing_extensions import override

from mnframe._internal.targets import call_target, check_target
from mnframe.config.fields import Unit
from mnframe.config.issues import ConfigIssue, join_path


class ExtensionBase(BaseModel):
    """Fields every extension has; ``kind`` (the discriminator) defaults to the mapping key.

    ``self_triggered`` kinds are called every iteration and apply
    ``interval``/``unit`` themselves (a trainer trigger would make them miss
    observations). ``build(ctx)`` returns the Chainer extension, or None to
    skip it; ``issues(path, entries)`` reports what only this kind can check.
    """

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    self_triggered: ClassVar[bool] = False

    kind: str
    enabled: bool = True
    rank0_only: bool = True
    interval: PositiveInt = 1
    unit: Unit = "epoch"

    def build(self, ctx) -> Any:  # pragma: no cover - every kind overrides it
        raise NotImplementedError

    def trigger(self):
        """The trigger ``trainer.extend`` gets (None for self-triggered kinds)."""
        return None if self.self_triggered else (self.interval, self.unit)

    def report_name(self, name: str) -> str:
        """The name the extension is registered under in the trainer."""
        return name

    def issues(self, path: str, entries: Dict[str, "ExtensionBase"]) -> List[ConfigIssue]:  # noqa: ARG002
        return []  # the interface's default: a kind that checks something overrides it


class EvaluatorExt(ExtensionBase):
    """Multi-node evaluator on the test split (runs on every rank); reports
    ``<report_prefix>/main/loss`` etc."""

    kind: Literal["evaluator"] = "evaluator"
    rank0_only: bool = False
    report_prefix: str = "validation"

    @override
    def build(self, ctx):
        from chainer.training import extensions

        from mnframe.extensions.evaluator import create_multi_node_evaluator

        evaluator = extensions.Evaluator(ctx.test_iter, ctx.model, device=ctx.device)
        return create_multi_node_evaluator(evaluator, ctx.data_comm)

    @override
    def report_name(self, name):
        return self.report_prefix


class LogReportExt(ExtensionBase):
    """chainer LogReport writing the JSON log ``file_name`` into the run directory."""

    kind: Literal["log_report"] = "log_report"
    self_triggered: ClassVar[bool] = True
    file_name: str = "log"

    @override
    def build(self, ctx):
        from chainer.training import extensions

        return extensions.LogReport(trigger=(self.interval, self.unit), filename=self.file_name)


class PrintReportExt(ExtensionBase):
    """The report table (reads the LogReport entry named ``log_report``)."""

    kind: Literal["print_report"] = "print_report"
    log_report: str = "log_report"
    entries: List[str] = Field(
        default_factory=lambda: [
            "epoch",
            "iteration",
            "main/loss",
            "validation/main/loss",
            "main/accuracy",
            "validation/main/accuracy",
            "elapsed_time",
        ]
    )

    @override
    def build(self, ctx):
        from chainer.training import extensions

        return extensions.PrintReport(list(self.entries), log_report=self.log_report)


class ProgressBarExt(ExtensionBase):
    """chainer ProgressBar (rank 0)."""

    kind: Literal["progress_bar"] = "progress_bar"
    self_triggered: ClassVar[bool] = True
    update_interval: PositiveInt = 10

    @override
    def build(self, ctx):
        from chainer.training import extensions

        return extensions.ProgressBar(update_interval=self.update_interval)


class PlotExt(ExtensionBase):
    """chainer PlotReport: a PNG of ``y_keys`` (needs matplotlib)."""

    kind: Literal["plot"] = "plot"
    self_triggered: ClassVar[bool] = True
    y_keys: List[str] = Field(min_length=1)
    x_key: Unit = "epoch"
    file_name: str

    @override
    def build(self, ctx):
        from chainer.training import extensions

        if not extensions.PlotReport.available():
            return None  # matplotlib missing: chainer already warned
        from mnframe.extensions.plot_report import AtomicPlotReport

        return AtomicPlotReport(
            list(self.y_keys), self.x_key, trigger=(self.interval, self.unit), filename=self.file_name
        )


class ObserveLrExt(ExtensionBase):
    """Reports the optimizer's ``attr`` (``lr``) into the log."""

    kind: Literal["observe_lr"] = "observe_lr"
    attr: str = "lr"

    @override
    def build(self, ctx):
        from chainer.training import extensions

        optimizer, attr = ctx.optimizer, self.attr
        return extensions.observe_value(attr, lambda _trainer: getattr(optimizer, attr, None))


class TensorBoardExt(ExtensionBase):
    """Writes every entry of the LogReport named ``log_report`` to TensorBoard event
    files under ``log_dir`` (null: ``<run dir>/tensorboard``), on rank 0 only.

    Needs tensorboardX (``pip install 'mnframe[tensorboard]'``); chosen with ``logger=tensorboard``.
    """

    kind: Literal["tensorboard"] = "tensorboard"
    self_triggered: ClassVar[bool] = True  # looks for new log entries every iteration
    rank0_only: Literal[True] = True
    log_report: str = "log_report"
    log_dir: Optional[str] = None

    @override
    def build(self, ctx):
        from mnframe.extensions.tensorboard import TensorBoardReport

        return TensorBoardReport(log_report=self.log_report, log_dir=self.log_dir)

    @override
    def issues(self, path, entries):
        _require_package(path, "tensorboard", "tensorboardX")
        return _log_report_issues(self, path, entries)


def _require_package(path, logger, module):
    """A logger whose package is missing is an environment problem (DependencyError, exit 3),
    not a configuration error: one line naming the package and the extra to install."""
    if importlib.util.find_spec(module) is None:
        from mnframe.runtime.errors import DependencyError

        raise DependencyError(
            f"{path} (logger={logger}) needs the {module} package, which is not installed; "
            f"fix: pip install 'mnframe[{logger}]' (or {module}), or logger=none"
        )


def _log_report_issues(self, path, entries) -> List[ConfigIssue]:
    """A logger reads the LogReport entry named ``self.log_report``: it must be an enabled one."""
    source = entries.get(self.log_report)
    if isinstance(source, LogReportExt) and source.enabled:
        return []
    reports = sorted(n for n, e in entries.items() if isinstance(e, LogReportExt) and e.enabled)
    return [
        ConfigIssue(
            join_path(path, "log_report"),
            "writes what a log_report extension logs, and there is no enabled one by that name",
            value=self.log_report,
            allowed=", ".join(reports) or "enable or add one: extensions.log_report",
        )
    ]


class CsvExt(ExtensionBase):
    """Every entry of the LogReport named ``log_report`` as a row of ``<run dir>/<file_name>``
    (rank 0; rewritten at each new entry). Chosen with ``logger=csv``."""

    kind: Literal["csv"] = "csv"
    self_triggered: ClassVar[bool] = True  # looks for new log entries every iteration
    rank0_only: Literal[True] = True
    log_report: str = "log_report"
    file_name: str = Field("metrics.csv", min_length=1)

    @override
    def build(self, ctx):
        from mnframe.extensions.csv_report import CSVReport

        return CSVReport(log_report=self.log_report, file_name=self.file_name)

    @override
    def issues(self, path, entries):
        return _log_report_issues(self, path, entries)


class MlflowExt(ExtensionBase):
    """MLflow tracking on rank 0: the resolved config (flattened) as parameters, every
    entry of the LogReport named ``log_report`` as metrics at its iteration; a resumed
    run continues the same MLflow run (``mnframe.extensions.mlflow_report``).

    ``tracking_uri`` null: ``<run dir>/mlruns`` (a local file store, no server);
    ``experiment`` null: the run's ``name``. Needs mlflow (``pip install 'mnframe[mlflow]'``);
    chosen with ``logger=mlflow``."""

    kind: Literal["mlflow"] = "mlflow"
    self_triggered: ClassVar[bool] = True
    rank0_only: Literal[True] = True
    log_report: str = "log_report"
    tracking_uri: Optional[str] = None
    experiment: Optional[str] = None
    run_name: Optional[str] = None

    @override
    def build(self, ctx):
        from mnframe.extensions.mlflow_report import MLflowReport

        config = ctx.config or {}
        return MLflowReport(
            log_report=self.log_report,
            tracking_uri=self.tracking_uri,
            experiment=self.experiment or str(config.get("name") or "mnframe"),
            run_name=self.run_name,
            params=config,
        )

    @override
    def issues(self, path, entries):
        _require_package(path, "mlflow", "mlflow")
        return _log_report_issues(self, path, entries)


class CustomExt(ExtensionBase):
    """Any extension by ``_target_`` (called with ``kwargs``)."""

    kind: Literal["custom"] = "custom"
    target: str = Field(alias="_target_")
    kwargs: Dict[str, Any] = Field(default_factory=dict)

    @override
    def build(self, ctx):
        return call_target(self.target, self.kwargs)

    @override
    def issues(self, path, entries):
        return check_target(path, self.target, self.kwargs)


def _kinds_from_keys(value: Any) -> Any:
    """An entry's ``kind`` defaults to its key (``custom`` when it has a ``_target_``);
    ``null`` entries (``extensions.plot_loss=null``) are dropped."""
    if not isinstance(value, dict):
        return value
    out = {}
    for name, entry in value.items():
        if entry is None:
            continue
        if isinstance(entry, dict) and entry.get("kind") is None:
            entry = {**entry, "kind": "custom" if "_target_" in entry else name}
        out[name] = entry
    return out


Extension = Annotated[
    Union[
        EvaluatorExt,
        LogReportExt,
        PrintReportExt,
        ProgressBarExt,
        PlotExt,
        ObserveLrExt,
        TensorBoardExt,
        CsvExt,
        MlflowExt,
        CustomExt,
    ],
    Field(discriminator="kind"),
]

# ``RunConfig.extensions``: name -> typed entry, in the config's order
Extensions = Annotated[Dict[str, Extension], BeforeValidator(_kinds_from_keys)]


def extension_kinds() -> Dict[str, type]:
    """kind -> model, derived from ``Extension``."""
    import typing

    union = typing.get_args(Extension)[0]
    return {m.model_fields["kind"].default: m for m in typing.get_args(union)}
