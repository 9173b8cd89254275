"""Config composition: the only module that uses Hydra and OmegaConf.

* ``run_hydra(argv, task)``: Hydra's own command line (``--help``, ``--info``,
  ``--cfg job``, ``-m``, ``--config-dir``, overrides), run on rank 0 only;
  ``task(job)`` is called once per Hydra job with a ``ComposedJob`` (the
  resolved config as a plain dict, its YAML, its hash and the run directory
  Hydra created).
* ``compose(overrides, config_dirs)``: the same composition without creating
  a run directory (``--check``, tests).

Generated config: the ``communicator`` options are made from the communicator
registry (``register_communicators``), and ``dataset_defaults`` (the base under
every ``dataset`` option) from the schema's defaults, so neither is kept by hand.

Recipe-local options: ``recipes/NAME/GROUP/OPTION.yaml`` (or the same under a
user's ``--config-dir``) is option ``OPTION`` of group ``GROUP``, e.g. the
mnist recipe's ``dataset=digits`` and ``model=mlp``: config that points at a
recipe's code lives with that code.

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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from mnframe.config.issues import ConfigError, ConfigIssue, ConfigIssues, suggest, unknown_key_issue
from mnframe.config.sources import yaml_problem

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


# ``validate(config, world_size=None, has_cuda=...)``, raising ConfigIssues: what checks the
# rest of a command line whose overrides Hydra refused, so one message lists every problem.
# The caller passes it (the CLI: ``mnframe.builder.validate.validate``, imported lazily; it needs the
# builders' tables that config/ does not import); without it only Hydra's refusals are listed.
Validator = Callable[..., Any]


@dataclass(frozen=True)
class ComposedJob:
    """One composed, resolved job: what rank 0 broadcasts to the other ranks.

    ``record``: Hydra's ``.hydra/`` files (name -> YAML), written by the CLI
    only once the job is accepted (``hydra.output_subdir`` is null so that Hydra
    does not write them before: a refused job must not overwrite the record of
    the run it was pointed at). ``job_num`` is the job's number in a sweep
    (None for a single run), ``overrides`` its command-line overrides.
    """

    config: Dict[str, Any]
    yaml: str
    run_dir: str
    record: Dict[str, str] = field(default_factory=dict)
    job_num: Optional[int] = None
    overrides: Tuple[str, ...] = ()


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


def remember_recipe(name: Optional[str], config_dirs: Sequence[Path], overrides: Sequence[str]) -> None:
    """Tell ``sources`` which recipe file this job composed (messages name its lines)."""
    from mnframe.config.sources import remember

    path = None
    if name:
        native = [d / "recipe" / f"{name}.yaml" for d in config_dirs if (d / "recipe" / f"{name}.yaml").is_file()]
        path = native[-1] if native else find_recipes(config_dirs).get(name)
    remember(path, overrides)


# recipe name -> why its file could not be read (reported only when it is chosen)
UNREADABLE_RECIPES: Dict[str, str] = {}


def register_recipes(config_dirs: Sequence[Path] = ()) -> Dict[str, Path]:
    """Put every recipe file into Hydra's ``recipe`` group (package ``_global_``).

    A file that does not parse is left out and remembered in
    ``UNREADABLE_RECIPES``: it fails only the job that asks for that recipe
    (naming the file), never the other recipes."""
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    store = ConfigStore.instance()
    recipes = find_recipes(config_dirs)
    native = {p.stem for d in config_dirs for p in (d / "recipe").glob("*.yaml")}
    UNREADABLE_RECIPES.clear()
    for name, path in recipes.items():
        if name in native:  # Hydra finds D/recipe/NAME.yaml itself
            continue
        try:
            node = OmegaConf.load(path)
        except Exception as exc:  # a YAML syntax error names the file
            UNREADABLE_RECIPES[name] = f"cannot read {yaml_problem(exc, path)}"
            continue
        store.store(group="recipe", name=name, node=node, package="_global_")
    return recipes


def find_recipe_options(config_dirs: Sequence[Path] = ()) -> Dict[Tuple[str, str], Path]:
    """(group, option) -> YAML file, from ``<recipe folder>/<group>/<option>.yaml``.

    Shipped recipes first, a user's directories overriding; two shipped recipes
    (or two folders of one directory) defining the same option is an error.
    """
    from mnframe.config.schema import RunConfig

    groups = set(RunConfig.model_fields)
    found: Dict[Tuple[str, str], Path] = {}
    for root in [RECIPES_DIR, *config_dirs]:
        mine: Dict[Tuple[str, str], Path] = {}
        for path in sorted(root.glob("*/*/*.yaml")):
            recipe_dir, group = path.parent.parent, path.parent.name
            if group not in groups or not (recipe_dir / RECIPE_FILE).is_file():
                continue
            key = (group, path.stem)
            if key in mine:
                raise ConfigError(
                    f"config option {group}={path.stem} is defined twice: {mine[key]} and {path}; rename one of them"
                )
            mine[key] = path
        found.update(mine)
    return found


def register_recipe_options(config_dirs: Sequence[Path] = ()) -> Dict[Tuple[str, str], Path]:
    """Put every recipe-local option into Hydra's config store."""
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    store = ConfigStore.instance()
    options = find_recipe_options(config_dirs)
    for (group, name), path in options.items():
        try:
            node = OmegaConf.load(path)
        except Exception as exc:  # a YAML syntax error names the file
            raise ConfigError(f"cannot read config option {group}={name} from {yaml_problem(exc, path)}") from None
        store.store(group=group, name=name, node=node)
    return options


