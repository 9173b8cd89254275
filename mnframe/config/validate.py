"""Validate a composed config (a plain dict) into a ``RunConfig``, reporting
every problem at once.

Three passes, all local (no communication), so every rank reaches the same
verdict from the same broadcast config:

1. shapes and ranges: each section against its pydantic model (``schema``);
2. names: communicator, optimizer, data strategy, extension kinds, and every
   ``_target_`` is importable and accepts the keyword arguments given;
3. the world: batch sizes divide over the data-parallel ranks, the GPU-only
   choices have a GPU, and a model-parallel rank graph fits and cannot
   deadlock (``topology.check_graph``).

``validate(raw, world_size, has_cuda)`` returns the model or raises one
``ConfigError`` listing everything wrong.
"""
from __future__ import annotations

import importlib
import inspect
import typing
from typing import Any, Dict, List, Optional, Set, Tuple

from pydantic import BaseModel, TypeAdapter, ValidationError

from mnframe.config import schema
from mnframe.config.errors import ConfigIssue, join_path, raise_issues, suggest
from mnframe.config.topology import check_graph
from mnframe.dependencies import missing_dependency
from mnframe.runtime.errors import DependencyError

# Arguments the builders pass themselves (never expected in the config).
_UPDATER_PROVIDED = {"iterator", "optimizer", "device", "models", "converter"}


# -- pass 1: pydantic ----------------------------------------------------------

def _model_fields(tp: Any) -> Dict[str, Any]:
    """Field name (and alias) -> annotation of a pydantic model type (or {})."""
    if inspect.isclass(tp) and issubclass(tp, BaseModel):
        out = {}
        for name, f in tp.model_fields.items():
            out[f.alias or name] = f.annotation
        return out
    return {}


def _candidates(tp: Any) -> List[Any]:
    """Unwrap Optional/Union/Annotated into concrete candidate types."""
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        return _candidates(typing.get_args(tp)[0])
    if origin is typing.Union:
        out = []
        for a in typing.get_args(tp):
            out += _candidates(a)
        return out
    return [tp]


def allowed_keys(root_type: Any, loc: Tuple[Any, ...]) -> Set[str]:
    """Keys the schema accepts at ``loc`` (used to suggest a fix for unknown keys)."""
    current = _candidates(root_type)
    for part in loc:
        nxt = []
        for tp in current:
            fields = _model_fields(tp)
            if part in fields:
                nxt += _candidates(fields[part])
            elif typing.get_origin(tp) in (dict, list, tuple):
                nxt += _candidates(typing.get_args(tp)[-1])
        if nxt:
            current = nxt
    keys: Set[str] = set()
    for tp in current:
        keys |= {k for k in _model_fields(tp) if not k.startswith("model_")}
    return keys


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


def issues_from_validation(err: ValidationError, data: Any, prefix: str,
                           root_type: Any) -> List[ConfigIssue]:
    """One ConfigIssue per pydantic error, with the config path and a suggestion."""
    issues = []
    for e in err.errors():
        loc = tuple(e["loc"])
        path, _ = _data_path(data, loc)
        if e["type"] == "extra_forbidden":
            key = loc[-1]
            parent_path, _ = _data_path(data, loc[:-1])
            allowed = sorted(allowed_keys(root_type, tuple(loc[:-1])))
            issues.append(ConfigIssue(
                join_path(prefix, *parent_path, key), "unknown key",
                allowed=", ".join(allowed) or None, suggestion=suggest(key, allowed)))
            continue
        if e["type"] == "missing":
            path = list(path) + ([loc[-1]] if not path or path[-1] != loc[-1] else [])
            issues.append(ConfigIssue(join_path(prefix, *path), "required key is missing"))
            continue
        issues.append(ConfigIssue(join_path(prefix, *path), e["msg"], value=e.get("input")))
    return issues


# -- pass 2: names and _target_s -------------------------------------------------

def _import_target(dotted: str):
    """Import ``pkg.module.attr``; return (object, None) or (None, error text, suggestion)."""
    module_name, _, attr = dotted.rpartition(".")
    if not module_name:
        return None, "not a dotted path `package.module.name`", None
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        problem = missing_dependency(module_name, exc)  # the module exists, a package it imports does not
        if problem:
            raise DependencyError(problem) from None
        return None, f"cannot import module {module_name!r} ({exc})", None
    if not hasattr(module, attr):
        names = [n for n in dir(module) if not n.startswith("_")]
        return None, f"module {module_name!r} has no attribute {attr!r}", suggest(attr, names)
    return getattr(module, attr), None, None


def check_target(path: str, dotted: str, kwargs: Dict[str, Any],
                 provided: Set[str] = frozenset()) -> List[ConfigIssue]:
    """``dotted`` imports and accepts ``kwargs`` (plus what the builder ``provided``)."""
    if dotted == "???":
        return []  # reported as a missing value
    obj, problem, hint = _import_target(dotted)
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
    issues = [ConfigIssue(join_path(path, k), f"{dotted} takes no argument {k!r}",
                          allowed=", ".join(names) or "no arguments", suggestion=suggest(k, names))
              for k in unknown]
    missing = [n for n, p in params.items()
               if p.default is p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
               and n not in kwargs and n not in provided]
    issues += [ConfigIssue(join_path(path, n), f"{dotted} needs argument {n!r}; add it")
               for n in missing]
    return issues


