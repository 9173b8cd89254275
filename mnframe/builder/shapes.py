"""A dry forward pass of a model-parallel group, in one process and without MPI.

``shape_issues(cfg)`` builds every stage of every rank, makes one small batch from
the data set's first training examples (their shapes and dtypes), and runs the
stages in the order the ranks would: a stage runs once everything it receives has
been sent, and gets exactly what the sending stage returned (a stage with
``rank_in: null`` gets the batch as its rank would: ``x`` under the loss, the whole
``(x, t)`` otherwise). The output of a rank with the loss goes through softmax cross
entropy with the labels. The first stage that cannot take what it gets is one
``ConfigIssue`` naming the sending rank and stage and the receiving rank and stage,
so a mismatch is refused before launch (``--check``) and, at run time, before the
first iteration (``pipeline.build_trainer``), in one line instead of a traceback.

Stages that communicate themselves (a constructor taking ``comm``) cannot run
without MPI: ``shape_issues`` then checks nothing and says so in its note.
"""

from __future__ import annotations

import collections
import inspect
from typing import Any, Dict, List, Optional, Tuple

from mnframe._internal.targets import declared_parameters
from mnframe.builder.instantiate import instantiate
from mnframe.config.issues import ConfigError, ConfigIssue

DRY_BATCH = 2  # examples in the dummy batch (2: batch normalization needs more than one)


def _peers(ref) -> List[int]:
    return [] if ref is None else [ref] if isinstance(ref, int) else list(ref)


def _name(plan, i: int) -> str:
    return plan.stages[i].module.target.rsplit(".", 1)[-1]


def _where(r: int, plan, i: int) -> str:
    return f"rank {r} stage {i} ({_name(plan, i)})"


def _shape(value: Any) -> str:
    """``float32 (2, 128)``, or a tuple of those."""
    if isinstance(value, (tuple, list)):
        return "(" + ", ".join(_shape(v) for v in value) + ")"
    array = getattr(value, "array", value)
    shape, dtype = getattr(array, "shape", None), getattr(array, "dtype", None)
    if shape is None:
        return type(value).__name__
    return f"{dtype} {tuple(shape)}"


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:300]}{'...' if len(text) > 300 else ''}"


def _batch(train) -> Tuple[Any, ...]:
    """One batch of the first ``DRY_BATCH`` training examples, as the updater converts it."""
    from chainer.dataset import concat_examples

    n = min(DRY_BATCH, len(train))
    batch = concat_examples([train[i] for i in range(n)])
    return batch if isinstance(batch, tuple) else (batch,)


def _takes(link, args) -> Optional[int]:
    """None if ``link`` can be called with ``args``, else how many positional inputs it takes."""
    try:
        sig = inspect.signature(link.forward)
    except (TypeError, ValueError, AttributeError):
        return None
    try:
        sig.bind(*args)
        return None
    except TypeError:
        params = sig.parameters.values()
        return sum(1 for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))


def untestable(topo) -> Optional[str]:
    """Why the stages cannot run without MPI (one of them takes a communicator), or None."""
    from mnframe.builder.model import COMMUNICATOR_PARAMETERS

    for r, plan in enumerate(topo.ranks):
        for i, stage in enumerate(plan.stages):
            if declared_parameters(stage.module.target, COMMUNICATOR_PARAMETERS):
                return f"{_where(r, plan, i)} communicates itself (it takes a communicator)"
    return None


