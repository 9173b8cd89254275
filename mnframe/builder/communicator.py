"""Step 1: the communicator(s).

``communicator_table()`` is the name table ``communicator_issues`` checks
against (``mnframe.communicators.registry.COMMUNICATORS``). ``build_communicators``
creates the world communicator and, for a model-parallel topology, splits it
into the model-parallel group of this rank and the data-parallel group of
its replicas (dual parallelism)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from mnframe._internal.config_issue import unknown_name
from mnframe.communicators.factory import create_communicator
from mnframe.config.issues import ConfigIssue
from mnframe.config.schema import CommunicatorConfig, ModelParallelTopology


def communicator_table() -> Dict[str, Any]:
    """Communicator name -> info with ``needs_cuda`` and ``cpu_ok`` (import-light)."""
    from mnframe.communicators.registry import COMMUNICATORS

    return dict(COMMUNICATORS)


def communicator_issues(cfg: CommunicatorConfig, has_cuda: bool, device: Optional[str]) -> List[ConfigIssue]:
    """``communicator.name`` is in the table, and its device needs are met."""
    table = communicator_table()
    info = table.get(cfg.name)
    if info is None:
        return [unknown_name("communicator.name", "communicator", cfg.name, table)]
    issues = []
    if info.needs_cuda and not has_cuda:
        issues.append(
            ConfigIssue(
                "communicator.name",
                "this communicator needs a CUDA GPU (CuPy) and none was found",
                value=cfg.name,
                allowed=", ".join(sorted(n for n, i in table.items() if i.cpu_ok)),
            )
        )
    elif not info.cpu_ok and device == "cpu":
        issues.append(
            ConfigIssue(
                "trainer.device",
                f"communicator {cfg.name!r} cannot train on the CPU",
                value=device,
                allowed="gpu, auto",
            )
        )
    return issues


def compression_issues(cfg: CommunicatorConfig, topology, optimizer) -> List[ConfigIssue]:
    """``communicator.compression=powersgd`` is refused where it is not made to work: a
    model-parallel topology and double buffering (docs/powersgd.md)."""
    if cfg.compression == "none":
        return []
    issues = []
    if isinstance(topology, ModelParallelTopology):
        issues.append(
            ConfigIssue(
                "communicator.compression",
                "powersgd is not supported with a model-parallel topology",
                value=cfg.compression,
                allowed="communicator.compression=none, or topology=data_parallel",
            )
        )
    if optimizer is not None and optimizer.double_buffering:
        issues.append(
            ConfigIssue(
                "communicator.compression",
                "powersgd is not supported with optimizer.double_buffering",
                value=cfg.compression,
                allowed="communicator.compression=none, or optimizer.double_buffering=false "
                "(optimizer.overlap=true works with it)",
            )
        )
    return issues


@dataclass
class Communicators:
    """``world`` (all ranks), ``model`` (this rank's model-parallel group; the
    world for data parallelism) and ``data`` (ranks that average gradients)."""

    world: Any
    model: Any
    data: Any


def build_communicators(cfg: CommunicatorConfig, topology) -> Communicators:
    world = create_communicator(
        cfg.name,
        allreduce_grad_dtype=cfg.allreduce_grad_dtype,
        batched_copy=cfg.batched_copy,
        compression=cfg.compression,
        powersgd_rank=cfg.powersgd_rank,
        powersgd_start_iter=cfg.powersgd_start_iter,
    )
    if not isinstance(topology, ModelParallelTopology):
        return Communicators(world=world, model=world, data=world)
    g = topology.group_size
    if g == world.size:
        model = world
    else:
        model = world.split(world.rank // g, world.rank % g)
    data = world.split(world.rank % g, world.rank // g)
    return Communicators(world=world, model=model, data=data)
