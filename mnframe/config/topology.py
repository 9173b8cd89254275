"""The model-parallel rank graph and its static checks (no MPI needed).

Each rank of a model-parallel group runs its stages in order: a stage first
receives from ``rank_in`` (blocking), computes, then sends to ``rank_out``
(blocking). Backward runs the stages in reverse: a stage first receives the
gradients of what it sent, then sends the gradients of what it received.

``check_graph`` verifies that every peer exists, every send has a receive,
every rank has work, and simulates the per-rank sequences of blocking
operations with rendezvous semantics (the worst case of MPI's standard
send), so an order that can deadlock in forward or backward is reported
with what each rank waits for. A stage may name its own rank (ChainerMN's
branching and twisting models): MultiNodeChainList hands such values over
inside the process through a first-in first-out queue, so they are not
blocking operations; a receive from the own rank needs an earlier send to it,
and every such send a later receive. ``describe`` prints the graph and the
schedule; ``render_png`` draws it, every replica, with matplotlib.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from mnframe.config.issues import ConfigIssue
from mnframe.config.schema import ModelParallelTopology, RankPlan


@dataclass(frozen=True)
class Op:
    """One blocking point-to-point operation of a rank's schedule."""

    kind: str  # "send" | "recv"
    peer: int
    stage: int
    phase: str  # "forward" | "backward"

    def __str__(self) -> str:
        arrow = "->" if self.kind == "send" else "<-"
        return f"{self.phase} stage {self.stage}: {self.kind} {arrow} rank {self.peer}"


@dataclass
class GraphReport:
    issues: List[ConfigIssue] = field(default_factory=list)
    schedule: Dict[int, List[Op]] = field(default_factory=dict)
    steps: List[Tuple[int, int, Op]] = field(default_factory=list)  # (sender, receiver, op)

    @property
    def ok(self) -> bool:
        return not self.issues


def _peers(ref) -> List[int]:
    if ref is None:
        return []
    return [ref] if isinstance(ref, int) else list(ref)


def rank_schedule(plan: RankPlan, rank: Optional[int] = None) -> List[Op]:
    """The blocking operations one rank issues for one training iteration.

    With ``rank`` (the plan's own rank), hand-offs to itself are left out:
    they happen inside the process.
    """

    def peers(ref):
        return [p for p in _peers(ref) if p != rank]

    ops: List[Op] = []
    for i, stage in enumerate(plan.stages):
        ops += [Op("recv", p, i, "forward") for p in peers(stage.rank_in)]
        ops += [Op("send", p, i, "forward") for p in peers(stage.rank_out)]
    for i in reversed(range(len(plan.stages))):
        stage = plan.stages[i]
        ops += [Op("recv", p, i, "backward") for p in peers(stage.rank_out)]
        ops += [Op("send", p, i, "backward") for p in peers(stage.rank_in)]
    return ops


def _path(rank: int, stage: Optional[int] = None, key: Optional[str] = None) -> str:
    out = f"topology.ranks.{rank}"
    if stage is not None:
        out += f".stages.{stage}"
    if key:
        out += f".{key}"
    return out


def _handoff_issues(r: int, plan: RankPlan) -> List[ConfigIssue]:
    """Hand-offs to the own rank form a queue: each receive needs an earlier send, each send a receive."""
    issues = []
    pending: List[int] = []  # the sending stage of each hand-off not yet received, oldest first
    for i, stage in enumerate(plan.stages):
        taken = _peers(stage.rank_in).count(r)
        if taken > len(pending):
            issues.append(
                ConfigIssue(
                    _path(r, i, "rank_in"),
                    f"stage {i} receives from its own rank {r} {taken} time(s) but "
                    f"earlier stages sent to it only {len(pending)} time(s)",
                    value=stage.rank_in,
                    allowed=f"send to rank {r} (rank_out) from an earlier stage first",
                )
            )
        del pending[:taken]
        pending += [i] * _peers(stage.rank_out).count(r)
    for i in sorted(set(pending)):
        issues.append(
            ConfigIssue(
                _path(r, i, "rank_out"),
                f"stage {i} sends to its own rank {r} but no later stage receives it",
                value=plan.stages[i].rank_out,
                allowed=f"a later stage with rank_in: {r}, or another rank",
            )
        )
    return issues


