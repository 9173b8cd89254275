"""Step 6: trainer extensions, keyed by name in the config.

Each entry is a typed model of ``mnframe.config.schema_extensions`` that builds its
own Chainer extension; this step only decides which entries run on this rank
and registers them with their trigger (``rank0_only`` keeps reporting
extensions off the other ranks).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List

from mnframe.config.issues import ConfigIssue
from mnframe.config.schema_extensions import ExtensionBase


@dataclass
class ExtensionContext:
    """What extensions need to build themselves."""

    model: Any
    optimizer: Any
    test_iter: Any
    device: Any
    data_comm: Any
    rank: int  # world rank
    config: Any = None  # the resolved run configuration (a plain dict), for trackers' parameters


def add_extensions(trainer, entries: Dict[str, ExtensionBase], ctx: ExtensionContext) -> None:
    """Extend ``trainer`` with every enabled entry that runs on this rank."""
    for name, entry in entries.items():
        if not entry.enabled or (entry.rank0_only and ctx.rank != 0):
            continue
        extension = entry.build(ctx)
        if extension is None:
            continue
        trainer.extend(extension, name=entry.report_name(name), trigger=entry.trigger())


def extension_issues(entries: Dict[str, ExtensionBase]) -> List[ConfigIssue]:
    """What each enabled kind checks itself (a custom ``_target_``, a missing package, ...)."""
    issues: List[ConfigIssue] = []
    for name, entry in entries.items():
        if entry.enabled:
            issues += entry.issues(f"extensions.{name}", entries)
    return issues
