"""Step 4: the model: a plain Chain (data parallel) or this rank's
``MultiNodeChainList`` (model parallel), optionally wrapped in
``chainer.links.Classifier``.

``build_model`` returns ``{name: link}``: one entry ``"main"`` normally,
several for recipes with named models (e.g. a GAN's gen and dis).

A model that communicates declares it by the name of a constructor parameter
(``COMMUNICATOR_PARAMETERS``): ``comm`` gets the model communicator (the ranks
holding one copy of the model: this rank's model-parallel group, the world for
data parallelism), ``data_comm`` the ranks that average its gradients (its
replicas), ``world_comm`` every rank. The builder passes them; the config must
not set them (``validate`` checks both ways).
"""

from __future__ import annotations

from typing import Any, Dict, List

from mnframe._internal.targets import check_target, declared_parameters
from mnframe.builder.instantiate import agree_on_faults, instantiate
from mnframe.config.issues import ConfigIssue
from mnframe.config.schema import Component, DataParallelTopology, RankPlan, RunConfig
from mnframe.links.chain_list import MultiNodeChainList

# constructor parameter -> the attribute of builder.communicator.Communicators it receives
COMMUNICATOR_PARAMETERS = {"comm": "model", "data_comm": "data", "world_comm": "world"}


def _classifier(link, wrap: bool):
    import chainer.links as L

    return L.Classifier(link) if wrap else link


def build_component(component: Component, comms, path: str) -> Any:
    """``component``'s target called with its arguments and the communicators it declares."""
    wanted = declared_parameters(component.target, COMMUNICATOR_PARAMETERS)
    return instantiate(
        component, path=path, **{param: getattr(comms, COMMUNICATOR_PARAMETERS[param]) for param in wanted}
    )


def build_rank_chain(plan: RankPlan, comms, path: str) -> Any:
    """This rank's MultiNodeChainList: ``add_link(module, rank_in, rank_out)`` per stage."""
    chain = MultiNodeChainList(comms.model)
    for i, stage in enumerate(plan.stages):
        module = build_component(stage.module, comms, f"{path}.stages.{i}.module")
        chain.add_link(module, rank_in=stage.rank_in, rank_out=stage.rank_out)
    return _classifier(chain, plan.classifier)


def build_models(cfg: RunConfig, comms) -> Dict[str, Any]:
    """This rank's models; a constructor that rejects its arguments on any rank is a
    ConfigError naming the key, raised on every rank."""
    with agree_on_faults(comms.world):
        return _build_models(cfg, comms)


def _build_models(cfg: RunConfig, comms) -> Dict[str, Any]:
    topo = cfg.topology
    if isinstance(topo, DataParallelTopology):
        if isinstance(cfg.model, Component):
            return {"main": _classifier(build_component(cfg.model, comms, "model"), topo.classifier)}
        return {name: build_component(comp, comms, f"model.{name}") for name, comp in (cfg.model or {}).items()}
    r = comms.model.rank
    return {"main": build_rank_chain(topo.ranks[r], comms, f"topology.ranks.{r}")}


def user_models(cfg: RunConfig, comms, models: Dict[str, Any]) -> Dict[str, Any]:
    """This rank's ``models`` without the ``Classifier`` the builder wrapped around them (what to export)."""
    plan = rank_plan(cfg, comms)
    if plan is None:
        wrapped = cfg.topology.classifier and isinstance(cfg.model, Component)
    else:
        wrapped = plan.classifier
    return {name: m.predictor if wrapped and name == "main" else m for name, m in models.items()}


def rank_plan(cfg: RunConfig, comms):
    """This rank's plan of a model-parallel topology (None for data parallelism)."""
    if isinstance(cfg.topology, DataParallelTopology):
        return None
    return cfg.topology.ranks[comms.model.rank]


def model_issues(models: Any, topology: Any) -> List[ConfigIssue]:
    """Every model ``_target_`` (and each model-parallel stage's module) imports and takes
    its arguments, none of the communicators the builder passes is set in the config, and
    a data-parallel topology has a model."""
    provided = COMMUNICATOR_PARAMETERS
    issues: List[ConfigIssue] = []
    if isinstance(models, Component):
        issues += check_target("model", models.target, models.kwargs, provided)
    elif isinstance(models, dict):
        for name, comp in models.items():
            issues += check_target(f"model.{name}", comp.target, comp.kwargs, provided)
    if isinstance(topology, DataParallelTopology):
        if not models:
            issues.append(
                ConfigIssue(
                    "model",
                    "a data-parallel topology needs a model",
                    allowed="model=mlp or {_target_: your.Model, ...}",
                )
            )
    else:
        for r, plan in enumerate(topology.ranks):
            for i, stage in enumerate(plan.stages):
                issues += check_target(
                    f"topology.ranks.{r}.stages.{i}.module", stage.module.target, stage.module.kwargs, provided
                )
    return issues
