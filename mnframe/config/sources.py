"""Where a key of the composed config was written: the recipe file and line (issue 38).

A validation message names the config path (``dataset.batch_size``); a new user also
needs the file and line to edit. Composition (``compose.compose``, ``compose.run_hydra``)
``remember``s the chosen recipe's file and the command line's overrides; ``where(path)``
then finds the key in that file (YAML node marks) unless an override set it, and
``format_issues`` appends it. ``yaml_problem`` words a YAML syntax error from its mark.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Dict, Optional, Sequence

_state: Dict[str, object] = {"recipe": None, "overridden": ()}
_lines_cache: Dict[str, Dict[str, int]] = {}


def remember(recipe_file: Optional[Path], overrides: Sequence[str] = ()) -> None:
    """The recipe file of the job being composed and its command-line overrides."""
    keys = tuple(str(o).split("=", 1)[0].lstrip("+~") for o in overrides)
    _state.update(recipe=str(recipe_file) if recipe_file else None, overridden=keys)


def _shown(path: str) -> str:
    rel = os.path.relpath(path)
    return rel if not rel.startswith("..") else path


def yaml_problem(exc: BaseException, path) -> str:
    """``FILE, line L, column C: problem`` for a YAML syntax error (its mark), else the text."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None) or " ".join(str(exc).split())
    if mark is None:
        return f"{_shown(str(path))}: {problem}"
    return f"{_shown(str(path))}, line {mark.line + 1}, column {mark.column + 1}: {problem}"


def _package(text: str) -> str:
    """The ``# @package`` of a config file ('' for ``_global_``)."""
    for line in text.splitlines()[:5]:
        if line.strip().startswith("# @package"):
            package = line.split("@package", 1)[1].strip()
            return "" if package in ("_global_", "") else package
    return ""


def lines_of(path: str) -> Dict[str, int]:
    """Dotted key -> line (1-based) of every mapping key in the YAML file at ``path``."""
    if path in _lines_cache:
        return _lines_cache[path]
    import yaml

    table: Dict[str, int] = {}
    try:
        text = Path(path).read_text()
        root = yaml.compose(text)
    except (OSError, yaml.YAMLError, ValueError):
        root, text = None, ""

    def walk(node, prefix):
        if not isinstance(node, yaml.MappingNode):
            return
        for key_node, value_node in node.value:
            key = f"{prefix}.{key_node.value}" if prefix else str(key_node.value)
            if key == "defaults":
                continue
            table[key] = key_node.start_mark.line + 1
            walk(value_node, key)

    walk(root, _package(text))
    _lines_cache[path] = table
    return table


def where(config_path: str) -> Optional[str]:
    """``FILE, line N`` where the remembered recipe sets ``config_path`` (None when it does
    not, or a command-line override set it or a section above it)."""
    recipe = _state["recipe"]
    if not recipe or not config_path:
        return None
    if any(config_path == k or config_path.startswith(k + ".") for k in _state["overridden"]):
        return None
    line = lines_of(recipe).get(config_path)
    return f"{_shown(recipe)}, line {line}" if line else None