def dataset_defaults() -> Dict[str, Any]:
    """The schema's ``DatasetConfig`` defaults, under every ``dataset`` option: a recipe
    states only what differs, and every key can still be overridden on the command line."""
    from mnframe.config.schema import DatasetConfig

    out: Dict[str, Any] = {"source": {"_target_": "???"}}  # required: set by the option or the recipe
    for name, spec in DatasetConfig.model_fields.items():
        if not spec.is_required():
            out[name] = spec.get_default(call_default_factory=True)
    return out


def communicator_options() -> Dict[str, Dict[str, Any]]:
    """The ``communicator`` group: one option per registry name and ``auto``, each
    ``create_communicator``'s arguments with the schema's defaults and that name."""
    from mnframe.communicators.registry import AUTO, COMMUNICATORS
    from mnframe.config.schema import CommunicatorConfig

    return {name: CommunicatorConfig(name=name).model_dump() for name in [AUTO, *COMMUNICATORS]}


def register_communicators() -> Dict[str, Dict[str, Any]]:
    """Put the generated ``communicator`` options into Hydra's config store."""
    from hydra.core.config_store import ConfigStore

    store, options = ConfigStore.instance(), communicator_options()
    for name, node in options.items():
        store.store(group="communicator", name=name, node=node)
    return options


def register_groups(config_dirs: Sequence[Path] = ()) -> None:
    """Every config Hydra finds in the config store rather than in ``conf/``."""
    from hydra.core.config_store import ConfigStore

    ConfigStore.instance().store(name="dataset_defaults", node=dataset_defaults(), package="dataset")
    register_communicators()
    register_recipe_options(config_dirs)
    register_recipes(config_dirs)
    register_resolvers()


def register_resolvers() -> None:
    """OmegaConf resolvers mnframe's configs use (``mnframe_mkdir``: conf/tune/optuna.yaml)."""
    from mnframe.config.tune_study import register_resolvers as tune_resolvers

    tune_resolvers()


def _recipe_elsewhere_hint(name: str) -> str:
    """Where a recipe that was not found may be: a file of that name under the
    working directory, to be passed with ``--config-dir``."""
    cwd = Path.cwd()
    patterns = [
        f"{name}.yaml",
        f"*/{name}.yaml",
        f"*/{name}/{RECIPE_FILE}",
        f"*/recipe/{name}.yaml",
        f"*/*/{name}.yaml",
    ]
    for pattern in patterns:
        for path in sorted(cwd.glob(pattern)):
            folder = path.parent.parent if path.name == RECIPE_FILE or path.parent.name == "recipe" else path.parent
            rel = os.path.relpath(folder, cwd)
            return (
                f"{path.relative_to(cwd)} looks like it; pass its directory: "
                f"python -m mnframe --config-dir {rel} recipe={name}"
            )
    return f"your own recipes: python -m mnframe --config-dir DIR recipe={name} (DIR/{name}.yaml)"


# -- Hydra errors as config errors --------------------------------------------

_OVERRIDE_KEY = re.compile(r"Could not override '([^']+)'")
_MISSING_OPTION = re.compile(r"Could not find '([^/']+)/([^']+)'")


def _override_key(override: str) -> str:
    """``+a.b=1`` -> ``a.b``; ``optimizer=adam`` -> ``optimizer``."""
    return override.split("=", 1)[0].lstrip("+~")


