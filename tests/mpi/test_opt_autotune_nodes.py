"""optimizer.autotune across fake nodes (MNFRAME_FAKE_NODE_SIZE=2): 2 nodes x 2 ranks, and 2 + 1
(uneven). There the trial also tries hierarchical beside two_dimensional."""

import pytest
from test_opt_autotune import DEFAULT, _assert_same, _auto_cfg, _means, _steps, _train  # noqa: E402

import mnframe as chainermn
from mnframe.communicators import object_ops
from mnframe.config.schema import CommunicatorConfig, OptimizerConfig
from mnframe.optimizers import autotune

MPI_SIZES = (3, 4)
MPI_TIMEOUT = 240
MPI_ENV = {"MNFRAME_FAKE_NODE_SIZE": "2"}


@pytest.fixture(scope="module")
def comm():
    c = chainermn.create_communicator(DEFAULT)
    assert c.inter_size == 2
    yield c
    c.finalize()


def test_trial_across_nodes_is_bitwise_the_old_default(comm):
    opt_cfg, comm_cfg = _auto_cfg(bucket_cap_mb=0.01)
    steps = _steps(4)
    tuned, opt = _train(comm, opt_cfg, comm_cfg, steps=steps)
    plain, old = _train(comm, OptimizerConfig(name="momentum_sgd", lr=0.1, overlap=False), comm_cfg, steps)
    _assert_same(tuned, plain)
    tuner = opt._tuner
    names = [c.communicator for c in tuner.candidates]
    assert names == [DEFAULT, DEFAULT, "hierarchical", "hierarchical"]
    assert tuner.chosen is not None and len(tuner.decision) == 4
    assert len({str(c) for c in object_ops.allgather_obj(comm.mpi_comm, tuner.chosen)}) == 1
    assert opt.communicator.__class__.__name__.lower().startswith(tuner.chosen.communicator.replace("_", ""))
    opt.finalize()
    old.finalize()


def test_a_named_communicator_is_kept(comm):
    opt_cfg = OptimizerConfig(name="momentum_sgd", lr=0.1, autotune="all")
    model, opt = _train(comm, opt_cfg, CommunicatorConfig(name=DEFAULT), steps=2)
    assert {c.communicator for c in opt._tuner.candidates} == {DEFAULT}
    opt.finalize()


def test_without_a_spare_core_only_the_communicator_is_tried(comm):
    from mnframe.runtime.threads import has_spare_core, usable_cpus

    opt_cfg, comm_cfg = _auto_cfg(autotune=True)
    model, opt = _train(comm, opt_cfg, comm_cfg, steps=2)
    if has_spare_core(len(usable_cpus()), comm.size):  # the fake nodes are one machine
        assert len(opt._tuner.candidates) == 4
    else:
        assert opt._tuner.candidates == [autotune.Candidate(DEFAULT, False), autotune.Candidate("hierarchical", False)]
    opt.finalize()


@pytest.mark.parametrize("name", [n for n in autotune.EXACT_CPU if n != DEFAULT])
def test_exact_communicators_agree_bitwise_across_nodes(name):
    assert _means(name) == _means(DEFAULT)
