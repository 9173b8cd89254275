"""Config composition: the only module that uses Hydra and OmegaConf.

* ``run_hydra(argv, task)``: Hydra's own command line (``--help``, ``--info``,
  ``--cfg job``, ``-m``, ``--config-dir``, overrides), run on rank 0 only;
  ``task(job)`` is called once per Hydra job with a ``ComposedJob`` (the
  resolved config as a plain dict, its YAML, its hash and the run directory
  Hydra created).
* ``compose(overrides, config_dirs)``: the same composition without creating
  a run directory (``--check``, tests).

Recipes: ``recipe=NAME`` finds ``recipes/NAME/recipe.yaml`` (shipped; the code
beside it is the package ``mnframe.recipes``), or in a
user's ``--config-dir D``: ``D/NAME.yaml``, ``D/NAME/recipe.yaml`` or Hydra's
own ``D/recipe/NAME.yaml``. Recipe files are global packages (they set any
section and override group choices in their ``defaults``).
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Sequence

from mnframe.config.errors import ConfigError, ConfigIssue, format_issues, suggest

PACKAGE_DIR = Path(__file__).resolve().parents[1]
REPO_ROOT = PACKAGE_DIR.parent


def _shipped_dir(name: str) -> Path:
    """``conf``/``recipes``: inside the installed package (a wheel ships them as
    ``mnframe/conf`` and ``mnframe/recipes``, see setup.py), else at the top of the
    checkout (the repository's layout; editable installs)."""
    installed = PACKAGE_DIR / name
    return installed if installed.is_dir() else REPO_ROOT / name


CONF_DIR = _shipped_dir("conf")
RECIPES_DIR = _shipped_dir("recipes")
RECIPE_FILE = "recipe.yaml"


@dataclass(frozen=True)
class ComposedJob:
    """One composed, resolved job: what rank 0 broadcasts to the other ranks."""

    config: Dict[str, Any]
    yaml: str
    run_dir: str

    @property
    def config_hash(self) -> str:
        return config_hash(self.yaml)


def config_hash(yaml_text: str) -> str:
    return hashlib.sha256(yaml_text.encode()).hexdigest()


def to_yaml(config: Dict[str, Any]) -> str:
    from omegaconf import OmegaConf

    return OmegaConf.to_yaml(OmegaConf.create(config))


def from_yaml(text: str) -> Dict[str, Any]:
    import yaml

    return yaml.safe_load(text) or {}


# -- recipes -------------------------------------------------------------------

def config_dirs_from_argv(argv: Sequence[str]) -> List[Path]:
    """The ``--config-dir``/``-cd`` directories given on a Hydra command line."""
    dirs, it = [], iter(argv)
    for arg in it:
        if arg in ("--config-dir", "-cd"):
            dirs.append(Path(next(it, ".")))
        elif arg.startswith("--config-dir="):
            dirs.append(Path(arg.split("=", 1)[1]))
    return [d.resolve() for d in dirs]


def find_recipes(config_dirs: Sequence[Path] = ()) -> Dict[str, Path]:
    """Recipe name -> YAML file, shipped ones first, a user's directories overriding."""
    found: Dict[str, Path] = {}
    if RECIPES_DIR.is_dir():
        for path in sorted(RECIPES_DIR.glob(f"*/{RECIPE_FILE}")):
            found[path.parent.name] = path
    for d in config_dirs:
        for path in sorted(d.glob(f"*/{RECIPE_FILE}")):
            found[path.parent.name] = path
        for path in sorted(d.glob("*.yaml")):
            if path.stem != "config":
                found[path.stem] = path
    return found


def register_recipes(config_dirs: Sequence[Path] = ()) -> Dict[str, Path]:
    """Put every recipe file into Hydra's ``recipe`` group (package ``_global_``)."""
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    store = ConfigStore.instance()
    recipes = find_recipes(config_dirs)
    native = {p.stem for d in config_dirs for p in (d / "recipe").glob("*.yaml")}
    for name, path in recipes.items():
        if name in native:  # Hydra finds D/recipe/NAME.yaml itself
            continue
        try:
            node = OmegaConf.load(path)
        except Exception as exc:  # a YAML syntax error names the file
            raise ConfigError(f"cannot read recipe {name!r} from {path}: {exc}") from None
        store.store(group="recipe", name=name, node=node, package="_global_")
    return recipes


# -- Hydra errors as config errors --------------------------------------------

_OVERRIDE_KEY = re.compile(r"Could not override '([^']+)'")
_MISSING_OPTION = re.compile(r"Could not find '([^/']+)/([^']+)'")


def hydra_error_to_config_error(exc: BaseException, config_dirs: Sequence[Path] = ()) -> ConfigError:
    """A Hydra/OmegaConf composition failure as a ConfigError with a suggestion."""
    from mnframe.config.schema import RunConfig
    from mnframe.config.validate import allowed_keys

    text = str(exc).strip()
    cause = exc.__cause__ or exc.__context__
    if cause is not None and str(cause) not in text:
        text += f"\n{cause}"
    issues: List[ConfigIssue] = []
    m = _OVERRIDE_KEY.search(text)
    if m and "not in struct" in text:
        parts = m.group(1).split(".")
        allowed = sorted(allowed_keys(RunConfig, tuple(parts[:-1])) - {"_target_"})
        hint = f"(to add a new argument, write +{m.group(1)}=...)"
        issues.append(ConfigIssue(m.group(1), f"unknown key {hint}",
                                  allowed=", ".join(allowed) or None,
                                  suggestion=suggest(parts[-1], allowed)))
    m = _MISSING_OPTION.search(text)
    if m:
        group, option = m.group(1), m.group(2)
        options = list_group_options(group, config_dirs)
        issues.append(ConfigIssue(group, f"unknown {group} option", value=option,
                                  allowed=", ".join(options) or None,
                                  suggestion=suggest(option, options)))
    if issues:
        return ConfigError(format_issues(issues))
    return ConfigError("invalid configuration (from Hydra):\n  " + text.replace("\n", "\n  "))


def list_group_options(group: str, config_dirs: Sequence[Path] = ()) -> List[str]:
    """The choices of a config group (recipes included)."""
    if group == "recipe":
        return sorted(find_recipes(config_dirs))
    names = set()
    for d in [CONF_DIR, *config_dirs]:
        names |= {p.stem for p in (d / group).glob("*.yaml")}
    return sorted(names)


@contextlib.contextmanager
def hydra_errors_as_config_errors(config_dirs: Sequence[Path] = ()) -> Iterator[None]:
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    try:
        yield
    except (HydraException, OmegaConfBaseException) as exc:
        raise hydra_error_to_config_error(exc, config_dirs) from None


def resolve(cfg: Any) -> Dict[str, Any]:
    """A DictConfig as a plain, fully resolved dict (``???`` values kept as '???')."""
    from omegaconf import OmegaConf

    container = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=False)
    container.pop("hydra", None)
    return container