def overrides_from_argv(argv: Sequence[str]) -> List[str]:
    """The ``key=value`` (and ``~key``) overrides of a Hydra command line."""
    return [a for a in argv if not a.startswith("-") and ("=" in a or a.startswith("~"))]


def _issues_of_the_rest(
    overrides: Sequence[str], config_dirs: Sequence[Path], validate: Optional[Validator]
) -> List[ConfigIssue]:
    """What else is wrong once the overrides Hydra refused are left out: the rest is
    composed (collecting Hydra's next refusal the same way) and, with ``validate``,
    validated, leaving out the checks that need the world size, so one message lists
    every problem."""
    from mnframe.communicators.registry import cuda_problem

    try:
        config = compose(overrides, config_dirs, validate=validate)
        if validate is not None:
            validate(config, world_size=None, has_cuda=cuda_problem() is None)
    except ConfigIssues as more:
        return more.issues
    except ConfigError:
        pass
    return []


def hydra_error_to_config_error(
    exc: BaseException,
    config_dirs: Sequence[Path] = (),
    overrides: Optional[Sequence[str]] = None,
    validate: Optional[Validator] = None,
) -> ConfigError:
    """A Hydra/OmegaConf composition failure as a ConfigError with a suggestion;
    with the command line's ``overrides``, the problems of the rest are added
    (those ``validate`` finds in it too)."""
    import yaml

    text = str(exc).strip()
    cause = exc.__cause__ or exc.__context__
    if cause is not None and str(cause) not in text:
        text += f"\n{cause}"
    issues: List[ConfigIssue] = []
    refused = set()  # keys of the overrides Hydra refused
    m = _OVERRIDE_KEY.search(text)
    if m and "not in struct" in text:
        issues.append(_unknown_override_key(m.group(1), cause))
        refused.add(m.group(1))
    m = _MISSING_OPTION.search(text)
    if m:
        group, option = m.group(1), m.group(2)
        refused.add(group)
        if group == "recipe" and option in UNREADABLE_RECIPES:
            return ConfigError(
                f"recipe {option!r}: {UNREADABLE_RECIPES[option]}\n"
                "Fix the YAML of that file (the other recipes are not affected)."
            )
        options = list_group_options(group, config_dirs)
        hint = suggest(option, options)
        message = f"unknown {group} option"
        if group == "recipe" and hint is None:
            message += f" ({_recipe_elsewhere_hint(option)})"
        issues.append(ConfigIssue(group, message, value=option, allowed=", ".join(options) or None, suggestion=hint))
    if issues:
        rest = [o for o in overrides or () if _override_key(o) not in refused]
        if overrides is not None and len(rest) < len(overrides):
            issues += [i for i in _issues_of_the_rest(rest, config_dirs, validate) if i not in issues]
        return ConfigIssues(issues)
    if isinstance(exc, yaml.YAMLError):
        return ConfigError("cannot read a config file (a YAML syntax error):\n  " + text.replace("\n", "\n  "))
    unparsed = _override_parse_error(exc)
    if unparsed is not None:
        return unparsed
    return ConfigError("invalid configuration (from Hydra):\n  " + text.replace("\n", "\n  "))


def _override_parse_error(exc: BaseException) -> Optional[ConfigError]:
    """Hydra could not parse a command-line override (``'trainer.stop=[5,epoch'``): one line
    naming the override, what the parser said and how overrides are written (issue 38)."""
    from hydra.errors import OverrideParseException

    while exc is not None and not isinstance(exc, OverrideParseException):
        exc = exc.__cause__ or exc.__context__
    if exc is None:
        return None
    said = " ".join(str(exc.message).split("See https://")[0].split())
    return ConfigError(
        f"cannot parse the override {exc.override!r}: {said}; check its brackets and quotes: a list is "
        "key=[a,b] (e.g. trainer.stop=[5,epoch]), a string with spaces or special characters is "
        "key='a b', and the whole override goes in single quotes for your shell "
        "(https://hydra.cc/docs/advanced/override_grammar/basic/)"
    )