def _structure_issues(topo: ModelParallelTopology) -> List[ConfigIssue]:
    n = topo.group_size
    issues = []
    for r, plan in enumerate(topo.ranks):
        for i, stage in enumerate(plan.stages):
            for key in ("rank_in", "rank_out"):
                for p in _peers(getattr(stage, key)):
                    if not 0 <= p < n:
                        issues.append(
                            ConfigIssue(
                                _path(r, i, key),
                                f"rank {p} does not exist in a group of {n}",
                                value=p,
                                allowed=f"0..{n - 1} or null",
                            )
                        )
        issues += _handoff_issues(r, plan)
    return issues


def _forward(schedule: Dict[int, List[Op]]) -> Dict[int, List[Op]]:
    return {r: [o for o in ops if o.phase == "forward"] for r, ops in schedule.items()}


def _unmatched(schedule: Dict[int, List[Op]]) -> List[Tuple[int, int, str, List[Op]]]:
    """``(src, dst, kind in excess, candidate ops)`` for each direction whose sends and receives
    (forward) do not pair up; the candidates are the ops of the side in excess, in order."""
    count: Dict[Tuple[int, int], List[Op]] = {}
    for r, ops in _forward(schedule).items():
        for op in ops:
            key = (r, op.peer) if op.kind == "send" else (op.peer, r)
            count.setdefault(key, []).append(op)
    out = []
    for (src, dst), ops in sorted(count.items()):
        sends = [o for o in ops if o.kind == "send"]
        recvs = [o for o in ops if o.kind == "recv"]
        if len(sends) != len(recvs):
            kind, extra = ("send", sends) if len(sends) > len(recvs) else ("recv", recvs)
            out.append((src, dst, kind, extra))
    return out


def _blamed(schedule: Dict[int, List[Op]], owner: int, candidates: List[Op]) -> Op:
    """The one op of ``candidates`` (on rank ``owner``) whose removal lets the forward pass
    finish (the fewest ranks left waiting): the stage at fault, so a wrong ``rank_in`` on
    stage 0 blames stage 0, not the later stage whose receive is then left over. The last
    one on a tie."""
    forward = _forward(schedule)

    def left_over(op: Op) -> int:  # ranks still blocked and ops still unpaired without ``op``
        trial = dict(forward)
        trial[owner] = [o for o in forward[owner] if o is not op]
        return len(simulate(trial)[1]) + sum(len(ops) for _, _, _, ops in _unmatched(trial))

    return min(reversed(candidates), key=left_over)


def _dangling(topo: ModelParallelTopology, r: int, key: str) -> Optional[int]:
    """A stage of rank ``r`` whose ``key`` is null where that cannot be meant, or None:
    ``rank_in: null`` on a rank that reads no batch, ``rank_out: null`` on a rank without
    the loss (its output would be dropped). When a send or receive is left over, such a
    stage is where the missing end was meant to be."""
    plan = topo.ranks[r]
    if key == "rank_in" and plan.dataset != "empty" or key == "rank_out" and plan.classifier:
        return None
    return next((i for i, st in enumerate(plan.stages) if getattr(st, key) is None), None)


def _count_issues(topo: ModelParallelTopology, schedule: Dict[int, List[Op]]) -> List[ConfigIssue]:
    """Every send needs a receive on the peer (per direction, phase forward)."""
    issues = []
    for src, dst, kind, extra in _unmatched(schedule):
        if kind == "send":
            o = _blamed(schedule, src, extra)
            j = _dangling(topo, dst, "rank_in")
            if j is not None:
                issues.append(
                    ConfigIssue(
                        _path(dst, j, "rank_in"),
                        f"rank {src} stage {o.stage} sends to rank {dst}, and rank {dst} stage {j} takes "
                        f"no input (rank_in: null on a rank with dataset: empty)",
                        value=None,
                        allowed=str(src),
                    )
                )
                continue
            issues.append(
                ConfigIssue(
                    _path(src, o.stage, "rank_out"),
                    f"rank {src} stage {o.stage} sends to rank {dst} but rank {dst} has no matching "
                    f"receive (a stage with rank_in: {src})",
                    value=dst,
                )
            )
        else:
            o = _blamed(schedule, dst, extra)
            j = _dangling(topo, src, "rank_out")
            if j is not None:
                issues.append(
                    ConfigIssue(
                        _path(src, j, "rank_out"),
                        f"rank {dst} stage {o.stage} receives from rank {src}, and rank {src} stage {j} "
                        f"sends nothing (rank_out: null on a rank without the loss drops its output)",
                        value=None,
                        allowed=str(dst),
                    )
                )
                continue
            issues.append(
                ConfigIssue(
                    _path(dst, o.stage, "rank_in"),
                    f"rank {dst} stage {o.stage} receives from rank {src} but rank {src} never sends "
                    f"to it (a stage with rank_out: {dst})",
                    value=src,
                )
            )
    return issues


