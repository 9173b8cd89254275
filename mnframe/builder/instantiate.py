"""``_target_`` objects: import the path (``mnframe._import_path``) and call it with the config's kwargs."""
from __future__ import annotations

import inspect
from typing import Any, Dict

from mnframe._import_path import resolve as import_target  # validate.check_target checked the path already
from mnframe.config.schema import Component


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
