"""``_target_`` objects: import a dotted path and call it with the config's kwargs."""
from __future__ import annotations

import importlib
import inspect
from typing import Any, Dict

from mnframe.config.schema import Component


def import_target(dotted: str) -> Any:
    """``package.module.attr`` -> the attribute (validate.check_target checked it already)."""
    module_name, _, attr = dotted.rpartition(".")
    return getattr(importlib.import_module(module_name), attr)


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


def instantiate(component: Component, **provided: Any) -> Any:
    return call_target(component.target, component.kwargs, **provided)
