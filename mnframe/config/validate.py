"""Validate a composed config (a plain dict) into a ``RunConfig``, reporting
every problem at once.

Three passes, all local (no communication), so every rank reaches the same
verdict from the same broadcast config:

1. shapes and ranges: each section against its pydantic model (``schema``);
2. names: communicator, optimizer, data strategy, what each extension kind
   checks itself (``ExtensionBase.issues``), and every ``_target_`` is
   importable and accepts the keyword arguments given;
3. the world: batch sizes divide over the data-parallel ranks, the GPU-only
   choices have a GPU, and a model-parallel rank graph fits and cannot
   deadlock (``topology.check_graph``).

A section with a bad key still gets passes 2 and 3 for the rest of its keys,
so problems found by different passes are reported together.
``validate(raw, world_size, has_cuda)`` returns the model or raises one
``ConfigError`` listing everything wrong.
"""

from __future__ import annotations

import inspect
import typing
from typing import Any, Dict, List, Optional, Set, Tuple

from pydantic import BaseModel, Tag, TypeAdapter, ValidationError

from mnframe import cuda_env
from mnframe._import_path import locate
from mnframe.config import schema
from mnframe.config.errors import ConfigIssue, join_path, raise_issues, suggest, unknown_key_issue
from mnframe.config.extensions import ExtensionBase
from mnframe.config.topology import check_graph

# -- pass 1: pydantic ----------------------------------------------------------


def _model_fields(tp: Any) -> Dict[str, Any]:
    """Field name (and alias) -> annotation of a pydantic model type (or {})."""
    if inspect.isclass(tp) and issubclass(tp, BaseModel):
        out = {}
        for name, f in tp.model_fields.items():
            out[f.alias or name] = f.annotation
        return out
    return {}


def _field_info(tp: Any, key: Any):
    """The FieldInfo of ``key`` (name or alias) in pydantic model type ``tp``, or None."""
    if inspect.isclass(tp) and issubclass(tp, BaseModel):
        for name, f in tp.model_fields.items():
            if key in (name, f.alias):
                return f
    return None


def _candidates(tp: Any, tag: Optional[str] = None) -> List[Tuple[Any, Optional[str]]]:
    """Unwrap Optional/Union/Annotated into (concrete type, union tag) candidates.

    The tag is what pydantic puts into an error's location for a member of a
    discriminated union: its ``Tag(...)`` or its ``kind`` literal."""
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        args = typing.get_args(tp)
        tags = [m.tag for m in args[1:] if isinstance(m, Tag)]
        return _candidates(args[0], tags[0] if tags else tag)
    if origin is typing.Union:
        out = []
        for a in typing.get_args(tp):
            out += _candidates(a)
        return out
    if tag is None:
        kind = _field_info(tp, "kind")
        if kind is not None and typing.get_origin(kind.annotation) is typing.Literal:
            tag = kind.default
    return [(tp, tag)]


def _walk(root_type: Any, loc: Tuple[Any, ...]) -> List[Tuple[Any, Optional[str]]]:
    """The candidate types at ``loc`` (a pydantic error location, union tags included)."""
    current = _candidates(root_type)
    for part in loc:
        tagged = [(tp, tag) for tp, tag in current if tag is not None and tag == part]
        if tagged:  # a discriminated union's tag: narrow to that member
            current = tagged
            continue
        nxt = []
        for tp, _ in current:
            fields = _model_fields(tp)
            if part in fields:
                nxt += _candidates(fields[part])
            elif typing.get_origin(tp) in (dict, list, tuple):
                nxt += _candidates(typing.get_args(tp)[-1])
        if nxt:
            current = nxt
    return current


def allowed_keys(root_type: Any, loc: Tuple[Any, ...], kind: Optional[str] = None) -> Set[str]:
    """Keys the schema accepts at ``loc`` (used to suggest a fix for unknown keys);
    ``kind`` narrows a discriminated union to that member when it is one."""
    candidates = _walk(root_type, loc)
    candidates = [c for c in candidates if kind is not None and c[1] == kind] or candidates
    keys: Set[str] = set()
    for tp, _ in candidates:
        keys |= {k for k in _model_fields(tp) if not k.startswith("model_")}
    return keys


def _expected_form(root_type: Any, loc: Tuple[Any, ...]) -> Optional[str]:
    """The ``form`` a schema field documents (``json_schema_extra``) at or above ``loc``."""
    for end in range(len(loc), 0, -1):
        for tp, _ in _walk(root_type, loc[: end - 1]):
            info = _field_info(tp, loc[end - 1])
            extra = info.json_schema_extra if info is not None else None
            if isinstance(extra, dict) and extra.get("form"):
                return extra["form"]
    return None


