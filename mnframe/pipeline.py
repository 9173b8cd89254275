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
import sys
import time
from typing import Any, Callable, Dict, NamedTuple, Optional

import numpy as np

from mnframe.builder.communicator import build_communicators
from mnframe.builder.data import build_data, per_rank_batch_size
from mnframe.builder.extensions import ExtensionContext, add_extensions
from mnframe.builder.memory import describe as describe_memory
from mnframe.builder.model import build_models, rank_plan, user_models
from mnframe.builder.optimizer import build_optimizer, schedule_extension
from mnframe.builder.placement import select_device
from mnframe.builder.updater import build_updater
from mnframe.config.schema import ModelParallelTopology, RunConfig
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
    timer: Any = None  # debug=profile: the updater's PhaseTimer


def build_trainer(
    cfg: RunConfig, run_dir: str, config: Optional[Dict[str, Any]] = None, config_hash: Optional[str] = None
) -> Job:
    """Everything up to ``trainer.run()`` (the checkpoint loaded when resuming)."""
    from chainer import training

    from mnframe.checkpoint.accumulate import resolve_auto
    from mnframe.training.debug import NoCheckpoint
    from mnframe.training.micro_batch import PhaseTimer

    comms = build_communicators(cfg.communicator, cfg.topology)
    if isinstance(cfg.topology, ModelParallelTopology):  # before the seed: rank 0 builds every stage
        from mnframe.builder.shapes import check_before_training

        check_before_training(cfg, comms.world)
    device = select_device(cfg.trainer.device, comms.world)
    seed_everything(cfg.seed, device)
    threads.configure(cfg.trainer.threads, comms.world, on_cpu=device.xp is np)
    plan = rank_plan(cfg, comms)  # None for data parallelism
    empty = plan is not None and plan.dataset == "empty"
    data = build_data(cfg.dataset, comms, cfg.seed, empty=empty, overfit_batches=cfg.debug.overfit_batches)
    models = build_models(cfg, comms)
    for model in models.values():
        model.to_device(device)
    data_parallel = not isinstance(cfg.topology, ModelParallelTopology)
    optimizers = {
        name: build_optimizer(cfg.optimizer, model, comms.data, cfg.communicator, data_parallel)
        for name, model in models.items()
    }
    log.info("%s", describe_memory(models))
    micro_batch = per_rank_batch_size(cfg.dataset, comms.data.size) * comms.data.size  # one micro-batch, all ranks
    timer = PhaseTimer() if cfg.debug.profile else None
    updater = build_updater(cfg.updater, data.train_iter, optimizers, device, micro_batch=micro_batch, timer=timer)
    trainer = training.Trainer(updater, tuple(cfg.trainer.stop), out=cfg.trainer.out or run_dir)

    main_model = models.get("main", next(iter(models.values())))
    ctx = ExtensionContext(
        model=main_model,
        optimizer=optimizers.get("main"),
        test_iter=data.test_iter,
        device=device,
        data_comm=comms.data,
        rank=comms.world.rank,
        config=config,
    )
    add_extensions(trainer, cfg.extensions, ctx)
    if isinstance(cfg.topology, ModelParallelTopology):  # the loss on another rank: its metrics to rank 0
        from mnframe.extensions.loss_rank_report import LossRankReport, loss_rank_to_report

        loss_rank = loss_rank_to_report(cfg.topology.ranks)
        if loss_rank > 0:
            trainer.extend(LossRankReport(comms.model, loss_rank), name="loss_rank_report")
    schedule = schedule_extension(cfg.optimizer, next(iter(optimizers.values())))
    if schedule is not None:
        extension, trigger = schedule
        trainer.extend(extension, trigger=trigger)
    if cfg.debug.mode == "fast":  # nothing resumed, nothing written
        checkpoint = NoCheckpoint()
    else:
        checkpoint = attach_checkpoints(trainer, cfg, run_dir, comms.world, config, config_hash)
    if cfg.updater.accumulate == "auto":
        resolve_auto(updater, micro_batch, checkpoint, comms.world.rank)
    log.info("built: %s topology, %d data-parallel rank(s), device %s", cfg.topology.kind, comms.data.size, device)
    return Job(trainer, checkpoint, models, comms, timer)


def attach_checkpoints(trainer, cfg: RunConfig, run_dir, comm, config, config_hash):
    """Atomic checkpoints + resume + preemption (mnframe.checkpoint); last, after extensions."""
    from mnframe.checkpoint.attach import attach

    return attach(
        trainer,
        cfg.checkpoint,
        run_dir,
        comm,
        config_hash=config_hash,
        config=config,
        on_nonfinite=cfg.trainer.on_nonfinite,
        resume=cfg.resume,
        divergence_factor=cfg.trainer.divergence_factor,
        divergence_warmup=cfg.trainer.divergence_warmup,
    )


def finish(cfg: RunConfig, job: Job, run_dir: str, seconds: float = 0.0) -> None:
    """After training: a checkpoint of the last iteration (normally written inside the loop
    already) and the model as ``model*.npz``, then one summary line on rank 0. A run that
    diverged or was interrupted (Ctrl-C) ends with its own status instead (every rank)."""
    from mnframe.checkpoint.export import export_models
    from mnframe.runtime.errors import Interrupted, TrainingDiverged
    from mnframe.training import summary

    ckpt = job.checkpoint
    ckpt.save_final(job.trainer)
    if job.timer is not None:
        from mnframe.training.debug import report_profile

        report_profile(job.timer, job.comms.world, run_dir)
    if ckpt.diverged:
        raise TrainingDiverged(ckpt.diverged)
    if ckpt.preempted:  # stopped early: the checkpoint is what to resume from
        if ckpt.interrupted:
            raise Interrupted(
                f"interrupted at iteration {job.trainer.updater.iteration}; checkpoint "
                f"{ckpt.store.path(ckpt.last_saved)} written; run the same command to resume "
                f"(with hydra.run.dir={run_dir})"
            )
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
    if job.comms.world.rank == 0:
        models = paths if plan is None else [os.path.join(run_dir, "model_rank*.npz")]
        sys.stderr.write(summary.line(job.trainer, seconds, models, run_dir) + "\n")
        sys.stderr.flush()


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
    started = time.monotonic()
    job.trainer.run(show_loop_exception_msg=False)  # the guard reports a failure (a traceback, or one line)
    finish(cfg, job, run_dir, time.monotonic() - started)
    return job.trainer
