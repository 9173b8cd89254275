"""The trained model's files, written and read as data only: ``model*.npz`` and ``model*.safetensors``.

``load_model(run_dir)`` is *the* way to read a trained model back: it builds the
user's model from the run's ``config.yaml`` (its ``model`` section, or one model-parallel
rank's stages) and loads the parameters with ``load_params``, which reads either
format without pickle: ``.safetensors`` through the ``safetensors`` package (a
format that cannot carry code), ``.npz`` through ``mnframe._internal.npz_read`` (bounded,
no object arrays). Commands that load models (evaluate, predict) should call these
two functions rather than ``chainer.serializers.load_npz``, which allows pickles.

``save_safetensors(path, link)`` writes a link's parameters and persistent values
under Chainer's keys (``l1/W``); Chainer's ``None`` (an uninitialized parameter) and
string persistents go into the file's metadata (JSON), as safetensors holds numbers only.

Building the model runs the ``_target_`` callables the config names (Hydra's design):
pass ``config=`` your own configuration to load a file from someone else's run.
"""

import json
import os

import numpy

from mnframe._internal.npz_read import UnsafeFile
from mnframe.runtime.errors import ConfigError

__all__ = ["save_safetensors", "load_params", "load_model", "model_file"]

FORMAT_TAG = "mnframe-chainer"
SUFFIXES = (".safetensors", ".npz")


def _arrays(link):
    from chainer.serializers.npz import DictionarySerializer

    serializer = DictionarySerializer()
    serializer.save(link)
    return serializer.target


def save_safetensors(path, link):
    """Write ``link``'s parameters and persistents into ``path`` (a ``.safetensors`` file)."""
    from safetensors.numpy import save_file

    tensors, none, strings = {}, [], {}
    for key, value in _arrays(link).items():
        array = numpy.asarray(value)
        if array.dtype.hasobject and array.shape == () and array[()] is None:
            none.append(key)
        elif array.dtype.kind in "biuf":
            tensors[key] = numpy.ascontiguousarray(array)
        elif array.dtype.kind == "U" and array.shape == ():
            strings[key] = str(array[()])
        else:
            raise ValueError(f"cannot write {key!r} ({array.dtype}) into {path}: safetensors holds numbers only")
    metadata = {"format": FORMAT_TAG, "none": json.dumps(sorted(none)), "strings": json.dumps(strings)}
    save_file(tensors, os.fspath(path), metadata=metadata)


def _read_safetensors(path):
    from safetensors import SafetensorError, safe_open

    try:
        arrays = {}
        with safe_open(os.fspath(path), framework="np") as f:
            metadata = f.metadata() or {}
            for key in f.keys():
                arrays[key] = f.get_tensor(key)
        none = json.loads(metadata.get("none", "[]"))
        strings = json.loads(metadata.get("strings", "{}"))
    except (SafetensorError, OSError, ValueError) as exc:
        raise UnsafeFile(f"{path} is not a readable .safetensors file ({' '.join(str(exc).split())})") from None
    for key in none if isinstance(none, list) else []:
        arrays[str(key)] = numpy.asarray(None, dtype=object)  # made here, never unpickled
    for key, value in strings.items() if isinstance(strings, dict) else ():
        arrays[str(key)] = numpy.asarray(str(value))
    return arrays


def load_params(path, link, strict=True):
    """Load the parameters in ``path`` (``.safetensors`` or ``.npz``, as mnframe writes them) into ``link``.

    Nothing in the file can run code; a file that is not data (an object array, a pickle,
    a size it does not hold) raises ``UnsafeFile`` (a ConfigError) naming the file and entry.
    Returns ``link``."""
    from chainer.serializers.npz import NpzDeserializer

    path = os.fspath(path)
    if path.endswith(".safetensors"):
        NpzDeserializer(_read_safetensors(path), strict=strict).load(link)
    else:
        from mnframe._internal.npz_read import load_npz

        load_npz(path, link, strict=strict)
    return link


def export_file_names(models, model_rank=None):
    """{file name: model name} for this rank's models (``model_rank`` for model parallelism)."""
    if model_rank is not None:
        return {f"model_rank{model_rank}.npz": name for name in models}
    if list(models) == ["main"]:
        return {"model.npz": "main"}
    return {f"model_{name}.npz": name for name in models}


