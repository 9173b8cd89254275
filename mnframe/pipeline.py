"""What ``python -m mnframe`` does with a validated config, top to bottom.

    config -> communicators -> device (and CPU thread pools) -> dataset and iterators -> model
           -> multi-node optimizer -> updater, trainer, extensions, checkpoints -> run
           -> a checkpoint of the last iteration and the trained model (model*.npz)

Each step is one builder in ``mnframe.builder`` taking its typed config section
(``mnframe.config.schema``); this module only wires them together. Every rank
runs it with the same config (the CLI made sure of that).
"""

from __future__ import annotations

import logging
import os
import random
from typing import Any, Callable, Dict, NamedTuple, Optional

import numpy as np

from mnframe.builder.communicator import build_communicators
from mnframe.builder.data import build_data
from mnframe.builder.device import select_device
from mnframe.builder.extensions import ExtensionContext, add_extensions
from mnframe.builder.memory import describe as describe_memory
from mnframe.builder.model import build_models, rank_plan, user_models
from mnframe.builder.optimizer import build_optimizer, schedule_extension
from mnframe.builder.updater import build_updater
from mnframe.config.schema import RunConfig
from mnframe.runtime import threads

log = logging.getLogger("mnframe.pipeline")


def seed_everything(seed: int, device=None) -> None:
    """The same seed on every rank: identical initial weights and shuffles (and CuPy's
    generator of the rank's GPU when ``device`` is one: dropout on the GPU)."""
    random.seed(seed)
    np.random.seed(seed)
    if device is not None and device.xp is not np:
        from mnframe.checkpoint.rng import seed_cupy

        seed_cupy(seed)


class Job(NamedTuple):
    """What ``build_trainer`` built: the trainer, its checkpoint extension, this rank's models
    and the communicators."""

    trainer: Any
    checkpoint: Any
    models: Dict[str, Any]
    comms: Any


def build_trainer(
    cfg: RunConfig, run_dir: str, config: Optional[Dict[str, Any]] = None, config_hash: Optional[str] = None
) -> Job:
    """Everything up to ``trainer.run()`` (the checkpoint loaded when resuming)."""
    from chainer import training

    comms = build_communicators(cfg.communicator, cfg.topology)
    device = select_device(cfg.trainer.device, comms.world)
    seed_everything(cfg.seed, device)
    threads.configure(cfg.trainer.threads, comms.world, on_cpu=device.xp is np)
    plan = rank_plan(cfg, comms)  # None for data parallelism
    data = build_data(cfg.dataset, comms, cfg.seed, empty=plan is not None and plan.dataset == "empty")
    models = build_models(cfg, comms)
    for model in models.values():
        model.to_device(device)
    optimizers = {name: build_optimizer(cfg.optimizer, model, comms.data) for name, model in models.items()}
    log.info("%s", describe_memory(models))
    updater = build_updater(cfg.updater, data.train_iter, optimizers, device)
    trainer = training.Trainer(updater, tuple(cfg.trainer.stop), out=cfg.trainer.out or run_dir)

    main_model = models.get("main", next(iter(models.values())))
    ctx = ExtensionContext(
        model=main_model,
        optimizer=optimizers.get("main"),
        test_iter=data.test_iter,
        device=device,
        data_comm=comms.data,
        rank=comms.world.rank,
    )
    add_extensions(trainer, cfg.extensions, ctx)
    schedule = schedule_extension(cfg.optimizer, next(iter(optimizers.values())))
    if schedule is not None:
        extension, trigger = schedule
        trainer.extend(extension, trigger=trigger)
    checkpoint = attach_checkpoints(trainer, cfg, run_dir, comms.world, config, config_hash)
    log.info("built: %s topology, %d data-parallel rank(s), device %s", cfg.topology.kind, comms.data.size, device)
    return Job(trainer, checkpoint, models, comms)


def attach_checkpoints(trainer, cfg: RunConfig, run_dir, comm, config, config_hash):
    """Atomic checkpoints + resume + preemption (mnframe.checkpoint); last, after extensions."""
    from mnframe.checkpoint.attach import attach

    section = cfg.checkpoint.model_copy(update={"resume": cfg.resume})
    return attach(trainer, section, run_dir, comm, config_hash=config_hash, config=config)


def finish(cfg: RunConfig, job: Job, run_dir: str) -> None:
    """After training: a checkpoint of the last iteration and the model as ``model*.npz``."""
    from mnframe.checkpoint.export import export_models

    job.checkpoint.save_final(job.trainer)
    if job.checkpoint.preempted:  # stopped early: the checkpoint is what to resume from
        return
    plan = rank_plan(cfg, job.comms)
    paths = export_models(
        run_dir,
        user_models(cfg, job.comms, job.models),
        writer=job.comms.data.rank == 0,
        world=job.comms.world,
        model_rank=None if plan is None else job.comms.model.rank,
    )
    for path in paths:
        log.info("trained model written to %s", path)


def run(
    cfg: RunConfig,
    run_dir: str,
    config: Optional[Dict[str, Any]] = None,
    config_hash: Optional[str] = None,
    on_start: Optional[Callable[[], None]] = None,
):
    """Build and run the training job of ``cfg``; returns the trainer.

    ``on_start`` is called once the job is built and its checkpoint accepted, just
    before training (the CLI records the run's configuration there)."""
    os.makedirs(run_dir, exist_ok=True)
    job = build_trainer(cfg, run_dir, config, config_hash)
    if on_start is not None:
        on_start()
    job.trainer.run(show_loop_exception_msg=False)  # the guard reports a failure (a traceback, or one line)
    finish(cfg, job, run_dir)
    return job.trainer