def _wait_cycle(blocked: Dict[int, Op]) -> List[int]:
    """The ranks of a cycle of receives (rank a waits for b, b for c, ... for a), or []."""
    for start in sorted(blocked):
        seen: List[int] = []
        r = start
        while r in blocked and blocked[r].kind == "recv" and r not in seen:
            seen.append(r)
            r = blocked[r].peer
        if r in seen:
            return seen[seen.index(r) :]
    return []


def _deadlock_issue(topo: ModelParallelTopology, blocked: Dict[int, Op]) -> ConfigIssue:
    """One issue for a schedule that stops: a cycle of receives names it and points at the
    stage that should start it; any other stop lists what each rank waits for."""
    phase = min(op.phase for op in blocked.values())
    cycle = _wait_cycle(blocked)
    if cycle:
        readers = [r for r in cycle if topo.ranks[r].dataset == "input"]
        r = readers[0] if readers else cycle[0]
        op = blocked[r]
        chain = ", ".join(f"rank {q} stage {blocked[q].stage} waits for rank {blocked[q].peer}" for q in cycle)
        return ConfigIssue(
            _path(r, op.stage, "rank_in" if phase == "forward" else None),
            f"the stage order deadlocks in {phase}, a cycle of receives: {chain}; no stage of the cycle can start",
            value=op.peer,
            allowed="rank_in: null on the stage that reads the batch, or reorder the stages so that "
            "a send comes before the receive",
        )
    waits = "; ".join(f"rank {r} waits in {op}" for r, op in sorted(blocked.items()))
    first = min(blocked)
    return ConfigIssue(
        _path(first, blocked[first].stage),
        f"the stage order deadlocks in {phase}: {waits}",
        allowed="reorder the stages so that each send meets the peer's receive",
    )


def simulate(schedule: Dict[int, List[Op]]) -> Tuple[List[Tuple[int, int, Op]], Dict[int, Op]]:
    """Run the blocking schedules; return the matched steps and, on deadlock,
    each unfinished rank's pending operation (empty dict when all finished)."""
    pos = {r: 0 for r in schedule}
    steps = []
    progressed = True
    while progressed:
        progressed = False
        for r in sorted(schedule):
            if pos[r] >= len(schedule[r]):
                continue
            op = schedule[r][pos[r]]
            if op.kind != "send" or op.peer not in schedule:
                continue
            peer_ops, q = schedule[op.peer], pos[op.peer]
            if q < len(peer_ops) and peer_ops[q].kind == "recv" and peer_ops[q].peer == r:
                steps.append((r, op.peer, op))
                pos[r] += 1
                pos[op.peer] += 1
                progressed = True
    blocked = {r: schedule[r][pos[r]] for r in schedule if pos[r] < len(schedule[r])}
    return steps, blocked


def check_graph(topo: ModelParallelTopology, dataset=None, world_size: Optional[int] = None) -> GraphReport:
    """All static checks of a model-parallel graph; issues carry config paths.

    The first broken rule is reported, in this order: ranks that do not exist and
    hand-offs to the own rank; sends and receives that do not pair up; a schedule
    that stops (a cycle of receives, a deadlock); then where the data, the labels
    and the loss are (``config.data_flow``; ``dataset``: the ``DatasetConfig``,
    ``world_size``: for the replicas; None leaves those parts out)."""
    report = GraphReport()
    report.issues += _structure_issues(topo)
    if report.issues:
        return report
    report.schedule = {r: rank_schedule(plan, r) for r, plan in enumerate(topo.ranks)}
    report.issues += _count_issues(topo, report.schedule)
    if report.issues:
        return report
    report.steps, blocked = simulate(report.schedule)
    if blocked:
        report.issues.append(_deadlock_issue(topo, blocked))
        return report
    from mnframe.config.data_flow import data_issues  # the loss and data rules, once the graph runs

    report.issues += data_issues(topo, dataset, world_size)
    return report