def model_file(run_dir, name="main", model_rank=None, fmt="auto"):
    """The path of a run's exported model ``name`` (``model_rank`` for model parallelism).

    ``fmt``: ``safetensors``, ``npz``, or ``auto`` (safetensors when present)."""
    names = {model: file for file, model in export_file_names([name], model_rank).items()}
    base = os.path.join(os.fspath(run_dir), names[name][: -len(".npz")])
    suffixes = {"auto": SUFFIXES, "safetensors": (".safetensors",), "npz": (".npz",)}.get(fmt)
    if suffixes is None:
        raise ConfigError(f"format {fmt!r}: expected auto, safetensors or npz")
    for suffix in suffixes:
        if os.path.isfile(base + suffix):
            return base + suffix
    raise ConfigError(
        f"no trained model {os.path.basename(base)}{'|'.join(suffixes)} in {run_dir}: the run did not finish "
        f"(resume it) or this is not its run directory"
    )


def _read_config(run_dir, config, trust_config=False):
    from mnframe.builder.validate import validate
    from mnframe.config import trust
    from mnframe.config.compose import from_yaml

    if config is None or isinstance(config, (str, os.PathLike)):
        path = os.fspath(config) if config is not None else os.path.join(os.fspath(run_dir), "config.yaml")
        try:
            with open(path, encoding="utf-8") as f:
                config = from_yaml(f.read())  # yaml.safe_load: data only
        except OSError as exc:
            raise ConfigError(f"cannot read the run's configuration {path}: {exc.strerror or exc}") from None
        if config is not None and path == os.path.join(os.fspath(run_dir), "config.yaml"):
            # the run's own config may come from someone else: nothing foreign imported unless trusted
            trust.check(config, path, trust_config, flag="trust_config=True")
    return validate(dict(config), world_size=None)


def build_user_model(cfg, name="main", model_rank=None):
    """The user's link ``name`` (no Classifier) built from a validated RunConfig, without communicators."""
    import chainer

    from mnframe._internal.targets import declared_parameters
    from mnframe.builder.instantiate import instantiate
    from mnframe.builder.model import COMMUNICATOR_PARAMETERS
    from mnframe.config.schema import Component, DataParallelTopology

    def build(component, path):
        wanted = declared_parameters(component.target, COMMUNICATOR_PARAMETERS)
        if wanted:
            raise ConfigError(
                f"{path}: {component.target} takes a communicator ({', '.join(sorted(wanted))}); build the "
                f"model yourself and call mnframe.checkpoint.model_files.load_params(path, model)"
            )
        return instantiate(component, path=path)

    if isinstance(cfg.topology, DataParallelTopology):
        if model_rank is not None:
            raise ConfigError("model_rank is for model-parallel runs; this run is data parallel")
        if isinstance(cfg.model, Component):
            if name != "main":
                raise ConfigError(f"this run has one model, 'main' (asked for {name!r})")
            return build(cfg.model, "model")
        models = dict(cfg.model or {})
        if name not in models:
            raise ConfigError(f"this run has no model {name!r}; it has {', '.join(map(repr, models))}")
        return build(models[name], f"model.{name}")
    ranks = cfg.topology.ranks
    if model_rank is None or not 0 <= model_rank < len(ranks):
        raise ConfigError(f"a model-parallel run writes one file per rank: pass model_rank=0..{len(ranks) - 1}")
    stages = [
        build(stage.module, f"topology.ranks.{model_rank}.stages.{i}.module")
        for i, stage in enumerate(ranks[model_rank].stages)
    ]
    return chainer.ChainList(*stages)


def load_model(run_dir, name="main", model_rank=None, fmt="auto", config=None, trust_config=False):
    """The trained model of the run in ``run_dir``, built from its configuration and loaded safely.

    ``config``: the configuration to build it from (a path to a YAML file or a dict;
    default ``run_dir/config.yaml``). ``name`` picks one of a recipe's named models,
    ``model_rank`` one rank's stages of a model-parallel run (a ``ChainList``).
    The run's own ``config.yaml`` may name only mnframe's and the recipes' ``_target_``s
    unless ``trust_config=True`` (``mnframe.config.trust``; your own ``config=`` is trusted).
    """
    cfg = _read_config(run_dir, config, trust_config)
    model = build_user_model(cfg, name, model_rank)
    return load_params(model_file(run_dir, name, model_rank, fmt), model)
