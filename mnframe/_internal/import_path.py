"""The one resolver of import paths: a string naming a module or an object in one.

The syntax is ``package.module:attribute`` (the form of Python entry points;
``attribute`` may be dotted, ``Class.method``), or ``package.module`` for the
module itself. Configs may also write the dotted ``package.module.attribute``
that Hydra's ``_target_`` uses (every shipped recipe does): without a colon,
the longest importable module prefix is the module and the rest the
attribute. Used by the lazy export tables, the communicator registry, the
``_target_`` checks (``locate``: a problem text instead of an exception, see
``mnframe._internal.targets``) and the builders (``resolve``).
"""

import importlib


def _split(path):
    """(module, [attribute parts]) for the colon syntax, or None for a dotted path."""
    if ":" not in path:
        return None
    module_name, _, attr = path.partition(":")
    return module_name, [a for a in attr.split(".") if a]


def _import(module_name):
    """The module, or None when ``module_name`` itself does not exist (other import errors propagate)."""
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            return None
        raise


def locate(path):
    """``(object, None, None)``, or ``(None, problem, suggestion)`` saying why ``path`` does not resolve."""
    from mnframe._internal.config_issue import suggest

    if not isinstance(path, str) or not path.strip(". :"):
        return None, "not an import path `package.module:name` (or `package.module.name`)", None
    split = _split(path)
    if split is None:  # dotted: the longest importable prefix is the module
        parts = path.split(".")
        if len(parts) < 2:
            return None, "not a dotted path `package.module.name`", None
        module_name, attrs = ".".join(parts[:-1]), parts[-1:]
        try:
            if _import(path) is not None:
                return importlib.import_module(path), None, None
        except ImportError:
            pass  # reported below for the parent module, as before
    else:
        module_name, attrs = split
    try:
        obj = importlib.import_module(module_name)
    except ImportError as exc:
        from mnframe.dependencies import missing_dependency
        from mnframe.runtime.errors import DependencyError

        problem = missing_dependency(module_name, exc)  # the module exists, a package it imports does not
        if problem:
            raise DependencyError(problem) from None
        return None, f"cannot import module {module_name!r} ({exc})", None
    for i, attr in enumerate(attrs):
        if not hasattr(obj, attr):
            owner = module_name if i == 0 else f"{module_name}:{'.'.join(attrs[:i])}"
            names = [n for n in dir(obj) if not n.startswith("_")]
            kind = "module" if i == 0 else "object"
            return None, f"{kind} {owner!r} has no attribute {attr!r}", suggest(attr, names)
        obj = getattr(obj, attr)
    return obj, None, None


def resolve(target):
    """``target`` itself, or for a path string the module or object it names, imported now.

    Raises ``ImportError``/``AttributeError`` (the config validator has reported
    bad paths with ``locate`` before any builder gets here)."""
    if not isinstance(target, str):
        return target
    split = _split(target)
    if split is not None:
        obj = importlib.import_module(split[0])
        for attr in split[1]:
            obj = getattr(obj, attr)
        return obj
    module = _import(target)
    if module is not None:
        return module
    module_name, _, attr = target.rpartition(".")
    if not module_name:
        raise ImportError(f"no module named {target!r}")
    return getattr(importlib.import_module(module_name), attr)
