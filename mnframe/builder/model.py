"""Step 3: the model: a plain Chain (data parallel) or this rank's
``MultiNodeChainList`` (model parallel), optionally wrapped in
``chainer.links.Classifier``.

``build_model`` returns ``{name: link}``: one entry ``"main"`` normally,
several for recipes with named models (e.g. a GAN's gen and dis).
"""
from __future__ import annotations

from typing import Any, Dict

from mnframe.builder.instantiate import instantiate
from mnframe.config.schema import Component, DataParallelTopology, RankPlan, RunConfig


def _classifier(link, wrap: bool):
    import chainer.links as L

    return L.Classifier(link) if wrap else link


def build_rank_chain(plan: RankPlan, model_comm) -> Any:
    """This rank's MultiNodeChainList: ``add_link(module, rank_in, rank_out)`` per stage."""
    import mnframe

    chain = mnframe.MultiNodeChainList(model_comm)
    for stage in plan.stages:
        chain.add_link(instantiate(stage.module), rank_in=stage.rank_in, rank_out=stage.rank_out)
    return _classifier(chain, plan.classifier)


def build_models(cfg: RunConfig, comms) -> Dict[str, Any]:
    topo = cfg.topology
    if isinstance(topo, DataParallelTopology):
        if isinstance(cfg.model, Component):
            return {"main": _classifier(instantiate(cfg.model), topo.classifier)}
        return {name: instantiate(comp) for name, comp in (cfg.model or {}).items()}
    plan = topo.ranks[comms.model.rank]
    return {"main": build_rank_chain(plan, comms.model)}


def rank_plan(cfg: RunConfig, comms):
    """This rank's plan of a model-parallel topology (None for data parallelism)."""
    if isinstance(cfg.topology, DataParallelTopology):
        return None
    return cfg.topology.ranks[comms.model.rank]
