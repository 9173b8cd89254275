"""Resume a trainer from the newest good checkpoint, checking the layout and configuration first.

At another world size each rank loads its model-parallel stage's state (``reshard.plan``)."""

import sys

from mnframe._internal.npz_read import UnsafeFile
from mnframe.checkpoint import config_diff, reshard, signing
from mnframe.checkpoint.layout import make_layout
from mnframe.checkpoint.trainer_io import load_trainer
from mnframe.communicators import host_collectives
from mnframe.communicators.verdict import distinct
from mnframe.datasets import shuffle_seeds
from mnframe.runtime.errors import ConfigError


def _say(comm, text):
    if comm.rank == 0:
        sys.stderr.write(f"mnframe checkpoint: {text}\n")
        sys.stderr.flush()


def check_config(comm, manifest, name, config_hash, config, allow_unsafe):
    """Show what changed since checkpoint ``name``; refuse unsafe changes (same verdict on every rank)."""
    if config is not None and manifest.config is not None:
        changes = config_diff.diff(manifest.config, config)
        if not changes:
            return
        unsafe = [k for k, _, _ in changes if config_diff.is_unsafe(k)]
        text = f"configuration changed since checkpoint {name} ('!' = unsafe):\n" + config_diff.format_diff(changes)
        if unsafe and not allow_unsafe:
            raise ConfigError(
                f"{text}\nRefusing to resume: {', '.join(unsafe)} changed. Restore them, "
                f"start a new run directory, or set checkpoint.allow_unsafe_config_change=true."
            )
        _say(comm, text)
    elif config_hash and manifest.config_hash and config_hash != manifest.config_hash:
        _say(
            comm,
            f"configuration hash changed since checkpoint {name} "
            f"({manifest.config_hash} -> {config_hash}); pass config= to attach() to see the difference",
        )


def model_fit(trainer, comm):
    """``fits(directory, manifest)`` for ``CheckpointStore.select``: why this rank's own file declares
    a parameter shape other than the model's (initialized parameters only; read from the headers,
    nothing loaded), or None. At another world size reshard's checks apply instead."""
    import os

    from mnframe._internal.npz_read import SafeNpz
    from mnframe.checkpoint.layout import rank_file

    expected = {}  # read from the parameters themselves: no serialize() (a user's may have side effects)
    for name, optimizer in getattr(trainer.updater, "get_all_optimizers", dict)().items():
        for path, param in optimizer.target.namedparams():
            if param.array is not None:
                expected[f"updater/model:{name}/{path.lstrip('/')}"] = tuple(param.shape)

    def fits(directory, manifest):
        if manifest.world_size != comm.size or not expected:
            return None
        path = os.path.join(directory, rank_file(comm.rank))
        with SafeNpz(path, stored_only=True) as npz:
            for key, shape in expected.items():
                if key in npz and npz.declared(key)[0] != shape:
                    return (
                        f"{path}: entry {key!r} has shape {npz.declared(key)[0]} but the model being resumed has "
                        f"{shape}, as the checkpoints before it have"
                    )
        return None

    return fits


def check_signature(comm, manifest, secret, where):
    """Refuse (UnsafeFile, status 2, on every rank) a checkpoint whose signature does not verify."""
    problem = signing.problem(manifest, secret, where)
    host_collectives.share_verdict(comm, problem, "checkpoint.signature", UnsafeFile, distinct)


def resume(trainer, store, cfg, mode="auto", config_hash=None, config=None):
    """Load the checkpoint chosen by ``mode`` (auto/must/never) and ``cfg`` (load/verify)
    into ``trainer``; return its name or None."""
    secret = signing.key()
    # a signature covers hashes; a newer checkpoint whose parameters do not fit the model is refused
    chosen = store.select(mode, cfg.load, cfg.verify or secret is not None, fits=model_fit(trainer, store.comm))
    if chosen is None:
        return None
    name, manifest = chosen
    comm = store.comm
    if secret is not None:
        check_signature(comm, manifest, secret, store.path(name))
    layout, where = store.layout or make_layout(comm.size), store.path(name)
    allow = cfg.allow_unsafe_config_change
    source, note = reshard.plan(comm, where, name, manifest, layout, allow, check=False)  # fits, or refused
    check_config(comm, manifest, name, config_hash, config, allow)
    if note:  # another world size: the replicas of each stage must agree (reads the old files)
        reshard.check_replicas(comm, where, name, manifest, layout, reshard.param_keys(trainer))
    load_trainer(store.path(name), manifest, trainer, comm, source=source)
    shuffle_seeds.restore(comm)  # the checkpointed scatter_dataset shards (after every rank loaded)
    _say(comm, f"resumed from {store.path(name)} (iteration {manifest.iteration}){'; ' + note if note else ''}")
    return name