def _sibling_kinds(root_type: Any, parent_loc: Tuple[Any, ...], key: str) -> List[str]:
    """Other members of the discriminated union at ``parent_loc`` that do have ``key``."""
    if not parent_loc:
        return []
    chosen = parent_loc[-1]
    members = _walk(root_type, parent_loc[:-1])
    return sorted(tag for tp, tag in members if tag is not None and tag != chosen and key in _model_fields(tp))


def _data_path(data: Any, loc: Tuple[Any, ...]) -> Tuple[List[Any], Any]:
    """Drop pydantic's union tags from ``loc`` by following the real data."""
    path, node = [], data
    for part in loc:
        if isinstance(node, dict) and part in node:
            node = node[part]
            path.append(part)
        elif isinstance(node, (list, tuple)) and isinstance(part, int) and part < len(node):
            node = node[part]
            path.append(part)
        elif isinstance(node, dict) and str(part) in {str(k) for k in node}:
            key = next(k for k in node if str(k) == str(part))
            node = node[key]
            path.append(key)
    return path, node


def _tags(text: str) -> List[str]:
    """``"'a', 'b'"`` (pydantic's expected_tags) -> ['a', 'b']."""
    return [t.strip().strip("'\"") for t in str(text).split(",") if t.strip()]


def accepts_new_keys(root_type: Any, loc: Tuple[Any, ...]) -> bool:
    """Whether the node at ``loc`` takes keys the schema does not name (constructor
    arguments of a ``_target_``, hyper-parameters, entries of a mapping)."""
    for tp, _ in _walk(root_type, loc):
        if typing.get_origin(tp) is dict:
            return True
        if inspect.isclass(tp) and issubclass(tp, BaseModel) and tp.model_config.get("extra") == "allow":
            return True
    return False


def issues_from_validation(err: ValidationError, data: Any, prefix: str, root_type: Any) -> List[ConfigIssue]:
    """One ConfigIssue per pydantic error, with the config path and a suggestion."""
    issues = []
    for e in err.errors():
        loc = tuple(e["loc"])
        path, node = _data_path(data, loc)
        if e["type"] == "extra_forbidden":
            key = loc[-1]
            parent_path, _ = _data_path(data, loc[:-1])
            allowed = sorted(allowed_keys(root_type, tuple(loc[:-1])))
            kinds = _sibling_kinds(root_type, tuple(loc[:-1]), key)
            issues.append(
                unknown_key_issue(
                    join_path(prefix, *parent_path, key), key, allowed, kinds, kind=loc[-2] if len(loc) > 1 else None
                )
            )
            continue
        if e["type"] == "missing":
            path = list(path) + ([loc[-1]] if not path or path[-1] != loc[-1] else [])
            issues.append(
                ConfigIssue(join_path(prefix, *path), "required key is missing", allowed=_expected_form(root_type, loc))
            )
            continue
        if e["type"] == "union_tag_invalid":  # an unknown ``kind`` of a discriminated union
            tags = _tags(e.get("ctx", {}).get("expected_tags", ""))
            shown = [t for t in tags if t != "custom"]
            allowed = ", ".join(shown) + (", or set _target_" if "custom" in tags else "")
            given = isinstance(node, dict) and "kind" in node
            tag = e.get("ctx", {}).get("tag")
            full = join_path(prefix, *path)
            what = "extension" if full.startswith("extensions.") else full.rsplit(".", 1)[-1]
            issues.append(
                ConfigIssue(
                    join_path(prefix, *path, "kind" if given else None),
                    f"unknown {what} kind",
                    value=tag,
                    allowed=allowed,
                    suggestion=suggest(tag, shown),
                )
            )
            continue
        issues.append(
            ConfigIssue(
                join_path(prefix, *path), e["msg"], value=e.get("input"), allowed=_expected_form(root_type, loc)
            )
        )
    return issues


# -- pass 2: names and _target_s -------------------------------------------------