def _communicator_issues(cfg: schema.CommunicatorConfig, has_cuda: bool,
                         device: Optional[str]) -> List[ConfigIssue]:
    from mnframe.builder.communicator import communicator_table

    table = communicator_table()
    info = table.get(cfg.name)
    if info is None:
        return [ConfigIssue("communicator.name", "unknown communicator", value=cfg.name,
                            allowed=", ".join(sorted(table)), suggestion=suggest(cfg.name, table))]
    issues = []
    if getattr(info, "needs_cuda", False) and not has_cuda:
        issues.append(ConfigIssue(
            "communicator.name", "this communicator needs a CUDA GPU (CuPy) and none was found",
            value=cfg.name, allowed=", ".join(sorted(n for n, i in table.items()
                                                     if getattr(i, "cpu_ok", False)))))
    elif not getattr(info, "cpu_ok", True) and device == "cpu":
        issues.append(ConfigIssue(
            "trainer.device", f"communicator {cfg.name!r} cannot train on the CPU",
            value=device, allowed="gpu, auto"))
    return issues


def _optimizer_issues(cfg: schema.OptimizerConfig, comm_name: Optional[str],
                      has_cuda: bool) -> List[ConfigIssue]:
    from mnframe.builder.optimizer import OPTIMIZERS, optimizer_kwargs

    issues = []
    if cfg.target:
        dotted = cfg.target
    elif cfg.name in OPTIMIZERS:
        dotted = OPTIMIZERS[cfg.name]
    else:
        return [ConfigIssue("optimizer.name", "unknown optimizer", value=cfg.name,
                            allowed=", ".join(sorted(OPTIMIZERS)) + " (or set optimizer._target_)",
                            suggestion=suggest(cfg.name or "", OPTIMIZERS))]
    issues += check_target("optimizer", dotted, optimizer_kwargs(cfg))
    for key, value in optimizer_kwargs(cfg).items():
        if not isinstance(value, (int, float, bool, type(None))) or value == "???":
            issues.append(ConfigIssue(join_path("optimizer", key),
                                      "hyper-parameters must be numbers or booleans", value=value))
    if cfg.double_buffering and (comm_name != "pure_nccl" or not has_cuda):
        issues.append(ConfigIssue("optimizer.double_buffering",
                                  "double buffering needs the pure_nccl communicator on GPUs",
                                  value=True, allowed="false, or communicator=pure_nccl on a GPU"))
    return issues


def _dataset_issues(cfg: schema.DatasetConfig, dp_width: int) -> List[ConfigIssue]:
    from mnframe.builder.data import STRATEGIES

    issues = []
    if cfg.strategy not in STRATEGIES:
        issues.append(ConfigIssue("dataset.strategy", "unknown data strategy", value=cfg.strategy,
                                  allowed=", ".join(sorted(STRATEGIES)),
                                  suggestion=suggest(cfg.strategy, STRATEGIES)))
    if cfg.global_batch_size is not None:
        if cfg.global_batch_size % dp_width:
            issues.append(ConfigIssue(
                "dataset.global_batch_size",
                f"must be divisible by the {dp_width} data-parallel ranks",
                value=cfg.global_batch_size,
                allowed=f"a multiple of {dp_width}"))
    return issues


def _model_issues(models: Any, topology: Any) -> List[ConfigIssue]:
    issues: List[ConfigIssue] = []
    if isinstance(models, schema.Component):
        issues += check_target("model", models.target, models.kwargs)
    elif isinstance(models, dict):
        for name, comp in models.items():
            issues += check_target(f"model.{name}", comp.target, comp.kwargs)
    if isinstance(topology, schema.DataParallelTopology):
        if not models:
            issues.append(ConfigIssue("model", "a data-parallel topology needs a model",
                                      allowed="model=mlp or {_target_: your.Model, ...}"))
    else:
        for r, plan in enumerate(topology.ranks):
            for i, stage in enumerate(plan.stages):
                issues += check_target(f"topology.ranks.{r}.stages.{i}.module",
                                       stage.module.target, stage.module.kwargs)
    return issues