# -- the two ways to compose ----------------------------------------------------

def compose(overrides: Sequence[str] = (), config_dirs: Sequence[Path] = ()) -> Dict[str, Any]:
    """Compose and resolve without Hydra's run directory (``--check``, tests)."""
    from hydra import compose as hydra_compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    config_dirs = [Path(d).resolve() for d in config_dirs]
    register_recipes(config_dirs)
    overrides = list(overrides)
    if config_dirs:
        overrides.append("hydra.searchpath=[" + ",".join(f"file://{d}" for d in config_dirs) + "]")
    GlobalHydra.instance().clear()
    with hydra_errors_as_config_errors(config_dirs):
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
            return resolve(hydra_compose(config_name="config", overrides=overrides))


def run_hydra(argv: Sequence[str], task: Callable[[ComposedJob], Any], prog: str = "mnframe") -> None:
    """Hydra's command line over ``argv``; ``task`` runs once per composed job."""
    import hydra
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig

    config_dirs = config_dirs_from_argv(argv)
    register_recipes(config_dirs)
    in_task = []

    def _job(cfg) -> Any:
        in_task.append(True)
        with hydra_errors_as_config_errors(config_dirs):
            config = resolve(cfg)
        run_dir = HydraConfig.get().runtime.output_dir
        return task(ComposedJob(config=config, yaml=to_yaml(config), run_dir=run_dir))

    main = hydra.main(version_base=None, config_path=str(CONF_DIR), config_name="config")(_job)
    saved_argv, saved_env = sys.argv, os.environ.get("HYDRA_FULL_ERROR")
    sys.argv = [prog, *argv]
    os.environ["HYDRA_FULL_ERROR"] = "1"  # let exceptions reach the guard
    GlobalHydra.instance().clear()
    try:
        main()
    except Exception as exc:
        from hydra.errors import HydraException
        from omegaconf.errors import OmegaConfBaseException

        if isinstance(exc, (HydraException, OmegaConfBaseException)) and not in_task:
            raise hydra_error_to_config_error(exc, config_dirs) from None
        raise
    finally:
        sys.argv = saved_argv
        if saved_env is None:
            os.environ.pop("HYDRA_FULL_ERROR", None)
        else:
            os.environ["HYDRA_FULL_ERROR"] = saved_env