def check_target(path: str, dotted: str, kwargs: Dict[str, Any], provided: Set[str] = frozenset()) -> List[ConfigIssue]:
    """``dotted`` imports and accepts ``kwargs`` (plus what the builder ``provided``)."""
    if dotted == "???":
        return []  # reported as a missing value
    obj, problem, hint = locate(dotted)  # (object, None, None) or (None, problem, suggestion)
    if problem:
        return [ConfigIssue(join_path(path, "_target_"), problem, value=dotted, suggestion=hint)]
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return []
    params = sig.parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        unknown: List[str] = []
    else:
        unknown = [k for k in kwargs if k not in params]
    names = [n for n, p in params.items() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    issues = [
        ConfigIssue(join_path(path, k), f"{dotted} gets {k!r} from the runner; remove it from the config")
        for k in kwargs
        if k in provided and k in params
    ]
    issues += [
        ConfigIssue(
            join_path(path, k),
            f"{dotted} takes no argument {k!r}",
            allowed=", ".join(names) or "no arguments",
            suggestion=suggest(k, names),
        )
        for k in unknown
    ]
    missing = [
        n
        for n, p in params.items()
        if p.default is p.empty
        and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        and n not in kwargs
        and n not in provided
    ]
    issues += [ConfigIssue(join_path(path, n), f"{dotted} needs argument {n!r}; add it") for n in missing]
    return issues


def _communicator_issues(cfg: schema.CommunicatorConfig, has_cuda: bool, device: Optional[str]) -> List[ConfigIssue]:
    from mnframe.builder.communicator import communicator_table

    table = communicator_table()
    info = table.get(cfg.name)
    if info is None:
        return [
            ConfigIssue(
                "communicator.name",
                "unknown communicator",
                value=cfg.name,
                allowed=", ".join(sorted(table)),
                suggestion=suggest(cfg.name, table),
            )
        ]
    issues = []
    if info.needs_cuda and not has_cuda:
        issues.append(
            ConfigIssue(
                "communicator.name",
                "this communicator needs a CUDA GPU (CuPy) and none was found",
                value=cfg.name,
                allowed=", ".join(sorted(n for n, i in table.items() if i.cpu_ok)),
            )
        )
    elif not info.cpu_ok and device == "cpu":
        issues.append(
            ConfigIssue(
                "trainer.device",
                f"communicator {cfg.name!r} cannot train on the CPU",
                value=device,
                allowed="gpu, auto",
            )
        )
    return issues


def _optimizer_issues(cfg: schema.OptimizerConfig) -> List[ConfigIssue]:
    from mnframe.builder.optimizer import HPARAM_ALIASES, OPTIMIZERS, optimizer_kwargs

    issues = []
    if cfg.target:
        dotted = cfg.target
    elif cfg.name in OPTIMIZERS:
        dotted = OPTIMIZERS[cfg.name]
    else:
        return [
            ConfigIssue(
                "optimizer.name",
                "unknown optimizer",
                value=cfg.name,
                allowed=", ".join(sorted(OPTIMIZERS)) + " (or set optimizer._target_)",
                suggestion=suggest(cfg.name or "", OPTIMIZERS),
            )
        ]
    # reported under the key the user wrote (``lr``, not the ``alpha`` it stands for)
    bad = set()
    for key, value in cfg.hparams.items():
        if not isinstance(value, (int, float, bool, type(None))) or value == "???":
            bad.add(key)
            issues.append(
                ConfigIssue(join_path("optimizer", key), "hyper-parameters must be numbers or booleans", value=value)
            )
    aliases = {} if cfg.target else HPARAM_ALIASES.get(cfg.name or "", {})
    for alias, real in aliases.items():
        if cfg.hparams.get(alias) is not None and cfg.hparams.get(real) is not None:
            issues.append(
                ConfigIssue(
                    join_path("optimizer", alias),
                    f"{alias!r} is another name of {real!r} for {cfg.name}, and both are set",
                    value=cfg.hparams[alias],
                    allowed=f"set one of them: optimizer.{real}=null optimizer.{alias}=..., "
                    f"or optimizer.{real}=... alone",
                )
            )
    unchecked = {aliases.get(key, key) for key in bad}
    kwargs = {k: v for k, v in optimizer_kwargs(cfg).items() if k not in unchecked}
    issues += check_target("optimizer", dotted, kwargs)
    # double_buffering works with every communicator (pure_nccl: NCCL on a CUDA stream; the others:
    # non-blocking MPI, CPU or GPU), so it needs no check here; nor does overlap
    if cfg.overlap and cfg.double_buffering:
        issues.append(
            ConfigIssue(
                "optimizer.overlap",
                "overlap and double_buffering both overlap the averaging",
                value=True,
                allowed="set one of them: optimizer.double_buffering=false (overlap: every step its own "
                "average) or optimizer.overlap=false (double buffering: one step stale)",
            )
        )
    if cfg.bucket_cap_mb is not None and not cfg.overlap:
        issues.append(
            ConfigIssue(
                "optimizer.bucket_cap_mb",
                "sizes the buckets of optimizer.overlap, which is off",
                value=cfg.bucket_cap_mb,
                allowed="optimizer.overlap=true, or bucket_cap_mb=null",
            )
        )
    return issues


def _dataset_issues(cfg: schema.DatasetConfig, dp_width: Optional[int]) -> List[ConfigIssue]:
    from mnframe.builder.data import STRATEGIES

    issues = []
    if cfg.strategy not in STRATEGIES:
        issues.append(
            ConfigIssue(
                "dataset.strategy",
                "unknown data strategy",
                value=cfg.strategy,
                allowed=", ".join(sorted(STRATEGIES)),
                suggestion=suggest(cfg.strategy, STRATEGIES),
            )
        )
    if cfg.global_batch_size is not None and dp_width is not None:
        if cfg.global_batch_size % dp_width:
            issues.append(
                ConfigIssue(
                    "dataset.global_batch_size",
                    f"must be divisible by the {dp_width} data-parallel ranks",
                    value=cfg.global_batch_size,
                    allowed=f"a multiple of {dp_width}",
                )
            )
    return issues


def _model_issues(models: Any, topology: Any) -> List[ConfigIssue]:
    from mnframe.builder.model import COMMUNICATOR_PARAMETERS as provided

    issues: List[ConfigIssue] = []
    if isinstance(models, schema.Component):
        issues += check_target("model", models.target, models.kwargs, provided)
    elif isinstance(models, dict):
        for name, comp in models.items():
            issues += check_target(f"model.{name}", comp.target, comp.kwargs, provided)
    if isinstance(topology, schema.DataParallelTopology):
        if not models:
            issues.append(
                ConfigIssue(
                    "model",
                    "a data-parallel topology needs a model",
                    allowed="model=mlp or {_target_: your.Model, ...}",
                )
            )
    else:
        for r, plan in enumerate(topology.ranks):
            for i, stage in enumerate(plan.stages):
                issues += check_target(
                    f"topology.ranks.{r}.stages.{i}.module", stage.module.target, stage.module.kwargs, provided
                )
    return issues


def _extension_issues(entries: Dict[str, ExtensionBase]) -> List[ConfigIssue]:
    """What each kind checks itself (a custom ``_target_``, a missing package, ...)."""
    issues: List[ConfigIssue] = []
    for name, entry in entries.items():
        if entry.enabled:
            issues += entry.issues(f"extensions.{name}", entries)
    return issues


def _micro_batch_issues(s: Dict[str, Any]) -> List[ConfigIssue]:
    """``updater.accumulate`` and ``debug=profile`` replace the standard updater: not a custom one."""
    from mnframe.builder.updater import STANDARD_UPDATERS

    updater = s["updater"]
    profile = "debug" in s and s["debug"].profile
    if updater.accumulate == 1 and not profile:
        return []
    key, value = ("updater.accumulate", updater.accumulate) if updater.accumulate != 1 else ("debug.profile", True)
    if updater.target.replace(":", ".") not in STANDARD_UPDATERS:
        return [
            ConfigIssue(
                key,
                f"works with the standard updater only, not updater._target_={updater.target}",
                value=value,
                allowed="the default updater (drop updater._target_)",
            )
        ]
    if isinstance(s.get("model"), dict) and len(s["model"]) > 1:
        return [ConfigIssue(key, "works with one model only (this recipe has several)", value=value)]
    return []


# -- the entry point -------------------------------------------------------------


def _missing_values(node: Any, path: str = ""):
    """``???`` (OmegaConf's mandatory marker) left anywhere in the config."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _missing_values(v, join_path(path, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _missing_values(v, join_path(path, i))
    elif node == "???":
        yield ConfigIssue(
            path, f"mandatory value is not set (???); set it in the recipe or on the command line: {path}=..."
        )


_INVALID = object()  # a section pass 1 could not type


def _section(name: str, field: Any, value: Any) -> Tuple[Any, List[ConfigIssue]]:
    """Pass 1 on one section: (typed section or ``_INVALID``, its issues).

    A plain section with bad keys is also typed without them (their defaults
    instead), so passes 2 and 3 still check the rest: ``dataset.batch_size=-1
    dataset.strategy=scater`` reports both problems at once."""
    # the FieldInfo keeps constraints (min_length) and union discriminators
    annotation = typing.Annotated[field.annotation, field]
    try:
        return TypeAdapter(annotation).validate_python(value), []
    except ValidationError as err:
        issues = issues_from_validation(err, value, name, field.annotation)
        bad = {e["loc"][0] for e in err.errors() if e["loc"]}
    model = field.annotation
    if inspect.isclass(model) and issubclass(model, BaseModel) and isinstance(value, dict):
        try:
            return model.model_validate({k: v for k, v in value.items() if k not in bad}), issues
        except ValidationError:
            pass
    return _INVALID, issues


def validate(
    raw: Dict[str, Any], world_size: Optional[int], has_cuda: bool = False, check_targets: bool = True
) -> schema.RunConfig:
    """Return the validated ``RunConfig`` or raise one ConfigError listing every problem.

    ``world_size=None`` leaves out the checks that need it (used to report the
    rest of a command line whose composition failed)."""
    if not isinstance(raw, dict):
        raise_issues([ConfigIssue("", "the config must be a mapping", value=raw)])
    raw = resolve_auto_communicator(raw, has_cuda)
    issues: List[ConfigIssue] = list(_missing_values(raw))
    sections: Dict[str, Any] = {}
    fields = schema.RunConfig.model_fields
    for key in raw:
        if key not in fields and key not in {f.alias for f in fields.values()}:
            issues.append(ConfigIssue(key, "unknown key", allowed=", ".join(fields), suggestion=suggest(key, fields)))
    for name, field in fields.items():
        if name not in raw:
            if field.is_required():
                issues.append(ConfigIssue(name, "required section is missing"))
            continue
        section, section_issues = _section(name, field, raw[name])
        issues += section_issues
        if section is not _INVALID:
            sections[name] = section
    for name, field in fields.items():  # defaults of sections left out
        if name not in raw and not field.is_required():
            sections[name] = field.get_default(call_default_factory=True)
    # pass 2 and 3 on every section that is well formed, so all problems show at once
    issues += _semantic_issues(sections, world_size, has_cuda, check_targets)
    raise_issues(issues)
    return schema.RunConfig.model_validate(raw)


def resolve_auto_communicator(raw: Dict[str, Any], has_cuda: bool) -> Dict[str, Any]:
    """``communicator.name: auto`` -> the registry's choice for the training device.

    Resolved here, once, so every later check, the builder and the run summary
    see the concrete name. ``raw`` is not modified.
    """
    from mnframe.communicators.registry import AUTO, name_for_device

    comm = raw.get("communicator")
    if not (isinstance(comm, dict) and comm.get("name") == AUTO):
        return raw
    trainer = raw.get("trainer") if isinstance(raw.get("trainer"), dict) else {}
    device = cuda_env.training_device(trainer.get("device", "cpu"), has_cuda)
    return {**raw, "communicator": {**comm, "name": name_for_device(device)}}


def _semantic_issues(
    s: Dict[str, Any], world_size: Optional[int], has_cuda: bool, check_targets: bool
) -> List[ConfigIssue]:
    issues: List[ConfigIssue] = []
    device = s["trainer"].device if "trainer" in s else "cpu"
    if device == "gpu" and not has_cuda:
        issues.append(ConfigIssue("trainer.device", "no CUDA GPU (CuPy) found", value="gpu", allowed="cpu, auto"))
    device = cuda_env.training_device(device, has_cuda)
    if "communicator" in s:
        issues += _communicator_issues(s["communicator"], has_cuda, device)
    topo = s.get("topology")
    dp_width = world_size
    if isinstance(topo, schema.ModelParallelTopology):
        group = topo.group_size
        if world_size is not None and world_size < group:
            issues.append(
                ConfigIssue(
                    "topology.ranks",
                    f"the model-parallel graph needs {group} ranks but the job has {world_size}",
                    allowed=f"mpiexec -n {group} (or a multiple)",
                )
            )
        elif world_size is not None and world_size % group:
            issues.append(
                ConfigIssue(
                    "topology.ranks",
                    f"the world size {world_size} is not a multiple of the model-parallel group size {group}",
                    allowed=f"a multiple of {group}",
                )
            )
        issues += check_graph(topo).issues
        dp_width = None if world_size is None else max(1, world_size // group)
    if "dataset" in s:
        issues += _dataset_issues(s["dataset"], dp_width)
    if not check_targets:
        return issues
    if "optimizer" in s:
        issues += _optimizer_issues(s["optimizer"])
    if "dataset" in s:
        issues += check_target("dataset.source", s["dataset"].source.target, s["dataset"].source.kwargs)
    if topo is not None and "model" in s:
        issues += _model_issues(s["model"], topo)
    if "updater" in s:
        from mnframe.builder.updater import PROVIDED

        issues += check_target("updater", s["updater"].target, s["updater"].kwargs, set(PROVIDED))
        issues += _micro_batch_issues(s)
    if "extensions" in s:
        issues += _extension_issues(s["extensions"])
    return issues
