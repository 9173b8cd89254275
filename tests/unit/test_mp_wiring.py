"""Model-parallel pieces that need no MPI: wiring validation, the wiring
description, argument checks of the functions, and pseudo_connect."""

import chainer
import chainer.functions as F
import chainer.links as L
import numpy as np
import pytest

import mnframe
import mnframe.functions as mnf
from mnframe.links.chain_list import ComponentWiring


class FakeComm:
    """Only what validation reads; any communication would fail loudly."""

    def __init__(self, rank, size):
        self.rank, self.size = rank, size

    def __getattr__(self, name):
        raise AssertionError(f"validation must not communicate (called comm.{name})")


def test_wiring_is_normalized_and_read_only():
    model = mnframe.MultiNodeChainList(FakeComm(0, 4))
    model.add_link(L.Linear(2, 3), rank_in=None, rank_out=1)
    model.add_link(L.Linear(3, 2), rank_in=[1, 2], rank_out=None)
    model.add_link(L.Linear(2, 2), rank_in=None, rank_out=(3, 1))
    wiring = model.wiring()
    assert wiring == [("0:Linear", None, (1,)), ("1:Linear", (1, 2), None), ("2:Linear", None, (3, 1))]
    assert all(isinstance(w, ComponentWiring) for w in wiring)
    name, rank_in, rank_out = wiring[1]
    assert rank_in == (1, 2)
    wiring.clear()
    assert len(model.wiring()) == 3 and len(model) == 3


@pytest.mark.parametrize(
    "rank_in,rank_out,match",
    [
        (None, 4, r"component 0:Linear: rank_out=4 names rank\(s\) \[4\] outside the communicator \(ranks 0..3"),
        ([1, -1], None, r"component 0:Linear: rank_in=\[1, -1\] names rank\(s\) \[-1\]"),
        (
            2,
            None,
            r"component 0:Linear: rank_in=2 receives from this process's own rank 2 1 time\(s\), "
            r"but earlier components sent to it only 0",
        ),
        ([], None, r"rank_in=\[\] must be an int, a non-empty list"),
        (True, None, r"rank_in=True must be an int"),
        ("1", None, r"rank_in='1' must be an int"),
    ],
)
def test_wrong_wiring_names_component_and_ranks(rank_in, rank_out, match):
    model = mnframe.MultiNodeChainList(FakeComm(2, 4))
    with pytest.raises(ValueError, match=match):
        model.add_link(L.Linear(2, 2), rank_in=rank_in, rank_out=rank_out)
    assert len(model) == 0 and model.wiring() == []


def test_hand_offs_to_the_own_rank_are_counted_in_order():
    """ChainerMN's branching/twisting wiring: sending to the own rank is allowed, receiving needs an earlier send."""
    model = mnframe.MultiNodeChainList(FakeComm(2, 4))
    model.add_link(L.Linear(2, 2), rank_in=None, rank_out=[0, 2, 2])
    model.add_link(L.Linear(2, 2), rank_in=2, rank_out=2)
    model.add_link(L.Linear(2, 2), rank_in=[2, 2], rank_out=None)
    assert model.wiring()[0] == ("0:Linear", None, (0, 2, 2))
    with pytest.raises(
        ValueError,
        match=r"component 3:Linear: rank_in=\[2, 1\] receives from this process's own "
        r"rank 2 1 time\(s\), but earlier components sent to it only 0",
    ):
        model.add_link(L.Linear(2, 2), rank_in=[2, 1], rank_out=3)
    assert len(model) == 3


def test_only_one_component_returns_model_outputs():
    model = mnframe.MultiNodeChainList(FakeComm(0, 2))
    model.add_link(L.Linear(2, 2), rank_in=1, rank_out=None)
    with pytest.raises(ValueError, match="component 1:Linear: rank_out=None .* component 0:Linear"):
        model.add_link(L.Linear(2, 2), rank_in=None, rank_out=None)


