"""``allreduce_grad_dtype='auto'`` (communicators/wire_choice.py), 1-3 ranks, one fake node per rank.

The first calls alternate float16 and float32 on the wire; each call's mean is the same bits as
a communicator fixed to that wire, on every rank; then every rank keeps the wire the slowest
rank measured faster.
"""

import hashlib

import numpy as np
import pytest
from mpi4py import MPI

import mnframe as chainermn
from mnframe.communicators import registry, wire_choice

MPI_SIZES = (1, 2, 3)
MPI_TIMEOUT = 180
MPI_ENV = {"MNFRAME_FAKE_NODE_SIZE": "1"}  # every rank a node of its own: float16 crosses "links"

world = MPI.COMM_WORLD
NAMES = [n for n in registry.cpu_names() if n not in ("dummy", "single_node")]


def _model():
    import chainer
    import chainer.links as L

    m = chainer.Sequential(L.Linear(50, 30), L.Linear(30, 7))
    m(np.zeros((1, 50), np.float32))
    return m


def _set_grads(m, step):
    rs = np.random.RandomState(1000 * step + world.rank)
    for _, p in sorted(m.namedparams()):
        p.grad = rs.standard_normal(p.shape).astype(np.float32) * 1e-2


def _means(comm, m, step):
    _set_grads(m, step)
    comm.multi_node_mean_grad(m)
    return [p.grad.copy() for _, p in sorted(m.namedparams())]


def _digest(arrays):
    return hashlib.sha256(b"".join(a.tobytes() for a in arrays)).hexdigest()


@pytest.mark.parametrize("name", NAMES)
def test_each_call_is_one_wire_exactly_and_every_rank_agrees(name):
    auto = chainermn.create_communicator(name, allreduce_grad_dtype="auto")
    fixed = {w: chainermn.create_communicator(name, allreduce_grad_dtype=w) for w in (None, "float16")}
    m, ref = _model(), _model()
    calls = len(wire_choice._SCHEDULE) + 3
    for step in range(calls):
        got = _means(auto, m, step)
        want = {w: _means(c, ref, step) for w, c in fixed.items()}
        if world.size == 1:  # the mean over one rank is the gradient itself, whatever the wire
            assert _digest(got) == _digest(want[None])
            continue
        wire = [w for w in (None, "float16") if _digest(got) == _digest(want[w])]
        assert wire, f"call {step}: the mean is neither wire's"
        if step < len(wire_choice._SCHEDULE) and _digest(want[None]) != _digest(want["float16"]):
            assert wire == [wire_choice._SCHEDULE[step]], step
        assert len(set(world.allgather(_digest(got)))) == 1  # the same bits on every rank
    decisions = auto._wire_choice.decisions
    assert len(decisions) == (0 if world.size == 1 else 1)
    assert len({repr(sorted(decisions.items()))} | set(map(repr, world.allgather(sorted(decisions.items()))))) == 1
    for c in (auto, *fixed.values()):
        c.finalize()


def test_the_slowest_rank_decides():
    # float16 measures 1 s on rank 0 and 3 s on the others; float32 2 s everywhere: the
    # slowest rank's float16 (3 s) loses wherever there is more than one rank
    choice, key = wire_choice.WireChoice(), 42
    for wire in wire_choice._SCHEDULE:
        assert choice.wire_for(key) == wire
        seconds = 2.0 if wire is None else (1.0 if world.rank == 0 else 3.0)
        choice.record(world, key, wire, seconds)
    expected = "float16" if world.size == 1 else None
    assert choice.wire_for(key) == expected
    assert choice.decisions[key] == ((1.0 if world.size == 1 else 3.0), 2.0)
    choice.record(world, key, expected, 99.0)  # decided: later calls change nothing
    assert choice.wire_for(key) == expected


def test_untimed_first_calls_do_not_count():
    choice, key = wire_choice.WireChoice(), 7
    for i, wire in enumerate(wire_choice._SCHEDULE):
        seconds = 100.0 if i < 2 else (1.0 if wire == "float16" else 2.0)  # first calls allocate: slow
        choice.record(world, key, wire, seconds)
    assert choice.wire_for(key) == "float16"


def test_auto_is_a_valid_setting_and_a_typo_is_not():
    comm = chainermn.create_communicator("naive", allreduce_grad_dtype="auto")
    assert comm.allreduce_grad_dtype == "auto" and comm.get_config("allreduce_grad_dtype") == "auto"
    with pytest.raises(ValueError, match="'auto'"):
        comm.set_config("allreduce_grad_dtype", "autp")
    comm.finalize()
