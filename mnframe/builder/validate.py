"""The one entry point that checks a whole composed config: ``validate(raw, world_size, has_cuda)``
returns the ``RunConfig`` or raises one ``ConfigError`` listing every problem.

``mnframe.config.schema_checks`` checks what the schema alone says (pass 1: shapes,
ranges, unknown keys; the device; the model-parallel rank graph); each builder
checks its own section against its own tables (``communicator_issues``,
``dataset_issues``, ``optimizer_issues``, ``model_issues``, ``updater_issues``,
``extension_issues``: names, and every ``_target_`` imports and takes the
arguments given). A section with a bad key is still checked for the rest, so
problems found by different checks come in one message. All local (no
communication): the CLI shares the verdict across ranks (``cli.agree_on_config``).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from mnframe.builder.communicator import communicator_issues, compression_issues
from mnframe.builder.data import dataset_issues, source_issues
from mnframe.builder.extensions import extension_issues
from mnframe.builder.model import model_issues
from mnframe.builder.optimizer import optimizer_issues
from mnframe.builder.updater import updater_issues
from mnframe.config import schema
from mnframe.config.issues import ConfigIssue, raise_issues
from mnframe.config.schema_checks import device_issues, read_sections, topology_issues


def validate(
    raw: Dict[str, Any], world_size: Optional[int], has_cuda: bool = False, check_targets: bool = True
) -> schema.RunConfig:
    """Return the validated ``RunConfig`` or raise one ConfigError listing every problem.

    ``world_size=None`` leaves out the checks that need it (used to report the
    rest of a command line whose composition failed); ``check_targets=False``
    leaves out the names and ``_target_``s of optimizer, dataset source, model,
    updater and extensions."""
    raw, sections, issues = read_sections(raw, has_cuda)
    issues += _world_issues(sections, world_size, has_cuda)
    if check_targets:
        issues += _target_issues(sections)
    raise_issues(issues)
    return schema.RunConfig.model_validate(raw)


def _world_issues(s: Dict[str, Any], world_size: Optional[int], has_cuda: bool) -> List[ConfigIssue]:
    """The device, the communicator it needs, the rank graph and the batch over the ranks."""
    device, issues = device_issues(s, has_cuda)
    if "communicator" in s:
        issues += communicator_issues(s["communicator"], has_cuda, device)
        issues += compression_issues(s["communicator"], s.get("topology"), s.get("optimizer"))
    dp_width, graph_issues = topology_issues(s.get("topology"), world_size, s.get("dataset"))
    issues += graph_issues
    if "dataset" in s:
        issues += dataset_issues(s["dataset"], dp_width)
    return issues


def _target_issues(s: Dict[str, Any]) -> List[ConfigIssue]:
    """Each builder's names and ``_target_``s."""
    issues: List[ConfigIssue] = []
    if "optimizer" in s:
        issues += optimizer_issues(s["optimizer"])
    if "dataset" in s:
        issues += source_issues(s["dataset"])
    if s.get("topology") is not None and "model" in s:
        issues += model_issues(s["model"], s["topology"])
    if "updater" in s:
        issues += updater_issues(s)
    if "extensions" in s:
        issues += extension_issues(s["extensions"])
    return issues