class _Run:
    """The group's stages run in dependency order, values passed in first-in first-out mailboxes."""

    def __init__(self, topo, links: Dict[Tuple[int, int], Any], batch: Tuple[Any, ...]):
        self.topo, self.links, self.batch = topo, links, batch
        self.mail: Dict[Tuple[int, int], collections.deque] = collections.defaultdict(collections.deque)
        self.next = {r: 0 for r in range(topo.group_size)}

    def inputs(self, plan) -> Tuple[Any, ...]:
        if plan.dataset == "empty":
            return ()
        return self.batch[:-1] if plan.classifier else self.batch

    def ready(self, r: int, stage) -> bool:
        need = collections.Counter(_peers(stage.rank_in))
        return all(len(self.mail[(p, r)]) >= k for p, k in need.items())

    def step(self, r: int) -> Optional[ConfigIssue]:
        import chainer.functions as F

        plan = self.topo.ranks[r]
        i = self.next[r]
        stage = plan.stages[i]
        path = f"topology.ranks.{r}.stages.{i}"
        if stage.rank_in is None:
            args, origin = self.inputs(plan), None
        else:
            got = [self.mail[(p, r)].popleft() for p in _peers(stage.rank_in)]
            args = tuple(value for value, _ in got)
            origin = [where for _, where in got]
        link = self.links[(r, i)]
        taken = _takes(link, args)
        if taken is not None and origin is None:
            what = "the whole batch (x, t)" if len(args) > 1 else f"{len(args)} input(s)"
            return ConfigIssue(
                f"{path}.module",
                f"{_where(r, plan, i)} reads the batch (rank_in: null) on a rank without the loss, so it gets "
                f"{what}: {_shape(args)}, but its forward takes {taken} input(s)",
                allowed="a forward that also takes the labels (def forward(self, x, t=None)), or "
                "classifier: true on this rank",
            )
        try:
            y = link(*args)
        except Exception as exc:  # noqa: BLE001 - any failure is the stage's, reported in one line
            src = "the batch" if origin is None else " and ".join(origin)
            return ConfigIssue(
                f"{path}.module",
                f"{_where(r, plan, i)} cannot take what {src} sends "
                f"({_shape(args[0] if len(args) == 1 else args)}): {_one_line(exc)}",
                allowed="shapes that fit: the sending stage's output is the receiving stage's input",
            )
        self.next[r] += 1
        if stage.rank_out is None:
            if plan.classifier:
                t = self.batch[-1]
                try:
                    F.softmax_cross_entropy(y, t)
                except Exception as exc:  # noqa: BLE001
                    return ConfigIssue(
                        f"{path}.module",
                        f"the output of {_where(r, plan, i)} ({_shape(y)}) does not fit the loss "
                        f"(softmax cross entropy with labels {_shape(t)}): {_one_line(exc)}",
                        allowed="one score per class and example",
                    )
            return None
        for p in _peers(stage.rank_out):
            self.mail[(r, p)].append((y, _where(r, plan, i)))
        return None

    def run(self) -> Optional[ConfigIssue]:
        progressed = True
        while progressed:
            progressed = False
            for r, plan in enumerate(self.topo.ranks):
                while self.next[r] < len(plan.stages) and self.ready(r, plan.stages[self.next[r]]):
                    issue = self.step(r)
                    if issue is not None:
                        return issue
                    progressed = True
        return None


def check_before_training(cfg, world) -> None:
    """The dry run at run time, before anything is built: on rank 0 of ``world`` (it builds
    every stage once), its verdict shared, so a mismatch is one ConfigError on every rank."""
    from mnframe.builder.instantiate import agree_on_faults
    from mnframe.config.issues import raise_issues

    with agree_on_faults(world):
        if world.rank == 0:
            raise_issues(shape_issues(cfg)[0], "the model-parallel stages do not fit together")


def shape_issues(cfg) -> Tuple[List[ConfigIssue], str]:
    """``(issues, note)``: the first stage (in schedule order) that cannot take what it gets,
    and a line saying what was checked. Builds every stage of ``cfg.topology`` in this
    process; the graph must have passed ``check_graph``."""
    import chainer

    topo = cfg.topology
    why = untestable(topo)
    if why:
        return [], f"shapes not checked: {why}"
    try:
        train, _ = instantiate(cfg.dataset.source, path="dataset.source")
        batch = _batch(train)
    except ConfigError as exc:
        return [], f"shapes not checked: the data set did not load here ({str(exc).splitlines()[0]})"
    links = {}
    for r, plan in enumerate(topo.ranks):
        for i, stage in enumerate(plan.stages):
            links[(r, i)] = instantiate(stage.module, path=f"topology.ranks.{r}.stages.{i}.module")
    with chainer.no_backprop_mode(), chainer.using_config("train", False):
        issue = _Run(topo, links, batch).run()
    if issue is not None:
        return [issue], ""
    return [], f"shapes OK: a batch of {_shape(batch)} ran through every stage"
