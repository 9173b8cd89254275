"""One configuration problem and the words it is written with: the ground floor
that the import-path resolver, the ``_target_`` checks and ``mnframe.config`` share.

A ``ConfigIssue`` names the config path, the bad value, what is wrong and what
is allowed (with a "did you mean" suggestion for misspellings: ``suggest``).
It imports nothing of mnframe, so every package can describe a problem without
importing ``config`` (``mnframe.config.issues`` collects and raises them).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any, Iterable, Optional

_MISSING = object()


@dataclass(frozen=True)
class ConfigIssue:
    path: str  # dotted config path, e.g. "dataset.batch_size"
    message: str  # what is wrong
    value: Any = _MISSING  # the offending value, when there is one
    allowed: Optional[str] = None  # what would be accepted
    suggestion: Optional[str] = None

    def render(self) -> str:
        text = f"  {self.path or '<root>'}: {self.message}"
        if self.value is not _MISSING:
            text += f" (got {self.value!r})"
        if self.allowed:
            text += f"; allowed: {self.allowed}"
        if self.suggestion:
            text += f"; did you mean {self.suggestion!r}?"
        return text


def suggest(word: str, choices: Iterable[str]) -> Optional[str]:
    """The closest of ``choices`` to a misspelled ``word``, or None."""
    matches = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=0.6)
    return matches[0] if matches else None


def unknown_name(path: str, what: str, value: Any, choices: Iterable[str], also: str = "") -> ConfigIssue:
    """``value`` is not one of the table's names: the choices, sorted, and the closest one
    (``also``: another way out, appended to the choices)."""
    names = [str(c) for c in choices]
    return ConfigIssue(
        path,
        f"unknown {what}",
        value=value,
        allowed=", ".join(sorted(names)) + also,
        suggestion=suggest(value if value is not None else "", names),
    )


def join_path(*parts: Any) -> str:
    out = ""
    for p in parts:
        if p is None or p == "":
            continue
        out = f"{out}.{p}" if out else str(p)
    return out
