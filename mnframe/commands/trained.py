"""A trained run, rebuilt on every rank: the run's own ``config.yaml`` (plus overrides),
the communicators, the model, and its weights from ``model*.npz`` or a checkpoint.

``evaluate`` and ``predict`` (``python -m mnframe evaluate|predict RUN_DIR``) share
this. Rank 0 reads the run directory and broadcasts the configuration; every rank
validates it and the ranks agree (``cli.agree_on_config``), so a bad override is one
line naming the key on every rank. The weights come from the files the run exported
(``checkpoint.export``: ``model.npz``, ``model_<name>.npz``, ``model_rank<r>.npz``),
or from a checkpoint by name (``last`` = the newest complete one), which is also the
fallback of an interrupted run that exported nothing. ``load_weights`` is the one
place a model file is read (no pickle, bounded: ``mnframe._internal.npz_read``); a file that does not fit the
model built from the config is refused naming the parameter, on every rank.
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, NamedTuple, Optional, Sequence

import numpy as np

from mnframe.runtime.errors import ConfigError, agreed

LAST = "last"  # --checkpoint last: the newest complete checkpoint


def apply_overrides(config: Dict[str, Any], overrides: Sequence[str]) -> Dict[str, Any]:
    """``key=value`` overrides (values parsed as YAML, as Hydra does) on a resolved config."""
    from omegaconf import OmegaConf

    for item in overrides:
        key, sep, _ = item.partition("=")
        if not sep or not key or key.startswith(("+", "~")):
            raise ConfigError(f"override {item!r}: write key=value (a key of the run's config.yaml)")
    merged = OmegaConf.merge(OmegaConf.create(config), OmegaConf.from_dotlist(list(overrides)))
    return OmegaConf.to_container(merged, resolve=True)


def read_run_config(run_dir: str, overrides: Sequence[str], trust_config: bool = False) -> str:
    """The YAML of the run's ``config.yaml`` with ``overrides`` applied (ConfigError when unreadable,
    ``UntrustedConfig`` when it names code outside mnframe and its recipes without ``trust_config``)."""
    from mnframe.config import trust
    from mnframe.config.compose import from_yaml, to_yaml

    path = os.path.join(run_dir, "config.yaml")
    if not os.path.isdir(run_dir):
        raise ConfigError(f"run directory {run_dir} does not exist: give the directory of a training run")
    if not os.path.isfile(path):
        raise ConfigError(f"{path} not found: {run_dir} is not a run directory (or its job never started)")
    try:
        config = from_yaml(open(path).read())
    except Exception as exc:
        raise ConfigError(f"{path} cannot be read: {exc}") from None
    trust.check(config, path, trust_config, overridden=overrides)  # before anything is imported
    return to_yaml(apply_overrides(config, overrides))


def shared_run_config(world, run_dir: str, overrides: Sequence[str], trust_config: bool = False) -> str:
    """Rank 0 reads the run's config; every rank gets it, or the same ConfigError."""
    from mnframe.communicators.host_collectives import bcast_obj

    message = None
    if world.rank == 0:
        try:
            message = (read_run_config(run_dir, overrides, trust_config), None)
        except ConfigError as exc:
            message = (None, str(exc))
    yaml_text, error = bcast_obj(world, message, name="trained.config")
    if error:
        raise ConfigError(error)
    return yaml_text


# -- weights ------------------------------------------------------------------------


