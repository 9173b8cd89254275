"""Step 5b: trainer extensions, keyed by name in the config.

``EXTENSIONS`` maps an entry's ``kind`` to a factory ``(entry, ctx) ->
extension``; the entry's ``interval``/``unit`` give the trigger and
``rank0_only`` keeps reporting extensions off the other ranks.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict

from mnframe.builder.instantiate import call_target
from mnframe.config import schema


@dataclass
class ExtensionContext:
    """What extension factories may need."""

    model: Any
    optimizer: Any
    test_iter: Any
    device: Any
    data_comm: Any
    rank: int  # world rank


def _evaluator(e: schema.EvaluatorExt, ctx: ExtensionContext):
    import mnframe
    from chainer.training import extensions

    evaluator = extensions.Evaluator(ctx.test_iter, ctx.model, device=ctx.device)
    return mnframe.create_multi_node_evaluator(evaluator, ctx.data_comm)


def _log_report(e: schema.LogReportExt, ctx):
    from chainer.training import extensions

    return extensions.LogReport(trigger=(e.interval, e.unit), filename=e.file_name)


def _print_report(e: schema.PrintReportExt, ctx):
    from chainer.training import extensions

    return extensions.PrintReport(list(e.entries), log_report=e.log_report)


def _progress_bar(e: schema.ProgressBarExt, ctx):
    from chainer.training import extensions

    return extensions.ProgressBar(update_interval=e.update_interval)


def _plot(e: schema.PlotExt, ctx):
    from chainer.training import extensions

    if not extensions.PlotReport.available():
        return None  # matplotlib missing: chainer already warned
    return extensions.PlotReport(list(e.y_keys), e.x_key, trigger=(e.interval, e.unit),
                                 filename=e.file_name)


def _observe_lr(e: schema.ObserveLrExt, ctx):
    from chainer.training import extensions

    return extensions.observe_value(e.attr, lambda trainer: getattr(ctx.optimizer, e.attr, None))


def _custom(e: schema.CustomExt, ctx):
    return call_target(e.target, e.kwargs)


EXTENSIONS: Dict[str, Callable[[Any, ExtensionContext], Any]] = {
    "evaluator": _evaluator,
    "log_report": _log_report,
    "print_report": _print_report,
    "progress_bar": _progress_bar,
    "plot": _plot,
    "observe_lr": _observe_lr,
    "custom": _custom,
}


# kinds that are called every iteration and apply interval/unit themselves
# (passing the trigger to trainer.extend would make them miss observations)
_SELF_TRIGGERED = {"log_report", "plot", "progress_bar"}


def _kind(name: str, entry: schema.ExtensionBase) -> str:
    if isinstance(entry, schema.CustomExt):
        return "custom"
    return entry.kind or name


def add_extensions(trainer, entries: Dict[str, schema.ExtensionBase], ctx: ExtensionContext) -> None:
    """Extend ``trainer`` with every enabled entry that runs on this rank."""
    for name, entry in entries.items():
        if not entry.enabled or (entry.rank0_only and ctx.rank != 0):
            continue
        kind = _kind(name, entry)
        extension = EXTENSIONS[kind](entry, ctx)
        if extension is None:
            continue
        trigger = None if kind in _SELF_TRIGGERED else (entry.interval, entry.unit)
        trainer.extend(extension, name=getattr(entry, "report_prefix", name), trigger=trigger)
