"""What the schema alone can say about a composed config (a plain dict), every
problem at once; ``mnframe.builder.validate.validate`` is the entry point that adds
the checks of each builder's tables (names, ``_target_``s) in between.

All local (no communication), so every rank reaches the same verdict from the
same broadcast config:

* pass 1, shapes and ranges (``read_sections``): each section against its
  pydantic model (``schema``), unknown keys with a suggestion, ``???`` left;
  a section with a bad key is still typed without it, so the later checks see
  the rest of its keys and problems of different checks are reported together;
* the world as the schema describes it: the training device has a GPU
  (``device_issues``), a model-parallel rank graph fits the world size and
  cannot deadlock (``topology_issues``, ``topology.check_graph``).

``allowed_keys`` and ``accepts_new_keys`` also serve composition (``compose``)
for the overrides Hydra refuses.
"""

from __future__ import annotations

import inspect
import typing
from typing import Any, Dict, List, Optional, Set, Tuple

from pydantic import BaseModel, Tag, TypeAdapter, ValidationError

from mnframe import cuda_env
from mnframe.config import schema
from mnframe.config.issues import ConfigIssue, join_path, raise_issues, suggest, unknown_key_issue
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


def _model_without_target(name: str, value: Any) -> List[ConfigIssue]:
    """``model: {n_units: 50}``: without ``_target_`` the keys are read as named models
    (dcgan's gen/dis), which gave "Input should be a valid dictionary or instance of
    Component"; say what the user most likely meant instead (issue 38)."""
    if name != "model" or not isinstance(value, dict) or "_target_" in value:
        return []
    plain = sorted(str(k) for k, v in value.items() if not isinstance(v, dict))
    if not plain:
        return []  # named models: their own issues say what is wrong inside them
    return [
        ConfigIssue(
            "model",
            f"no _target_, so its keys are read as named models and {', '.join(plain)} is not one; "
            "add `_target_: your_module.YourModel` to the model section, or pick a model option in your "
            "recipe's defaults (`- override /model: mlp`, or model=mlp on the command line) and set only its keys",
        )
    ]


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
        issues = _model_without_target(name, value) or issues_from_validation(err, value, name, field.annotation)
        bad = {e["loc"][0] for e in err.errors() if e["loc"]}
    model = field.annotation
    if inspect.isclass(model) and issubclass(model, BaseModel) and isinstance(value, dict):
        try:
            return model.model_validate({k: v for k, v in value.items() if k not in bad}), issues
        except ValidationError:
            pass
    return _INVALID, issues


def read_sections(raw: Dict[str, Any], has_cuda: bool) -> Tuple[Dict[str, Any], Dict[str, Any], List[ConfigIssue]]:
    """Pass 1 on the whole config: ``(raw, sections, issues)``.

    ``raw`` has ``communicator: auto`` resolved; ``sections`` maps each section
    that is well formed (or was left out: its default) to its typed model, so the
    later passes check it even when another section is broken."""
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
    return raw, sections, issues


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
    return {**raw, "communicator": {**comm, "name": name_for_device(device), "chosen_by_auto": True}}


# -- pass 3 on what the schema alone says ----------------------------------------


def device_issues(s: Dict[str, Any], has_cuda: bool) -> Tuple[str, List[ConfigIssue]]:
    """``(device, issues)``: the training device (``auto`` resolved) and whether it exists."""
    issues: List[ConfigIssue] = []
    device = s["trainer"].device if "trainer" in s else "cpu"
    if device == "gpu" and not has_cuda:
        issues.append(ConfigIssue("trainer.device", "no CUDA GPU (CuPy) found", value="gpu", allowed="cpu, auto"))
    return cuda_env.training_device(device, has_cuda), issues


def topology_issues(
    topo: Any, world_size: Optional[int], dataset: Any = None
) -> Tuple[Optional[int], List[ConfigIssue]]:
    """``(data-parallel width, issues)``: a model-parallel rank graph fits the world
    (``world_size=None``: not checked), cannot deadlock, and its data, labels and loss
    agree with ``dataset`` (``topology.check_graph``)."""
    if not isinstance(topo, schema.ModelParallelTopology):
        return world_size, []
    group = topo.group_size
    issues: List[ConfigIssue] = []
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
    issues += check_graph(topo, dataset, world_size).issues
    return (None if world_size is None else max(1, world_size // group)), issues