def _unknown_override_key(override_key: str, cause: Any) -> ConfigIssue:
    """``a.b.c=v`` where some part of ``a.b.c`` does not exist: name the first unknown
    part, the keys its parent has (the composed node's and the schema's) and, only
    when nothing is close and the section takes new keys, how to add one with ``+``."""
    from mnframe.config.schema import RunConfig
    from mnframe.config.schema_checks import accepts_new_keys, allowed_keys

    full_key = getattr(cause, "full_key", None) or override_key
    parts = str(full_key).split(".")
    parent = getattr(cause, "parent_node", None)
    present = set()
    with contextlib.suppress(Exception):
        present = {str(k) for k in parent.keys()}
    # the entry's kind (or its key: an extension's default kind) narrows a discriminated union
    kind = str(parent.get("kind")) if "kind" in present else (parts[-2] if len(parts) > 1 else None)
    allowed = sorted((present | allowed_keys(RunConfig, tuple(parts[:-1]), kind)) - {"_target_"})
    hint = suggest(parts[-1], allowed)
    extra = None
    if hint is None and accepts_new_keys(RunConfig, tuple(parts[:-1])):
        extra = f"(to add it, write +{full_key}=...)"
    return unknown_key_issue(str(full_key), parts[-1], allowed, extra_hint=extra)


def list_group_options(group: str, config_dirs: Sequence[Path] = ()) -> List[str]:
    """The choices of a config group (recipes included)."""
    if group == "recipe":
        return sorted(find_recipes(config_dirs))
    names = set(communicator_options()) if group == "communicator" else set()
    names |= {name for g, name in find_recipe_options(config_dirs) if g == group}
    for d in [CONF_DIR, *config_dirs]:
        names |= {p.stem for p in (d / group).glob("*.yaml")}
    return sorted(names)


@contextlib.contextmanager
def hydra_errors_as_config_errors(
    config_dirs: Sequence[Path] = (), overrides: Optional[Sequence[str]] = None, validate: Optional[Validator] = None
) -> Iterator[None]:
    try:
        yield
    except _composition_errors() as exc:
        raise hydra_error_to_config_error(exc, config_dirs, overrides, validate) from None


def _composition_errors():
    """What composing can raise for a user's mistake (a broken YAML file included)."""
    import yaml
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    return HydraException, OmegaConfBaseException, yaml.YAMLError


def resolve(cfg: Any) -> Dict[str, Any]:
    """A DictConfig as a plain, fully resolved dict (``???`` values kept as '???')."""
    from omegaconf import OmegaConf

    container = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=False)
    container.pop("hydra", None)
    return container


# -- the two ways to compose ----------------------------------------------------


def compose(
    overrides: Sequence[str] = (), config_dirs: Sequence[Path] = (), validate: Optional[Validator] = None
) -> Dict[str, Any]:
    """Compose and resolve without Hydra's run directory (``--check``, tests);
    ``validate``: see ``Validator``."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import open_dict

    config_dirs = [Path(d).resolve() for d in config_dirs]
    register_groups(config_dirs)
    users = list(overrides)
    overrides = list(users)
    if config_dirs:
        overrides.append("hydra.searchpath=[" + ",".join(f"file://{d}" for d in config_dirs) + "]")
    GlobalHydra.instance().clear()
    with hydra_errors_as_config_errors(config_dirs, users, validate):
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
            cfg = hydra_compose(config_name="config", overrides=overrides, return_hydra_config=True)
            remember_recipe(cfg.hydra.runtime.choices.get("recipe"), config_dirs, users)
            with open_dict(cfg):
                del cfg["hydra"]  # only its choices were wanted
            return resolve(cfg)


def run_dir_error(exc: BaseException, run_dir: Optional[str] = None) -> ConfigError:
    """The run directory cannot be created or written: which key to change."""
    where = f" {run_dir}" if run_dir else ""
    return ConfigError(
        f"hydra.run.dir: cannot write the run directory{where}: {exc}\n"
        f"Set hydra.run.dir (hydra.sweep.dir with -m) to a directory you can write."
    )


# Sweepers that record a job that failed as a result of the sweep (Optuna: a failed trial)
# and go on: a job's ConfigError that such a sweeper saw is not raised again at the end.
# Any other sweep (Hydra's basic sweeper) ends with its first failed job's error.
RECORDING_SWEEPERS = ("hydra_plugins.hydra_optuna_sweeper.optuna_sweeper.OptunaSweeper",)


class _EndSweep(BaseException):
    """Raised in a sweep's first job to end the whole sweep (``run_hydra`` raises the reason)."""


# Sweepers that optimise the jobs' return value: mnframe's job returns one only with ``tune``
OBJECTIVE_SWEEPERS = RECORDING_SWEEPERS


def _main_unless_refused(main: Callable[[], Any], refused: List[ConfigError]) -> None:
    """Hydra's ``main()``; a sweep refused in its first job (``_sweep_refusal``) raises that
    reason, not whatever the sweeper made of the job (a traceback is not the news)."""
    try:
        main()
    finally:
        if refused:
            raise refused[0] from None


