"""LossRankReport: the loss rank's observations reach rank 0 of its model-parallel group.

Under model parallelism the loss (``classifier: true``) may live on any rank of the
group, but the log, the plots, the printed table and the "done" line are written by
world rank 0. After every iteration (and after the evaluator, which reports on every
rank) this extension broadcasts the loss rank's numeric observations (``main/loss``,
``main/accuracy``, ``validation/main/...``) over the model communicator, and rank 0
of the group adds those it does not have itself, before the LogReport reads them.
Every rank of the group runs it (one small broadcast per iteration).
"""

from __future__ import annotations

from chainer.training import extension


def _number(value):
    try:
        return float(getattr(value, "array", value))
    except (TypeError, ValueError):
        return None


class LossRankReport(extension.Extension):
    """Copy the numeric observations of ``loss_rank`` of ``comm`` to rank 0 of ``comm``."""

    trigger = (1, "iteration")
    priority = extension.PRIORITY_EDITOR  # after the evaluator (writer), before LogReport (reader)

    def __init__(self, comm, loss_rank: int):
        self.comm = comm
        self.loss_rank = int(loss_rank)

    def __call__(self, trainer):
        observation = trainer.observation
        mine = None
        if self.comm.rank == self.loss_rank:
            mine = {k: v for k, v in ((k, _number(v)) for k, v in observation.items()) if v is not None}
        values = self.comm.bcast_obj(mine, root=self.loss_rank)
        if self.comm.rank == 0:
            for key, value in values.items():
                observation.setdefault(key, value)


def loss_rank_to_report(plan_ranks) -> int:
    """The one rank of the group with the loss that is not rank 0, else -1 (nothing to forward)."""
    losses = [r for r, plan in enumerate(plan_ranks) if plan.classifier]
    return losses[0] if len(losses) == 1 and losses[0] != 0 else -1
