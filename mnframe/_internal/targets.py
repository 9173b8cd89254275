"""``_target_``s: check one against the config's arguments, call it, read its signature.

The ground floor beside the import-path resolver (``mnframe._internal.import_path``): the
config's own extension kinds (``mnframe.config.schema_extensions``) and every builder use
these, so none of them has to import another to call or check a target.
``check_target`` reports a path that does not import, an argument the target does
not take, one it needs and one the builder passes itself (``provided``) as
``ConfigIssue``s; ``call_target`` passes each target only the ``provided``
arguments its signature accepts.
"""

from __future__ import annotations

import inspect
from typing import Any, Dict, List, Set

from mnframe._internal.config_issue import ConfigIssue, join_path, suggest
from mnframe._internal.import_path import locate
from mnframe._internal.import_path import resolve as import_target  # check_target checked the path already


def call_target(dotted: str, kwargs: Dict[str, Any], **provided: Any) -> Any:
    """Call ``dotted`` with ``kwargs`` and those ``provided`` arguments it accepts."""
    fn = import_target(dotted)
    try:
        params = inspect.signature(fn).parameters
        takes_any = any(p.kind is p.VAR_KEYWORD for p in params.values())
        provided = {k: v for k, v in provided.items() if takes_any or k in params}
    except (TypeError, ValueError):
        pass
    return fn(**provided, **kwargs)


def declared_parameters(dotted: str, names) -> set:
    """Those of ``names`` that ``dotted``'s signature declares by name (not through ``**kwargs``)."""
    try:
        params = inspect.signature(import_target(dotted)).parameters
    except (TypeError, ValueError):
        return set()
    return {n for n in names if n in params and params[n].kind is not inspect.Parameter.VAR_KEYWORD}


def check_target(path: str, dotted: str, kwargs: Dict[str, Any], provided: Set[str] = frozenset()) -> List[ConfigIssue]:
    """``dotted`` imports and accepts ``kwargs`` (plus what the builder ``provided``)."""
    if dotted == "???":
        return []  # reported as a missing value
    obj, problem, hint = locate(dotted)  # (object, None, None) or (None, problem, suggestion)
    if problem:
        return [ConfigIssue(join_path(path, "_target_"), problem, value=dotted, suggestion=hint)]
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return []
    params = sig.parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        unknown: List[str] = []
    else:
        unknown = [k for k in kwargs if k not in params]
    names = [n for n, p in params.items() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    issues = [
        ConfigIssue(join_path(path, k), f"{dotted} gets {k!r} from the runner; remove it from the config")
        for k in kwargs
        if k in provided and k in params
    ]
    issues += [
        ConfigIssue(
            join_path(path, k),
            f"{dotted} takes no argument {k!r}",
            allowed=", ".join(names) or "no arguments",
            suggestion=suggest(k, names),
        )
        for k in unknown
    ]
    missing = [
        n
        for n, p in params.items()
        if p.default is p.empty
        and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        and n not in kwargs
        and n not in provided
    ]
    issues += [ConfigIssue(join_path(path, n), f"{dotted} needs argument {n!r}; add it") for n in missing]
    return issues
