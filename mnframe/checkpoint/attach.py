"""``attach``: everything the runner needs for checkpoints, preemption and resume, in one call."""

import os

from mnframe.checkpoint.extension import CheckpointExtension
from mnframe.checkpoint.layout import make_layout
from mnframe.checkpoint.resume import resume as resume_checkpoint
from mnframe.checkpoint.store import CheckpointStore
from mnframe.config.schema_checkpoint import CheckpointConfig, ResumeMode
from mnframe.runtime import watchdog


def attach(
    trainer,
    cfg_section,
    run_dir,
    comm,
    config_hash=None,
    config=None,
    on_nonfinite="stop",
    topology=None,
    resume: ResumeMode = "auto",
    divergence_factor=1.0e4,
    divergence_warmup=10,
):
    """Install checkpointing on ``trainer`` and resume it if a checkpoint applies (collective).

    Call it after every other extension has been added (their states are
    restored here, before ``trainer.run()``). ``cfg_section`` is a
    CheckpointConfig (or a dict of its fields); ``config`` (a plain dict of the
    whole run configuration) is stored in the manifest so a later resume can
    show what changed. ``on_nonfinite``: ``stop`` ends training at a non-finite loss
    (``trainer.on_nonfinite``; see divergence.py), ``ignore`` does not look; ``divergence_factor``
    and ``divergence_warmup`` set the rule for a finite loss that runs away (None: off).
    ``topology`` (the topology section, a model or dict; default: ``config['topology']``,
    else data parallel) gives the layout recorded in each manifest (mnframe.checkpoint.layout),
    so ``comm`` must be the world communicator. ``resume``: ``auto`` (the newest good
    checkpoint if any), ``must`` (fail, status 2, if none) or ``never`` (start fresh).
    Returns the CheckpointExtension; its ``resumed_from`` names the checkpoint loaded (None
    for a fresh start) and ``preempted`` says whether the run stopped for a preemption signal.
    """
    cfg = (
        cfg_section if isinstance(cfg_section, CheckpointConfig) else CheckpointConfig.model_validate(cfg_section or {})
    )
    watchdog.set_report_dir(run_dir)
    store = CheckpointStore(os.path.join(os.fspath(run_dir), cfg.dir), comm, base=run_dir)
    if topology is None and isinstance(config, dict):
        topology = config.get("topology")
    store.layout = make_layout(comm.size, topology)
    ext = CheckpointExtension(
        store,
        comm,
        cfg.interval,
        keep=cfg.keep,
        config_hash=config_hash,
        config=config,
        preemption_enabled=cfg.preemption,
        on_nonfinite=on_nonfinite,
        async_save=cfg.async_save,
        divergence_factor=divergence_factor,
        divergence_warmup=divergence_warmup,
    )
    ext.bind(trainer)
    trainer.extend(ext, name=ext.name, trigger=ext.trigger, priority=ext.priority)
    ext.resumed_from = resume_checkpoint(trainer, store, cfg, resume, config_hash=config_hash, config=config)
    store.ensure_run_id()  # a fresh run (or one resumed from a checkpoint without one) gets its identity
    return ext