def _sweep_refusal(sweep: bool, hydra_cfg: Any, config: Dict[str, Any]) -> List[ConfigError]:
    """[why this sweep cannot work] or []: an objective sweeper (``-m hydra/sweeper=optuna``,
    or one chosen in a config file) without ``tune``, whose jobs would return no value."""
    if sweep and hydra_cfg.sweeper.get("_target_") in OBJECTIVE_SWEEPERS and config.get("tune") is None:
        from mnframe.config.tune_study import WITHOUT_TUNE

        return [ConfigError(WITHOUT_TUNE)]
    return []


def run_hydra(
    argv: Sequence[str], task: Callable[[ComposedJob], Any], prog: str = "mnframe", validate: Optional[Validator] = None
) -> None:
    """Hydra's command line over ``argv``; ``task`` runs once per composed job (``validate``:
    see ``Validator``). A job's ConfigError is returned to Hydra (it was reported already)
    and raised at the end, unless the sweeper recorded it (``RECORDING_SWEEPERS``)."""
    import hydra
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode
    from omegaconf import OmegaConf

    config_dirs = config_dirs_from_argv(argv)
    register_groups(config_dirs)
    in_task, task_errors, recorded = [], [], []  # recorded: the sweeper keeps failed jobs as results
    refused: List[ConfigError] = []  # a sweep that cannot work (OBJECTIVE_SWEEPERS without tune)

    def _job(cfg) -> Any:
        in_task.append(True)
        try:
            return _compose_and_run(cfg)
        except ConfigError as exc:  # reported by mnframe: returned, so Hydra does not print
            task_errors.append(exc)  # "Error executing job with overrides: [...]" before it
            return None
        except BaseException as exc:
            task_errors.append(exc)
            raise

    def _compose_and_run(cfg) -> Any:
        hydra_cfg = HydraConfig.get()
        remember_recipe(hydra_cfg.runtime.choices.get("recipe"), config_dirs, hydra_cfg.overrides.task)
        with hydra_errors_as_config_errors(config_dirs):
            config = resolve(cfg)
        record = {
            "config.yaml": OmegaConf.to_yaml(cfg),
            "hydra.yaml": OmegaConf.to_yaml(HydraConfig.instance().cfg),
            "overrides.yaml": OmegaConf.to_yaml(hydra_cfg.overrides.task),
        }
        sweep = hydra_cfg.mode == RunMode.MULTIRUN
        if sweep and not recorded:
            recorded.append(hydra_cfg.sweeper.get("_target_") in RECORDING_SWEEPERS)
        refused.extend(_sweep_refusal(sweep, hydra_cfg, config))
        if refused:
            raise _EndSweep()  # not an Exception: Hydra's run_job would keep it as a failed trial
        return task(
            ComposedJob(
                config=config,
                yaml=to_yaml(config),
                run_dir=hydra_cfg.runtime.output_dir,
                record=record,
                job_num=hydra_cfg.job.num if sweep else None,
                overrides=tuple(hydra_cfg.overrides.task),
            )
        )

    main = hydra.main(version_base=None, config_path=str(CONF_DIR), config_name="config")(_job)
    saved_argv, saved_env = sys.argv, os.environ.get("HYDRA_FULL_ERROR")
    sys.argv = [prog, *argv]
    os.environ["HYDRA_FULL_ERROR"] = "1"  # let exceptions reach the guard
    GlobalHydra.instance().clear()
    try:
        _main_unless_refused(main, refused)
        failed = [e for e in task_errors if isinstance(e, ConfigError)]
        if failed and recorded != [True]:  # the first failed job's error, as Hydra raises it at the end of a sweep
            raise failed[0]
    except Exception as exc:
        if isinstance(exc, _composition_errors()) and not in_task:
            sweep = any(a in ("-m", "--multirun") for a in argv)  # a sweep's overrides list values
            overrides = None if sweep else overrides_from_argv(argv)
            raise hydra_error_to_config_error(exc, config_dirs, overrides, validate) from None
        if isinstance(exc, OSError) and not any(exc is e for e in task_errors):
            raise run_dir_error(exc) from None  # Hydra could not create the run directory
        raise
    finally:
        sys.argv = saved_argv
        if saved_env is None:
            os.environ.pop("HYDRA_FULL_ERROR", None)
        else:
            os.environ["HYDRA_FULL_ERROR"] = saved_env
