"""The one line rank 0 prints when a run ends: what was trained, how long, how well, and where
the results are (so a user need not open the log to know the run is over and what it gave)."""

from __future__ import annotations

import os
from typing import Any, Dict, List, Sequence

SKIP = {"epoch", "iteration", "elapsed_time", "lr"}


def _number(value: Any):
    try:
        return float(getattr(value, "array", value))
    except (TypeError, ValueError):
        return None


def last_values(trainer) -> Dict[str, float]:
    """The last entry of the trainer's LogReport (else the last observation), numbers only."""
    from chainer.training.extensions import LogReport

    entry: Dict[str, Any] = dict(trainer.observation or {})
    for ext_entry in getattr(trainer, "_extensions", {}).values():
        if isinstance(ext_entry.extension, LogReport) and ext_entry.extension.log:
            entry = ext_entry.extension.log[-1]
            break
    values = {key: _number(value) for key, value in sorted(entry.items()) if key not in SKIP}
    return {key: value for key, value in values.items() if value is not None}


def plots(trainer) -> List[str]:
    """The plot files the trainer's PlotReports wrote."""
    from chainer.training.extensions import PlotReport

    found = []
    for ext_entry in getattr(trainer, "_extensions", {}).values():
        if isinstance(ext_entry.extension, PlotReport):
            path = os.path.join(trainer.out, ext_entry.extension._file_name)
            if os.path.exists(path):
                found.append(path)
    return found


def line(trainer, seconds: float, models: Sequence[str], run_dir: str) -> str:
    """``done: 40 iterations (10 epochs) in 12.3 s; last values: ...; model: ...; plots: ...``."""
    updater = trainer.updater
    parts = [f"done: {updater.iteration} iterations ({updater.epoch} epochs) in {seconds:.1f} s"]
    values = last_values(trainer)
    if values:
        parts.append("last values: " + ", ".join(f"{key} {value:.4g}" for key, value in values.items()))
    parts.append("model: " + (", ".join(models) if models else "none written"))
    found = plots(trainer)
    if found:
        parts.append("plots: " + ", ".join(found))
    parts.append(f"run directory: {run_dir}")
    return "mnframe: " + "; ".join(parts)
