"""Where the data, the labels and the loss of a model-parallel group are, and whether they agree.

The rank graph (``config.topology``) says who sends to whom; this module says who
reads the batch and whether what reaches the loss belongs together:

* a rank with ``dataset: input`` reads batches from its iterator; ``dataset: empty``
  reads none, so its first stage must receive from a rank;
* the loss (``classifier: true``) needs labels, so its rank reads the batch, and its
  last stage keeps the output (``rank_out: null``);
* two readers in a group see the same batch in the same order only under a strategy
  of span "model" (``multi_node_iterator``: rank 0's batches go to every rank of the
  group; ``synchronized``: every rank shuffles alike); under any other strategy each
  reads its own batches, and a loss away from the rank that reads the inputs would get
  the labels of other examples;
* with several replicas (dual parallelism) every replica must get its own part of an
  epoch: ``replicate`` gives each the whole set, so it is refused there.

``data_issues`` returns the broken rules; ``data_lines`` the lines ``--check`` prints.
"""

from __future__ import annotations

from typing import List, Optional

from mnframe._internal.config_issue import ConfigIssue

# strategies under which every rank of a model group gets the same batch in the same order
IN_STEP = {
    "multi_node_iterator": "rank 0's batches are broadcast to every rank of the group",
    "synchronized": "every rank of the group iterates the same examples in the same order",
}


def _path(rank: int, stage: Optional[int] = None, key: Optional[str] = None) -> str:
    out = f"topology.ranks.{rank}"
    if stage is not None:
        out += f".stages.{stage}"
    return out + (f".{key}" if key else "")


def _ranks(ranks: List[int]) -> str:
    words = [str(r) for r in ranks]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def readers(topo) -> List[int]:
    """The ranks of the group that read batches (``dataset: input``)."""
    return [r for r, plan in enumerate(topo.ranks) if plan.dataset == "input"]


def loss_ranks(topo) -> List[int]:
    """The ranks of the group with the loss (``classifier: true``)."""
    return [r for r, plan in enumerate(topo.ranks) if plan.classifier]


def first_input(plan) -> str:
    """What a stage with ``rank_in: null`` of this rank is called with."""
    if plan.dataset == "empty":
        return "nothing (dataset: empty)"
    if plan.classifier:
        return "x (the loss keeps the labels t)"
    return "the whole batch (x, t)"


def _rank_issues(topo) -> List[ConfigIssue]:
    issues = []
    for r, plan in enumerate(topo.ranks):
        last = len(plan.stages) - 1
        if plan.dataset == "empty" and plan.stages[0].rank_in is None:
            issues.append(
                ConfigIssue(
                    _path(r, 0, "rank_in"),
                    f"rank {r} has an empty dataset, so its first stage gets no batch to read (rank_in: null)",
                    value=None,
                    allowed=f"the rank that sends it its input, or dataset: input on rank {r}",
                )
            )
        if plan.classifier and plan.dataset == "empty":
            issues.append(
                ConfigIssue(
                    _path(r, None, "dataset"),
                    f"rank {r} has the loss (classifier: true) but reads no labels (dataset: empty)",
                    value="empty",
                    allowed=f"dataset: input on rank {r} with dataset.strategy=multi_node_iterator "
                    "(its labels are then those of the batch rank 0 sends down the pipeline), "
                    "or the loss on the rank that reads the data",
                )
            )
        if plan.classifier and plan.stages[last].rank_out is not None:
            issues.append(
                ConfigIssue(
                    _path(r, last, "rank_out"),
                    f"rank {r} has the loss (classifier: true), so its last stage must keep its output "
                    f"(rank_out: null) for the loss",
                    value=plan.stages[last].rank_out,
                    allowed="null, or classifier: true on the rank whose last stage produces the output",
                )
            )
    return issues


def _strategy_issues(topo, strategy: str, world_size: Optional[int]) -> List[ConfigIssue]:
    issues = []
    reading = readers(topo)
    if len(reading) > 1 and strategy not in IN_STEP:
        losses = [r for r in loss_ranks(topo) if r in reading]
        why = (
            f"rank {losses[0]}'s labels (its loss) would belong to other examples than the inputs "
            f"rank {next(r for r in reading if r != losses[0])} sends down the pipeline"
            if losses
            else "their batches would not belong together"
        )
        issues.append(
            ConfigIssue(
                "dataset.strategy",
                f"ranks {_ranks(reading)} of the model group all read batches (dataset: input) and "
                f"{strategy!r} gives each rank its own batches: {why}",
                value=strategy,
                allowed="multi_node_iterator (rank 0's batch goes to every rank of the group) or "
                "synchronized; or dataset: empty on all ranks but one, with the loss on that one",
            )
        )
    if strategy == "multi_node_iterator" and reading and topo.ranks[0].dataset == "empty":
        issues.append(
            ConfigIssue(
                _path(0, None, "dataset"),
                "dataset.strategy=multi_node_iterator sends rank 0's batches to the group, but rank 0 "
                "reads none (dataset: empty)",
                value="empty",
                allowed="input",
            )
        )
    n = (world_size or 0) // topo.group_size
    if n > 1 and strategy == "replicate":
        issues.append(
            ConfigIssue(
                "dataset.strategy",
                f"with {n} replicas of the model group (world size {world_size}), 'replicate' gives "
                "every replica the whole data set, so the replicas would not split an epoch",
                value=strategy,
                allowed="scatter, shard, multi_node_iterator or synchronized",
            )
        )
    return issues


def data_issues(topo, dataset=None, world_size: Optional[int] = None) -> List[ConfigIssue]:
    """The broken data, label and loss rules of ``topo`` (``dataset``: the ``DatasetConfig``,
    None leaves the strategy rules out; ``world_size``: None leaves the replica rule out)."""
    issues = _rank_issues(topo)
    if dataset is not None and not issues:
        issues += _strategy_issues(topo, dataset.strategy, world_size)
    return issues


def data_lines(topo, dataset=None, world_size: Optional[int] = None) -> List[str]:
    """What ``--check`` says about the data: who reads, in step or not, where the loss is,
    what each stage that takes the batch gets, and how the replicas split an epoch."""
    strategy = getattr(dataset, "strategy", None)
    reading, losses = readers(topo), loss_ranks(topo)
    lines = []
    head = f"data (dataset.strategy={strategy}): " if strategy else "data: "
    head += f"rank{'s' if len(reading) > 1 else ''} {_ranks(reading)} read{'' if len(reading) > 1 else 's'} batches"
    if len(reading) > 1 and strategy in IN_STEP:
        head += f", the same batch in the same order ({IN_STEP[strategy]})"
    if losses:
        head += f"; loss on rank {_ranks(losses)}"
    lines.append(head if reading else "data: no rank reads batches")
    for r, plan in enumerate(topo.ranks):
        for i, stage in enumerate(plan.stages):
            if stage.rank_in is None:
                lines.append(f"  rank {r} stage {i} takes {first_input(plan)}")
    n = (world_size or 0) // topo.group_size
    if n > 1:
        lines.append(f"  {n} replicas: each gets 1/{n} of every epoch")
    return lines
