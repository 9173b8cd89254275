"""The loss rank's metrics reach rank 0 of its model-parallel group (issue 41, item 2)."""

from types import SimpleNamespace

import numpy as np

from mnframe.config.schema import ModelParallelTopology
from mnframe.extensions.loss_rank_report import LossRankReport, loss_rank_to_report


class FakeComm:
    """One rank's view of a broadcast whose root's object is ``sent``."""

    def __init__(self, rank, sent):
        self.rank, self.sent, self.roots = rank, sent, []

    def bcast_obj(self, obj, root=0):
        self.roots.append(root)
        return obj if self.rank == root else self.sent


def test_rank_0_gets_the_loss_ranks_numbers_and_keeps_its_own():
    import chainer

    loss_rank = SimpleNamespace(observation={"main/loss": chainer.Variable(np.array(0.5, np.float32)), "text": "x"})
    sent = {}
    comm = FakeComm(2, None)
    comm.bcast_obj = lambda obj, root=0: sent.update(obj, root=root) or obj  # what the loss rank broadcasts
    LossRankReport(comm, 2)(loss_rank)
    assert sent == {"main/loss": 0.5, "root": 2}  # numbers only, from the loss rank
    rank0 = SimpleNamespace(observation={"main/loss": 9.0})
    rank0_comm = FakeComm(0, {"main/loss": 0.5, "main/accuracy": 0.9, "validation/main/accuracy": 0.8})
    LossRankReport(rank0_comm, 2)(rank0)
    assert rank0_comm.roots == [2]
    assert rank0.observation == {"main/loss": 9.0, "main/accuracy": 0.9, "validation/main/accuracy": 0.8}
    middle = SimpleNamespace(observation={})
    LossRankReport(FakeComm(1, {"main/loss": 0.5}), 2)(middle)
    assert middle.observation == {}  # only rank 0 of the group writes the log


def test_forwarded_only_when_one_loss_is_away_from_rank_0():
    def topo(*classifiers):
        stage = {"module": {"_target_": "x.y"}}
        plans = [{"classifier": c, "stages": [stage]} for c in classifiers]
        return ModelParallelTopology.model_validate({"ranks": plans}).ranks

    assert loss_rank_to_report(topo(False, False, True)) == 2
    assert loss_rank_to_report(topo(True, False, False)) == -1
    assert loss_rank_to_report(topo(False, False)) == -1