def load_weights(path: str, link, prefix: str = "") -> Optional[str]:
    """Load ``link``'s parameters and persistents from the ``.npz`` at ``path`` (keys under
    ``prefix``); return None, or why the file does not fit ``link``, naming the parameter.

    The one function that reads a model file: through ``mnframe._internal.npz_read`` (no pickle,
    bounded sizes, checked entry names)."""
    import chainer

    from mnframe._internal.npz_read import SafeNpz

    where = os.path.basename(path) + (f" ({prefix.rstrip('/')})" if prefix else "")
    wanted = {name.lstrip("/"): param for name, param in link.namedparams()}
    try:
        with SafeNpz(path) as archive:
            keys = [k for k in archive.files if k.startswith(prefix)]
            for name, param in wanted.items():  # the declared shapes first: nothing larger is allocated
                declared = archive.declared(prefix + name)[0] if prefix + name in archive else None
                if declared is not None and param.array is not None and declared != tuple(param.shape):
                    return (
                        f"parameter {name} has shape {declared} in {where} but "
                        f"{tuple(param.shape)} in the model built from config.yaml: the model settings "
                        f"(model.* / topology) differ from the run that wrote it"
                    )
            arrays = {k[len(prefix) :]: archive[k] for k in keys}
    except Exception as exc:
        return f"{path} cannot be read as a model file ({type(exc).__name__}: {exc})"
    for name, param in wanted.items():
        if name not in arrays:
            return (
                f"parameter {name} of the model built from config.yaml is not in {where}: the model "
                f"settings (model.* / topology) differ from the run that wrote it"
            )
        if param.array is not None and tuple(param.shape) != tuple(arrays[name].shape):
            return (
                f"parameter {name} has shape {tuple(arrays[name].shape)} in {where} but "
                f"{tuple(param.shape)} in the model built from config.yaml: the model settings "
                f"(model.* / topology) differ from the run that wrote it"
            )
    persistent = {n.lstrip("/") for n, _ in _named_persistents(link)}
    extra = sorted(k for k in arrays if k not in wanted and k not in persistent)
    if extra:
        return (
            f"{where} holds parameter {extra[0]} that the model built from config.yaml does not have: "
            f"the model settings (model.* / topology) differ from the run that wrote it"
        )
    try:
        chainer.serializers.NpzDeserializer(arrays, strict=True).load(link)
    except Exception as exc:
        return f"{where} does not fit the model built from config.yaml ({type(exc).__name__}: {exc})"
    return None


def _named_persistents(link):
    for path, sub in link.namedlinks():
        for name in getattr(sub, "_persistent", ()):
            yield f"{path.rstrip('/')}/{name}", getattr(sub, name)


def weight_source(run_dir: str, cfg, comms, user: Dict[str, Any], checkpoint: Optional[str]):
    """{model name: (path, prefix)} for this rank: the exported files, or a checkpoint
    (by name, or the newest when the run exported nothing); collective."""
    from mnframe.builder.model import rank_plan
    from mnframe.checkpoint.model_files import export_file_names
    from mnframe.checkpoint.store import CheckpointStore
    from mnframe.checkpoint.trainer_io import rank_file

    plan = rank_plan(cfg, comms)
    files = export_file_names(user, None if plan is None else comms.model.rank)
    exported = {name: os.path.join(run_dir, f) for f, name in files.items()}
    have_all = all(os.path.isfile(p) for p in exported.values())
    if checkpoint is None and all(world_bool for world_bool in _allgather(comms.world, have_all)):
        return {name: (path, "") for name, path in exported.items()}, ", ".join(sorted(files))
    store = CheckpointStore(os.path.join(run_dir, cfg.checkpoint.dir), comms.world, base=run_dir)
    if checkpoint is None:
        missing = sorted(f for f, n in files.items() if not os.path.isfile(exported[n]))
        why = f"{', '.join(missing)} not found in {run_dir} (an interrupted run?)"
        chosen = store.select("auto")
        if chosen is None:
            raise ConfigError(f"{why} and no complete checkpoint in {store.root}: nothing to load")
    else:
        names = [n for n, _ in store.scan()]
        if checkpoint != LAST and checkpoint not in names:
            raise ConfigError(
                f"--checkpoint {checkpoint}: no such checkpoint in {store.root}; available: "
                f"{', '.join(names) or 'none'} (or --checkpoint last for the newest)"
            )
        chosen = store.select("must", None if checkpoint == LAST else checkpoint)
    name, manifest = chosen
    if plan is not None and manifest.world_size != comms.world.size:
        raise ConfigError(
            f"checkpoint {name} was written by {manifest.world_size} ranks; a model-parallel run "
            f"loads it on as many: start with mpiexec -n {manifest.world_size}"
        )
    path = os.path.join(store.path(name), rank_file(0 if plan is None else comms.world.rank))
    return {m: (path, f"updater/model:{m}/") for m in user}, f"checkpoint {name}"