def replicas(topo: ModelParallelTopology, world_size: int) -> List[List[int]]:
    """World ranks of each model replica (dual parallelism: color = rank // group)."""
    g = topo.group_size
    return [list(range(k * g, (k + 1) * g)) for k in range(max(1, world_size // g))]


def describe(topo: ModelParallelTopology, world_size: int, report: Optional[GraphReport] = None, dataset=None) -> str:
    """A text picture of the graph, its replicas, where the data and the loss are, and the
    simulated schedule."""
    from mnframe.config.data_flow import data_lines

    report = report or check_graph(topo, dataset, world_size)
    lines = [f"model-parallel group of {topo.group_size} ranks; world size {world_size}"]
    for k, members in enumerate(replicas(topo, world_size)):
        lines.append(f"  replica {k}: world ranks {members}")
    for r, plan in enumerate(topo.ranks):
        tags = [f"dataset={plan.dataset}"] + (["loss"] if plan.classifier else [])
        lines.append(f"rank {r} ({', '.join(tags)}):")
        for i, s in enumerate(plan.stages):
            src = "input" if s.rank_in is None else f"rank {s.rank_in}"
            dst = "output" if s.rank_out is None else f"rank {s.rank_out}"
            lines.append(f"  [{i}] {src} -> {s.module.target} -> {dst}")
    lines += data_lines(topo, dataset, world_size)
    if report.steps:
        lines.append("schedule (one iteration, blocking order):")
        for n, (src, dst, op) in enumerate(report.steps, 1):
            lines.append(f"  {n:2d}. {op.phase:8s} rank {src} -> rank {dst} (stage {op.stage})")
    lines.append("graph OK" if report.ok else "graph has problems:")
    lines += [i.render() for i in report.issues]
    return "\n".join(lines)


def render_png(topo: ModelParallelTopology, path: str, world_size: Optional[int] = None) -> str:
    """Draw the graph of every replica and write it to ``path``; return ``path``."""
    import matplotlib.pyplot as plt

    fig = figure(topo, world_size)
    from mnframe.runtime.fs import atomic_path

    with atomic_path(path, fsync=False) as tmp:  # no half-written image on an interruption
        fig.savefig(tmp, bbox_inches="tight", format=os.path.splitext(str(path))[1].lstrip(".") or "png")
    plt.close(fig)
    return path


def _receiving_stage(topo: ModelParallelTopology, r: int, i: int, p: int, pos) -> int:
    """The stage of rank ``p`` that receives what stage ``i`` of rank ``r`` sends (drawn as the arrow's end)."""
    below = [
        j for j, t in enumerate(topo.ranks[p].stages) if r in _peers(t.rank_in) and pos[(p, j)][1] <= pos[(r, i)][1]
    ]
    if below:
        return below[0]
    return next((j for j, t in enumerate(topo.ranks[p].stages) if r in _peers(t.rank_in)), 0)


def figure(topo: ModelParallelTopology, world_size: Optional[int] = None):
    """A matplotlib figure: one panel per replica (dual parallelism), each rank a column of
    stage boxes labelled with its world rank, sends as arrows."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = topo.group_size
    groups = replicas(topo, world_size or n)
    depth = max(len(p.stages) for p in topo.ranks)
    fig, axes = plt.subplots(1, len(groups), figsize=(len(groups) * (3 + 2.5 * n), 1.8 + 1.2 * depth), squeeze=False)
    for k, (ax, members) in enumerate(zip(axes[0], groups)):
        ax.set_title(f"replica {k}: world ranks {members[0]}-{members[-1]}" if n > 1 else f"replica {k}")
        _draw_replica(ax, topo, members)
    return fig


def _draw_replica(ax, topo: ModelParallelTopology, members: List[int]) -> None:
    n = topo.group_size
    depth = max(len(p.stages) for p in topo.ranks)
    pos = {}
    for r, plan in enumerate(topo.ranks):
        tags = (["reads data"] if plan.dataset == "input" else []) + (["loss"] if plan.classifier else [])
        label = f"rank {r} (world {members[r]})" + (f"\n{', '.join(tags)}" if tags else "")
        ax.text(r * 3, 0.6, label, ha="center", fontweight="bold")
        for i, s in enumerate(plan.stages):
            xy = (r * 3, -i * 1.5)
            pos[(r, i)] = xy
            ax.text(
                *xy,
                s.module.target.rsplit(".", 1)[-1],
                ha="center",
                va="center",
                bbox=dict(boxstyle="round", fc="#dde8ff" if plan.dataset == "input" else "#eee"),
            )
    for r, plan in enumerate(topo.ranks):
        for i, s in enumerate(plan.stages):
            for p in _peers(s.rank_out):
                j = _receiving_stage(topo, r, i, p, pos)
                ax.annotate(
                    "",
                    xy=pos[(p, j)],
                    xytext=pos[(r, i)],
                    arrowprops=dict(arrowstyle="->", color="tab:blue", shrinkA=18, shrinkB=18),
                )
    ax.set_xlim(-1.5, 3 * (n - 1) + 1.5)
    ax.set_ylim(-1.5 * depth, 1.4)
    ax.axis("off")
