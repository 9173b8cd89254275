"""``_target_`` components: call one (``mnframe._internal.targets.call_target``) with the config's kwargs.

A ``_target_`` that rejects its arguments (a missing data file, a negative
size) is a configuration problem, not a crash: ``instantiate(..., path=key)``
turns the exceptions of ``CONFIG_FAULTS`` raised by the call into a
``ConfigError`` naming ``key`` and the arguments, and ``agree_on_faults`` makes
every rank raise that error when any rank hit one (ranks build different
things: only rank 0 loads data for ``scatter``, each model-parallel rank builds
its own stages). A target can blame its arguments by setting ``argument`` (a
name or a tuple of names) on the exception it raises (``exc.argument = 'path'``,
see ``mnframe.recipes.blame``): the key is then ``key.path``.
"""

from __future__ import annotations

import contextlib
from typing import Any, Dict, Iterator, Optional

from mnframe._internal.targets import call_target
from mnframe.config.issues import ConfigError
from mnframe.config.schema import Component

# What a constructor or data loader raises when its arguments are wrong
# (anything else is a bug and keeps its traceback).
CONFIG_FAULTS = (OSError, ValueError, TypeError, KeyError)


def describe_call(dotted: str, kwargs: Dict[str, Any]) -> str:
    return f"{dotted}({', '.join(f'{k}={v!r}' for k, v in kwargs.items())})"


def fault_message(path: str, dotted: str, kwargs: Dict[str, Any], exc: BaseException) -> str:
    """``key: what failed: why`` for a configuration fault raised by ``dotted(**kwargs)``."""
    blamed = getattr(exc, "argument", None)
    blamed = (blamed,) if isinstance(blamed, str) else tuple(blamed or ())
    key = ", ".join(f"{path}.{a}" for a in blamed) or path
    text = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
    return (
        f"{key}: {describe_call(dotted, kwargs)} failed: {type(exc).__name__}: {text}\n"
        f"Fix {key} in the recipe YAML or on the command line."
    )


def instantiate(component: Component, path: Optional[str] = None, **provided: Any) -> Any:
    """Call the component's target; with ``path``, its faults become a ConfigError naming ``path``."""
    if path is None:
        return call_target(component.target, component.kwargs, **provided)
    try:
        return call_target(component.target, component.kwargs, **provided)
    except CONFIG_FAULTS as exc:
        raise ConfigError(fault_message(path, component.target, component.kwargs, exc)) from None


@contextlib.contextmanager
def agree_on_faults(comm) -> Iterator[None]:
    """Run the block on every rank of ``comm``; if a ConfigError left it on any rank,
    raise one ConfigError on every rank (each distinct message once)."""
    from mnframe.communicators.host_collectives import share_verdict

    error = None
    try:
        yield
    except ConfigError as exc:
        error = str(exc)
    share_verdict(comm, error, "agree_on_faults", ConfigError, _building_failed)


def _building_failed(f) -> str:
    """``building the job failed (on rank 1):`` and each distinct message once (a ``verdict`` wording)."""
    ranks = [r for r, _ in f.bad]
    where = "" if len(ranks) == f.size else f" (on rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))})"
    return f"building the job failed{where}:\n" + "\n".join(dict.fromkeys(e for _, e in f.bad))