def test_point_to_point_rejects_bad_peers_before_communicating():
    comm = FakeComm(1, 3)
    x = chainer.Variable(np.zeros(2, np.float32))
    with pytest.raises(ValueError, match="own rank"):
        mnf.send(x, comm, rank=1)
    with pytest.raises(ValueError, match="own rank"):
        mnf.recv(comm, rank=1)
    with pytest.raises(ValueError, match=r"outside the communicator \(ranks 0..2\)"):
        mnf.recv(comm, rank=3)
    with pytest.raises(TypeError, match="must be an int"):
        mnf.send(x, comm, rank=None)
    with pytest.raises(ValueError, match="root=3"):
        mnf.bcast(comm, x, root=3)


def test_n_step_rnn_wrapper_checks_link_and_ranks():
    comm = FakeComm(0, 2)
    with pytest.raises(ValueError, match="NStep"):
        mnframe.links.create_multi_node_n_step_rnn(L.Linear(2, 2), comm)
    with pytest.raises(ValueError, match="rank_out"):
        mnframe.links.create_multi_node_n_step_rnn(L.NStepLSTM(1, 2, 2, 0.0), comm, rank_out=0)
    link = mnframe.links.create_multi_node_n_step_rnn(L.NStepGRU(1, 2, 2, 0.0), comm, rank_in=1)
    assert link.n_cells == 1 and link.rank_in == 1 and link.rank_out is None


def test_n_step_rnn_without_peers_is_the_plain_rnn():
    rnn = L.NStepLSTM(1, 2, 3, 0.0)
    link = mnframe.links.create_multi_node_n_step_rnn(rnn, FakeComm(0, 1))
    xs = [np.ones((2, 2), np.float32)]
    hy, cy, ys, delegate = link(xs)
    hy2, cy2, ys2 = rnn(None, None, xs)
    assert delegate is None
    np.testing.assert_array_equal(ys[0].array, ys2[0].array)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_pseudo_connect_passes_values_and_gradients(dtype):
    x = chainer.Variable(np.arange(3, dtype=dtype))
    delegate_source = chainer.Variable(np.ones(2, np.float32))
    delegate = delegate_source * 2.0
    y, z = mnf.pseudo_connect(delegate, x * 3.0, x)
    assert y.dtype == dtype
    np.testing.assert_array_equal(z.array, x.array)
    F.sum(y + z).backward()
    np.testing.assert_array_equal(x.grad, np.full(3, 4, dtype))
    # the delegate was visited (a zero gradient), so the graph behind it was too
    np.testing.assert_array_equal(delegate_source.grad, np.zeros(2, np.float32))


def test_pseudo_connect_without_delegate_and_without_values():
    x = chainer.Variable(np.ones(2, np.float32))
    (y,) = mnf.pseudo_connect(None, x)
    F.sum(y).backward()
    np.testing.assert_array_equal(x.grad, np.ones(2, np.float32))
    with pytest.raises(ValueError, match="at least one"):
        mnf.pseudo_connect(x)


def test_pseudo_connect_stays_a_function_after_importing_its_module():
    import importlib

    importlib.import_module("mnframe.functions.connect")
    x = chainer.Variable(np.ones(2, np.float32))
    (y,) = mnframe.functions.pseudo_connect(None, x)
    np.testing.assert_array_equal(y.array, x.array)


def test_numpy_integer_ranks_are_accepted():
    model = mnframe.MultiNodeChainList(FakeComm(0, 3))
    model.add_link(L.Linear(2, 2), rank_in=np.int64(1), rank_out=[np.int32(2)])
    assert model.wiring() == [("0:Linear", (1,), (2,))]
    assert all(type(r) is int for r in model.wiring()[0].rank_in + model.wiring()[0].rank_out)


def test_names_that_are_also_module_paths_stay_functions():
    """ChainerMN's ``functions.pseudo_connect`` and ``links.create_mnbn_model`` are modules
    and functions at once: importing the module paths must not shadow the functions."""
    import importlib

    import mnframe.functions
    import mnframe.links

    importlib.import_module("mnframe.functions.pseudo_connect")
    importlib.import_module("mnframe.links.create_mnbn_model")
    assert callable(mnframe.functions.pseudo_connect) and callable(mnframe.links.create_mnbn_model)
