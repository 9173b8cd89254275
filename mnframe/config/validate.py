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

# Arguments the builders pass themselves (never expected in the config).
_UPDATER_PROVIDED = {"iterator", "optimizer", "device", "models", "converter"}


# -- pass 1: pydantic ----------------------------------------------------------

def _model_fields(tp: Any) -> Dict[str, Any]:
    """Field name (and alias) -> annotation of a pydantic model type (or {})."""
    if inspect.isclass(tp) and issubclass(tp, BaseModel):
        out = {}
        for name, f in tp.model_fields.items():
            out[f.alias or name] = f.annotation
            out[name] = f.annotation
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


def _allowed_keys(root_type: Any, loc: Tuple[Any, ...]) -> Set[str]:
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
            allowed = sorted(_allowed_keys(root_type, tuple(loc[:-1])))
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
        return None, f"cannot import module {module_name!r} ({exc})", None
    if not hasattr(module, attr):
        names = [n for n in dir(module) if not n.startswith("_")]
        return None, f"module {module_name!r} has no attribute {attr!r}", suggest(attr, names)
    return getattr(module, attr), None, None


def check_target(path: str, dotted: str, kwargs: Dict[str, Any],
                 provided: Set[str] = frozenset()) -> List[ConfigIssue]:
    """``dotted`` imports and accepts ``kwargs`` (plus what the builder ``provided``)."""
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
    issues += [ConfigIssue(join_path(path, k), "value is missing (???); set it", value=v)
               for k, v in kwargs.items() if v == "???"]
    return issues


def _communicator_issues(cfg: schema.CommunicatorConfig, has_cuda: bool,
                         device: Optional[str]) -> List[ConfigIssue]:
    from mnframe.build.communicator import communicator_table

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
    from mnframe.build.optimizer import OPTIMIZERS

    issues = []
    if cfg.target:
        dotted = cfg.target
    elif cfg.name in OPTIMIZERS:
        dotted = OPTIMIZERS[cfg.name]
    else:
        return [ConfigIssue("optimizer.name", "unknown optimizer", value=cfg.name,
                            allowed=", ".join(sorted(OPTIMIZERS)) + " (or set optimizer._target_)",
                            suggestion=suggest(cfg.name or "", OPTIMIZERS))]
    issues += check_target("optimizer", dotted, cfg.hparams)
    for key, value in cfg.hparams.items():
        if not isinstance(value, (int, float, bool, type(None))) or value == "???":
            issues.append(ConfigIssue(join_path("optimizer", key),
                                      "hyper-parameters must be numbers or booleans", value=value))
    if cfg.double_buffering and (comm_name != "pure_nccl" or not has_cuda):
        issues.append(ConfigIssue("optimizer.double_buffering",
                                  "double buffering needs the pure_nccl communicator on GPUs",
                                  value=True, allowed="false, or communicator=pure_nccl on a GPU"))
    return issues


def _dataset_issues(cfg: schema.DatasetConfig, dp_width: int) -> List[ConfigIssue]:
    from mnframe.build.data import STRATEGIES

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
        elif "batch_size" in cfg.model_fields_set and \
                cfg.batch_size * dp_width != cfg.global_batch_size:
            issues.append(ConfigIssue(
                "dataset.batch_size", f"contradicts global_batch_size={cfg.global_batch_size} "
                f"over {dp_width} ranks; set only one of them", value=cfg.batch_size))
    return issues


def _model_issues(cfg: schema.RunConfig) -> List[ConfigIssue]:
    issues: List[ConfigIssue] = []
    models = cfg.model
    if isinstance(models, schema.Component):
        issues += check_target("model", models.target, models.kwargs)
    elif isinstance(models, dict):
        for name, comp in models.items():
            issues += check_target(f"model.{name}", comp.target, comp.kwargs)
    if isinstance(cfg.topology, schema.DataParallelTopology):
        if not models:
            issues.append(ConfigIssue("model", "a data-parallel topology needs a model",
                                      allowed="model=mlp or {_target_: your.Model, ...}"))
    else:
        for r, plan in cfg.topology.ranks.items():
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

def validate(raw: Dict[str, Any], world_size: int, has_cuda: bool = False,
             check_targets: bool = True) -> schema.RunConfig:
    """Return the validated ``RunConfig`` or raise one ConfigError listing every problem."""
    from mnframe.config.topology import check_graph

    if not isinstance(raw, dict):
        raise_issues([ConfigIssue("", "the config must be a mapping", value=raw)])
    issues: List[ConfigIssue] = []
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
        annotation = field.annotation
        if field.metadata:  # keep constraints such as min_length on ``name``
            annotation = typing.Annotated[(annotation, *field.metadata)]
        try:
            sections[name] = TypeAdapter(annotation).validate_python(raw[name])
        except ValidationError as err:
            issues += issues_from_validation(err, raw[name], name, field.annotation)
    extensions, ext_issues = _extension_issues(raw.get("extensions") or {})
    issues += ext_issues
    if issues:  # later checks need well-formed sections
        raise_issues(issues)

    cfg = schema.RunConfig.model_validate(raw)
    device = cfg.trainer.device
    if device == "gpu" and not has_cuda:
        issues.append(ConfigIssue("trainer.device", "no CUDA GPU (CuPy) found", value="gpu",
                                  allowed="cpu, auto"))
    if device == "auto":
        device = "gpu" if has_cuda else "cpu"
    issues += _communicator_issues(cfg.communicator, has_cuda, device)
    topo = cfg.topology
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
    else:
        dp_width = world_size
    issues += _dataset_issues(cfg.dataset, dp_width)
    if check_targets:
        issues += _optimizer_issues(cfg.optimizer, cfg.communicator.name, has_cuda)
        issues += check_target("dataset.source", cfg.dataset.source.target,
                               cfg.dataset.source.kwargs)
        issues += _model_issues(cfg)
        issues += check_target("updater", cfg.updater.target, cfg.updater.kwargs, _UPDATER_PROVIDED)
    raise_issues(issues)
    return cfg


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