def _extension_issues(raw: Dict[str, Any]) -> Tuple[Dict[str, schema.ExtensionBase], List[ConfigIssue]]:
    out, issues = {}, []
    for name, section in (raw or {}).items():
        path = f"extensions.{name}"
        if section is None:
            continue
        if not isinstance(section, dict):
            issues.append(ConfigIssue(path, "must be a mapping", value=section))
            continue
        model = schema.extension_model(name, section)
        if model is None:
            kind = section.get("kind") or name
            kinds = sorted(k for k in schema.EXTENSION_KINDS if k != "custom")
            issues.append(ConfigIssue(join_path(path, "kind" if "kind" in section else None),
                                      "unknown extension kind", value=kind,
                                      allowed=", ".join(kinds) + ", or set _target_",
                                      suggestion=suggest(kind, kinds)))
            continue
        try:
            ext = model.model_validate(section)
        except ValidationError as err:
            issues += issues_from_validation(err, section, path, model)
            continue
        if isinstance(ext, schema.CustomExt):
            issues += check_target(path, ext.target, ext.kwargs)
        out[name] = ext
    return out, issues


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
        yield ConfigIssue(path, "mandatory value is not set (???); set it in the recipe "
                          f"or on the command line: {path}=...")


def validate(raw: Dict[str, Any], world_size: int, has_cuda: bool = False,
             check_targets: bool = True) -> schema.RunConfig:
    """Return the validated ``RunConfig`` or raise one ConfigError listing every problem."""
    if not isinstance(raw, dict):
        raise_issues([ConfigIssue("", "the config must be a mapping", value=raw)])
    raw = resolve_auto_communicator(raw, has_cuda)
    issues: List[ConfigIssue] = list(_missing_values(raw))
    if isinstance(raw.get("checkpoint"), dict) and "resume" in raw["checkpoint"]:
        issues.append(ConfigIssue("checkpoint.resume", "resume is chosen at the top level",
                                  value=raw["checkpoint"]["resume"],
                                  allowed="resume=auto|must|never"))
    sections: Dict[str, Any] = {}
    fields = schema.RunConfig.model_fields
    for key in raw:
        if key not in fields and key not in {f.alias for f in fields.values()}:
            issues.append(ConfigIssue(key, "unknown key", allowed=", ".join(fields),
                                      suggestion=suggest(key, fields)))
    for name, field in fields.items():
        if name not in raw:
            if field.is_required():
                issues.append(ConfigIssue(name, "required section is missing"))
            continue
        # the FieldInfo keeps constraints (min_length) and union discriminators
        annotation = typing.Annotated[field.annotation, field]
        try:
            sections[name] = TypeAdapter(annotation).validate_python(raw[name])
        except ValidationError as err:
            issues += issues_from_validation(err, raw[name], name, field.annotation)
    extensions, ext_issues = _extension_issues(raw.get("extensions") or {})
    issues += ext_issues
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
    device = trainer.get("device", "cpu")
    if device == "auto":
        device = "gpu" if has_cuda else "cpu"
    return {**raw, "communicator": {**comm, "name": name_for_device(device)}}


def _semantic_issues(s: Dict[str, Any], world_size: int, has_cuda: bool,
                     check_targets: bool) -> List[ConfigIssue]:
    issues: List[ConfigIssue] = []
    device = s["trainer"].device if "trainer" in s else "cpu"
    if device == "gpu" and not has_cuda:
        issues.append(ConfigIssue("trainer.device", "no CUDA GPU (CuPy) found", value="gpu",
                                  allowed="cpu, auto"))
    if device == "auto":
        device = "gpu" if has_cuda else "cpu"
    if "communicator" in s:
        issues += _communicator_issues(s["communicator"], has_cuda, device)
    topo = s.get("topology")
    dp_width = world_size
    if isinstance(topo, schema.ModelParallelTopology):
        group = topo.group_size
        if world_size < group:
            issues.append(ConfigIssue("topology.ranks", f"the model-parallel graph needs {group} "
                                      f"ranks but the job has {world_size}",
                                      allowed=f"mpiexec -n {group} (or a multiple)"))
        elif world_size % group:
            issues.append(ConfigIssue("topology.ranks", f"the world size {world_size} is not a "
                                      f"multiple of the model-parallel group size {group}",
                                      allowed=f"a multiple of {group}"))
        issues += check_graph(topo).issues
        dp_width = max(1, world_size // group)
    if "dataset" in s:
        issues += _dataset_issues(s["dataset"], dp_width)
    if not check_targets:
        return issues
    if "optimizer" in s:
        comm = s["communicator"].name if "communicator" in s else None
        issues += _optimizer_issues(s["optimizer"], comm, has_cuda)
    if "dataset" in s:
        issues += check_target("dataset.source", s["dataset"].source.target,
                               s["dataset"].source.kwargs)
    if topo is not None and "model" in s:
        issues += _model_issues(s["model"], topo)
    if "updater" in s:
        issues += check_target("updater", s["updater"].target, s["updater"].kwargs,
                               _UPDATER_PROVIDED)
    return issues


def extensions_of(cfg: schema.RunConfig) -> Dict[str, schema.ExtensionBase]:
    """The typed extension entries of a validated config (by name, in order)."""
    ext, issues = _extension_issues(cfg.extensions)
    raise_issues(issues)
    return ext


def data_parallel_width(cfg: schema.RunConfig, world_size: int) -> int:
    """How many ranks share the data (world size / model-parallel group size)."""
    if isinstance(cfg.topology, schema.ModelParallelTopology):
        return max(1, world_size // cfg.topology.group_size)
    return world_size