def _allgather(world, value):
    from mnframe.communicators.host_collectives import allgather_obj

    return allgather_obj(world, value, name="trained.allgather")


class Trained(NamedTuple):
    """A rebuilt run on this rank."""

    cfg: Any  # RunConfig
    config: Dict[str, Any]  # the plain config it was validated from
    comms: Any
    device: Any
    models: Dict[str, Any]  # as the trainer had them (a Classifier around "main" where configured)
    user: Dict[str, Any]  # the user's links (what model*.npz holds)
    plan: Any  # this rank's RankPlan (model parallelism) or None
    source: str  # where the weights came from (for the record)


def with_import_hint(text: str) -> str:
    """A message about a run's ``_target_`` that does not import, with where this command looked:
    the working directory and PYTHONPATH (the run's own code is found there, not in the run)."""
    if "_target_: cannot import module" not in text:
        return text
    path = f"PYTHONPATH={os.environ['PYTHONPATH']}" if os.environ.get("PYTHONPATH") else "PYTHONPATH unset"
    return (
        f"{text}\nThe run's code is imported from the working directory ({os.getcwd()}) and "
        f"{path}: run this command from the directory the run was trained in, or add the directory "
        "holding that module to PYTHONPATH (PYTHONPATH=/path/to/project python -m mnframe ...)."
    )


def build_trained(
    world, run_dir: str, overrides: Sequence[str], checkpoint: Optional[str], has_cuda: bool, trust_config: bool = False
) -> Trained:
    """The run's model on every rank, its weights loaded (ConfigError on every rank otherwise)."""
    from mnframe.builder.communicator import build_communicators
    from mnframe.builder.model import build_models, rank_plan, user_models
    from mnframe.builder.placement import select_device
    from mnframe.commands.cli import agree_on_config
    from mnframe.communicators.host_collectives import share_verdict
    from mnframe.communicators.verdict import first
    from mnframe.pipeline import seed_everything
    from mnframe.runtime import threads

    yaml_text = shared_run_config(world, run_dir, overrides, trust_config)
    try:
        cfg, config, _ = agree_on_config(world, yaml_text, has_cuda)
    except ConfigError as exc:  # raised on every rank: so is the longer one
        raise agreed(ConfigError(with_import_hint(str(exc)))) from None
    comms = build_communicators(cfg.communicator, cfg.topology)
    device = select_device(cfg.trainer.device, comms.world)
    seed_everything(cfg.seed, device)
    threads.configure(cfg.trainer.threads, comms.world, on_cpu=device.xp is np)
    models = build_models(cfg, comms)
    user = user_models(cfg, comms, models)
    sources, label = weight_source(run_dir, cfg, comms, user, checkpoint)
    error = None
    for name, (path, prefix) in sources.items():
        target = models[name] if prefix else user[name]  # a checkpoint holds the trainer's (wrapped) model
        error = error or load_weights(path, target, prefix)
    share_verdict(comms.world, error, "trained", ConfigError, first)  # the first rank's error, one line
    for model in models.values():
        model.to_device(device)
    return Trained(cfg, config, comms, device, models, user, rank_plan(cfg, comms), label)


def open_run(world, args, has_cuda: bool, command: str) -> Trained:
    """``build_trained`` for a command on ``args.run_dir`` (evaluate, predict), which runs the model
    named ``main``: ConfigError on every rank when the recipe has none."""
    trust = getattr(args, "trust_config", False)
    trained = build_trained(world, os.path.abspath(args.run_dir), args.overrides, args.checkpoint, has_cuda, trust)
    if "main" not in trained.user:
        raise ConfigError(f"{command} runs the model named main; this recipe's models are {', '.join(trained.user)}")
    return trained


def shard_bounds(n: int, comm) -> List[int]:
    """[begin, end) of this data-parallel rank's contiguous, in-order shard of ``n`` examples."""
    from mnframe.datasets.scatter import scatter_index

    begin, end = scatter_index(n, comm, force_equal_length=False)  # no padding: each example once
    return [begin, end]
