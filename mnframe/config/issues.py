"""Configuration problems, collected and reported all at once.

A ``ConfigIssue`` (``mnframe._internal.config_issue``, the ground floor every package may
import) names the config path, the bad value, what is wrong and what is allowed
(with a "did you mean" suggestion for misspellings).
``raise_issues`` turns a list of them into one ``ConfigError`` whose message
lists every issue; the guard prints it without a traceback and exits 2.
"""

from __future__ import annotations

from typing import List, Optional, Sequence

from mnframe._internal.config_issue import ConfigIssue, join_path, suggest
from mnframe.runtime.errors import ConfigError


class ConfigIssues(ConfigError):
    """A ConfigError that keeps its issues, so problems found by different stages
    (composition, validation) can be reported together in one message."""

    def __init__(self, issues: Sequence["ConfigIssue"], header: str = "invalid configuration"):
        super().__init__(format_issues(issues, header))
        self.issues = list(issues)


# a key written where it does not belong -> where it is chosen instead
MOVED_KEYS = {"checkpoint.resume": "resume is chosen at the top level: resume=auto|must|never"}


def unknown_key_issue(
    path: str,
    key: str,
    allowed: Sequence[str],
    kinds: Sequence[str] = (),
    kind: Optional[str] = None,
    extra_hint: Optional[str] = None,
) -> ConfigIssue:
    """``path``: unknown key, what is allowed, and a suggestion that is not the key itself.

    ``kinds``: the other kinds of this section that have ``key`` (e.g. a data-parallel
    key left over after ``topology.kind=model_parallel``)."""
    message = "unknown key"
    if kinds:
        group = path.split(".")[0]
        message = (
            f"{key!r} is a key of kind {' / '.join(kinds)}, not of kind {kind!r} (left over from "
            f"another {group} option?); build the section from nothing in your recipe "
            f"(`- override /{group}: null` in its defaults) or from an option of kind {kind!r}"
        )
    elif path in MOVED_KEYS:
        message += f" ({MOVED_KEYS[path]})"
    elif extra_hint:
        message += f" {extra_hint}"
    hint = suggest(key, allowed)
    return ConfigIssue(
        path, message, allowed=", ".join(sorted(allowed)) or None, suggestion=hint if hint != key else None
    )


def _render(issue: ConfigIssue) -> str:
    """The issue's line, with the recipe file and line that set its key (``sources``)."""
    from mnframe.config.sources import where

    found = where(issue.path)
    return issue.render() + (f" [set in {found}]" if found else "")


def format_issues(issues: Sequence[ConfigIssue], header: str = "invalid configuration") -> str:
    lines = [f"{header}: {len(issues)} problem{'s' if len(issues) != 1 else ''}"]
    lines += [_render(i) for i in issues]
    lines.append(
        "Fix the recipe YAML or the command-line override named above "
        "(`python -m mnframe ... --cfg job` shows the composed config)."
    )
    return "\n".join(lines)


def raise_issues(issues: List[ConfigIssue], header: str = "invalid configuration") -> None:
    """Raise one ConfigError listing every issue (no-op when there is none)."""
    if issues:
        raise ConfigIssues(issues, header)


__all__ = [
    "ConfigError",
    "ConfigIssues",
    "ConfigIssue",
    "suggest",
    "unknown_key_issue",
    "join_path",
    "format_issues",
    "raise_issues",
]
