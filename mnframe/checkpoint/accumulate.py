"""``updater.accumulate=auto``: a resumed run keeps the global batch of the checkpoint it
resumed from, on however many ranks it now runs (``resolve_auto``, called by the pipeline
once the checkpoint is loaded). Here rather than in ``training.micro_batch`` because it reads
a checkpoint's manifest and the dataset builder's batch rule, which the updater class
itself must not import.
"""

from __future__ import annotations

import logging
from typing import Optional

from mnframe.builder.data import per_rank_batch_size
from mnframe.checkpoint.manifest import Manifest
from mnframe.config.issues import ConfigError
from mnframe.config.schema import DatasetConfig

log = logging.getLogger("mnframe.training")


def global_batch_of(config, world_size: int) -> Optional[int]:
    """The global batch (per update) of the run a checkpoint manifest describes, or None
    when its config does not say (``accumulate=auto``: the updater saved it then)."""
    if not isinstance(config, dict) or not isinstance(config.get("dataset"), dict):
        return None
    accumulate = (config.get("updater") or {}).get("accumulate", 1)
    if not isinstance(accumulate, int):
        return None
    topology = config.get("topology") or {}
    group = len(topology.get("ranks") or ()) if topology.get("kind") == "model_parallel" else 1
    data_width = max(1, world_size // max(1, group))
    dataset = DatasetConfig.model_validate(config["dataset"])
    return per_rank_batch_size(dataset, data_width) * data_width * accumulate


def resolve_auto(updater, micro_batch: int, checkpoint, rank: int = 0) -> int:
    """``updater.accumulate=auto``: accumulate as many micro-batches (``micro_batch``
    examples over all data-parallel ranks) as the global batch of the checkpoint the
    run resumed from needs; 1 on a fresh start. Every rank computes the same from the
    same files, so all raise the same ConfigError when it does not divide."""
    target = updater.saved_global_batch
    if target is None and checkpoint is not None and checkpoint.resumed_from:
        manifest = Manifest.read(checkpoint.store.path(checkpoint.resumed_from))
        target = global_batch_of(manifest.config, manifest.world_size)
    if target is None:
        target = micro_batch
    if target % micro_batch:
        raise ConfigError(
            f"updater.accumulate: auto cannot keep the checkpoint's global batch of {target} examples with "
            f"{micro_batch} per micro-batch over all ranks (got 'auto'); allowed: a rank count whose micro-batch "
            f"divides {target}, or set updater.accumulate=N and dataset.batch_size yourself"
        )
    updater.accumulate = target // micro_batch
    updater.global_batch = target
    if rank == 0:
        log.info(
            "updater.accumulate=auto: %d micro-batch(es) of %d examples per update (global batch %d)",
            updater.accumulate,
            micro_batch,
            target,
        )
    return updater.accumulate
