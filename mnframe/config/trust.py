"""Opening someone else's run never imports their code unless asked (``--trust-config``).

A run directory's ``config.yaml`` names ``_target_`` callables that building the model
and data imports and calls: a config is a program. ``evaluate``, ``predict`` and
``load_model`` open run directories that may come from someone else, so, like Hugging
Face's ``trust_remote_code``, they refuse (one line naming the modules, status 2)
a config whose ``_target_``s lie outside mnframe and the installed recipes
(``TRUSTED``) unless the user says ``--trust-config`` (``trust_config=True``). The
check reads the YAML only; nothing is imported before it passes. Training is unchanged:
whoever starts a training job wrote or chose its config. Overrides on the command line
are the user's own: a ``_target_`` they set is not checked.
"""

from typing import Iterable, List, Tuple

from mnframe.runtime.errors import ConfigError

# package roots whose modules a foreign config may name, and the Chainer classes mnframe's
# own defaults name (the standard updater, Chainer's optimizers: constructed, never loading files)
TRUSTED_ROOTS = ("mnframe", "recipes")
TRUSTED_PREFIXES = ("chainer.training.updaters.", "chainer.optimizers.")


class UntrustedConfig(ConfigError):
    """A run's config names code outside mnframe and its recipes, and --trust-config was not given (status 2)."""


def trusted(target: str) -> bool:
    """Whether ``_target_`` ``target`` (``pkg.mod.name`` or ``pkg.mod:name``) is mnframe's, a recipe's,
    or one of the Chainer classes mnframe's defaults name."""
    dotted = target.strip().replace(":", ".")
    return dotted.split(".", 1)[0] in TRUSTED_ROOTS or dotted.startswith(TRUSTED_PREFIXES)


def targets(config, path: str = "") -> List[Tuple[str, str]]:
    """[(key path, target)] of every ``_target_`` string in ``config`` (dicts and lists, any depth)."""
    found: List[Tuple[str, str]] = []
    if isinstance(config, dict):
        for key, value in config.items():
            where = f"{path}.{key}" if path else str(key)
            if key == "_target_" and isinstance(value, str):
                found.append((where, value))
            else:
                found += targets(value, where)
    elif isinstance(config, list):
        for i, value in enumerate(config):
            found += targets(value, f"{path}.{i}" if path else str(i))
    return found


def check(config, where: str, trust: bool, overridden: Iterable[str] = (), flag: str = "--trust-config") -> None:
    """Raise ``UntrustedConfig`` naming the foreign modules of ``config`` (read from ``where``),
    unless ``trust``; ``overridden``: key paths the user set themselves (``model._target_``)."""
    if trust:
        return
    mine = {key.lstrip("+~").partition("=")[0] for key in overridden}
    foreign = [(p, t) for p, t in targets(config) if p not in mine and not trusted(t)]
    if not foreign:
        return
    modules = sorted({t.replace(":", ".").rsplit(".", 1)[0] or t for _, t in foreign})
    named = ", ".join(f"{p}: {t}" for p, t in foreign)
    raise UntrustedConfig(
        f"{where} names code outside mnframe and its recipes, in module(s) {', '.join(modules)} ({named}); "
        f"opening the run would import and run it. If you trust whoever wrote this run directory, add {flag}"
    )
