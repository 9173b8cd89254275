"""What each file of a checkpoint holds: the ``layout`` record of its manifest.

A rank's file holds the state of one model-parallel *stage* (the rank's index in its
model-parallel group, ``world rank % group size``) for one data-parallel *replica*
(``world rank // group size``); a data-parallel job has one stage and one replica per
rank. The record, a plain JSON dict stored as ``Manifest.layout``::

    {"kind": "data_parallel" | "model_parallel",
     "stages": 2,                      # model-parallel group size (1 for data parallel)
     "replicas": 2,                    # world size // stages
     "files": {"rank_00000.npz": {"rank": 0, "stage": 0, "replica": 0}, ...},
     "graph": [...] | None,            # the rank graph (graph_of), None for data parallel
     "graph_digest": "0123abcd..." | None,
     "recorded": true}                 # false: derived by layout_of for an older manifest

``layout_of(manifest)`` reads it, deriving it for a manifest written before layouts
existed (from its world size and the topology in its configuration).
"""

import hashlib
import json
from typing import Any, Optional


def rank_file(rank):
    return f"rank_{rank:05d}.npz"


def _plain(topology) -> Optional[dict]:
    """A topology section as a plain dict (a pydantic model, a dict or None)."""
    if topology is None:
        return None
    if hasattr(topology, "model_dump"):
        return topology.model_dump(mode="json", by_alias=True)
    return dict(topology)


def graph_of(topology) -> Optional[list]:
    """The rank graph of a model-parallel topology: per group rank its dataset, whether it
    has the loss, and its stages (module class, rank_in, rank_out); None for data parallel.
    Module arguments are not part of the graph (a change there is a model change)."""
    topo = _plain(topology)
    if not topo or topo.get("kind") != "model_parallel":
        return None
    ranks = topo.get("ranks") or []
    if isinstance(ranks, dict):
        ranks = [ranks[k] for k in sorted(ranks, key=int)]
    graph = []
    for plan in ranks:
        stages = []
        for s in plan.get("stages") or []:
            module = s.get("module") or {}
            target = module.get("_target_", module.get("target")) if isinstance(module, dict) else str(module)
            stages.append({"module": target, "rank_in": s.get("rank_in"), "rank_out": s.get("rank_out")})
        graph.append(
            {"dataset": plan.get("dataset", "input"), "classifier": bool(plan.get("classifier")), "stages": stages}
        )
    return graph


def digest(graph) -> Optional[str]:
    if graph is None:
        return None
    text = json.dumps(graph, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def make_layout(world_size: int, topology=None, recorded: bool = True) -> dict:
    """The layout of a job of ``world_size`` ranks running ``topology`` (None: data parallel)."""
    graph = graph_of(topology)
    stages = len(graph) if graph else 1
    files = {rank_file(r): {"rank": r, "stage": r % stages, "replica": r // stages} for r in range(world_size)}
    return {
        "kind": "model_parallel" if graph else "data_parallel",
        "stages": stages,
        "replicas": max(1, world_size // stages),
        "files": files,
        "graph": graph,
        "graph_digest": digest(graph),
        "recorded": recorded,
    }


def layout_of(manifest: Any) -> dict:
    """The manifest's layout; for a manifest written before layouts were recorded, the
    layout its world size and configured topology imply (``recorded: false``)."""
    layout = getattr(manifest, "layout", None)
    if layout:
        return layout
    config = getattr(manifest, "config", None)
    topology = config.get("topology") if isinstance(config, dict) else None
    return make_layout(manifest.world_size, topology, recorded=False)


def describe(layout: dict, graph: bool = True) -> str:
    """One phrase: 'data parallel, 3 ranks' or 'model parallel, 2 stages x 2 replicas (graph 0123abcd)'."""
    n = len(layout.get("files") or {}) or layout["stages"] * layout["replicas"]
    if layout["kind"] == "data_parallel":
        return f"data parallel, {n} rank{'s' if n != 1 else ''}"
    r = layout["replicas"]
    text = f"model parallel, {layout['stages']} stages x {r} replica{'s' if r != 1 else ''}"
    return f"{text} (graph {layout.get('graph_digest')})" if graph else text


def fit_problem(stages: int, world_size: int) -> Optional[str]:
    """Why ``world_size`` ranks cannot hold ``stages`` model-parallel stages, or None."""
    if world_size < stages:
        return f"{world_size} rank(s) are fewer than the {stages} stages"
    if world_size % stages:
        return f"the world size {world_size} is not a multiple of the {stages} stages"
    return None


def sources(old: dict, new: dict) -> dict:
    """For each new world rank, the old file holding its stage's state: the same rank at the
    same world size; else the file of the same stage and replica ``replica % old replicas``
    (None where the old layout has no such stage)."""
    by_stage = {}
    for name, where in sorted(old["files"].items(), key=lambda kv: kv[1]["replica"]):
        by_stage.setdefault(where["stage"], []).append(name)
    out = {}
    for where in new["files"].values():
        files = by_stage.get(where["stage"])
        out[where["rank"]] = files[where["replica"] % len(files)] if files else None
    return out
