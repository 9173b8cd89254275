"""The optimizer wrapper's forwarding and synchronisation logic, with a one-rank fake communicator."""

import chainer
import chainer.links as L
import numpy as np

from mnframe.iterators import start_method
from mnframe.optimizers import create_multi_node_optimizer


class FakeComm:
    """Records calls; with one rank, broadcast and mean are identities."""

    rank, size = 0, 1
    mpi_comm = None

    def __init__(self):
        self.calls = []

    def bcast_data(self, _model):
        self.calls.append("bcast")

    def multi_node_mean_grad(self, _model, zero_fill=False):
        self.calls.append(("mean", zero_fill))


def test_forwarding_and_schedule():
    comm = FakeComm()
    model = L.Linear(3, 2)
    actual = chainer.optimizers.SGD(lr=0.5)
    opt = create_multi_node_optimizer(actual, comm, zero_fill=False)
    assert opt.setup(model) is opt and comm.calls == ["bcast"]
    opt.lr = 0.25
    assert actual.lr == 0.25 and opt.lr == 0.25
    assert opt.actual_optimizer is actual and "actual_optimizer" not in vars(actual)
    x = np.ones((4, 3), np.float32)
    opt.update(lambda x: chainer.functions.sum(model(x)), x)
    assert comm.calls == ["bcast", "bcast"] and actual.t == 0  # ChainerMN: the first update only broadcasts
    opt.update(lambda x: chainer.functions.sum(model(x)), x)
    assert comm.calls == ["bcast", "bcast", ("mean", False)] and actual.t == 1


def test_lazy_link_broadcast_skips_that_step():
    comm = FakeComm()
    model = L.Linear(None, 2)
    opt = create_multi_node_optimizer(chainer.optimizers.SGD(), comm).setup(model)
    x = np.ones((2, 3), np.float32)
    loss = lambda x: chainer.functions.sum(model(x))  # noqa: E731
    opt.update(loss, x)
    assert comm.calls == ["bcast", "bcast"] and opt.t == 0
    opt.update(loss, x)
    assert comm.calls[-1] == ("mean", True) and opt.t == 1


def test_start_method_keeps_an_explicit_choice(monkeypatch):
    import multiprocessing

    monkeypatch.setattr(multiprocessing, "get_start_method", lambda allow_none=False: "spawn")  # noqa: ARG005 - get_start_method's keyword
    assert start_method.use_safe_start_method() == "spawn"


def test_bad_arguments_say_what_to_pass():
    import pytest

    with pytest.raises(TypeError, match="chainer.Optimizer"):
        create_multi_node_optimizer(object(), FakeComm())
    with pytest.raises(TypeError, match="create_communicator"):
        create_multi_node_optimizer(chainer.optimizers.SGD(), object())


def test_generic_evaluator_without_communicator():
    import numpy as np

    from mnframe.extensions.evaluator import GenericMultiNodeEvaluator

    class Count(GenericMultiNodeEvaluator):
        def calc_local(self, x):
            return len(x)

    it = chainer.iterators.SerialIterator([np.zeros(1, np.float32)] * 5, 2, repeat=False, shuffle=False)
    assert Count(None, it, None)() == [2, 2, 1]


def _trained_state(updates):
    """The serialized state of a wrapper after ``updates`` updates."""
    model = L.Linear(3, 2)
    opt = create_multi_node_optimizer(chainer.optimizers.SGD(), FakeComm()).setup(model)
    for _ in range(updates):
        opt.update(lambda x: chainer.functions.sum(model(x)), np.ones((1, 3), np.float32))
    state = {}
    opt.serialize(chainer.serializers.DictionarySerializer(state))
    return state


def test_needs_broadcast_flag_for_the_checkpointer():
    comm = FakeComm()
    model = L.Linear(3, 2)
    actual = chainer.optimizers.SGD()
    actual.setup(model)
    opt = create_multi_node_optimizer(actual, comm)
    assert opt.needs_broadcast and hasattr(opt, "needs_broadcast")
    opt.serialize(chainer.serializers.NpzDeserializer(_trained_state(1)))  # maybe_load loads the trainer
    opt.needs_broadcast = False  # then says every rank resumed the same iteration
    assert not opt.needs_broadcast and "needs_broadcast" not in vars(actual)
    opt.update(lambda x: chainer.functions.sum(model(x)), np.ones((1, 3), np.float32))
    assert comm.calls == [("mean", True)] and opt.t == 1


def test_resume_repeats_the_broadcast_only_update_when_it_was_not_made():
    for updates, first_call in ((0, "bcast"), (1, ("mean", True)), (2, ("mean", True))):
        state = _trained_state(updates)
        assert state["multi_node_broadcast_done"] == (updates > 0) and state["t"] == max(updates - 1, 0)
        comm = FakeComm()
        model = L.Linear(3, 2)
        opt = create_multi_node_optimizer(chainer.optimizers.SGD(), comm).setup(model)
        opt.serialize(chainer.serializers.NpzDeserializer(state))
        opt.update(lambda x: chainer.functions.sum(model(x)), np.ones((1, 3), np.float32))  # noqa: B023
        assert comm.calls == ["bcast", first_call] and opt.t == max(updates - 1, 0) + (updates > 0)


def test_state_without_the_flag_gives_chainermn_behaviour():
    """A file written by ChainerMN or a plain optimizer: the next update only broadcasts, as ChainerMN's would."""
    state = _trained_state(3)
    del state["multi_node_broadcast_done"]
    comm = FakeComm()
    model = L.Linear(3, 2)
    opt = create_multi_node_optimizer(chainer.optimizers.SGD(), comm).setup(model)
    opt.serialize(chainer.serializers.NpzDeserializer(state))
    assert opt.t == 2
    opt.update(lambda x: chainer.functions.sum(model(x)), np.ones((1, 3), np.float32))
    assert comm.calls == ["bcast", "bcast"] and opt.t == 2
