"""optimizer.autotune (the runner's default): the trial steps are ordinary steps, so training is
bitwise the old default's; every rank keeps the same setting; an explicit option is never
overridden; the communicators it may pick give bitwise the default's means."""

import chainer
import numpy as np
import pytest
from test_opt_overlap import Net  # noqa: E402 (tests/mpi is on sys.path)

import mnframe as chainermn
from mnframe.builder.optimizer import build_optimizer
from mnframe.communicators import object_ops
from mnframe.config.schema import CommunicatorConfig, OptimizerConfig
from mnframe.optimizers import autotune

MPI_SIZES = (1, 2, 3)
MPI_TIMEOUT = 240

DEFAULT = "two_dimensional"


def _model():
    model = Net()
    rng = np.random.RandomState(0)
    for _, p in sorted(model.namedparams()):
        p.array[...] = rng.standard_normal(p.shape).astype(p.dtype) * 0.1
    return model


def _train(comm, opt_cfg, comm_cfg, steps, lossfun=True):
    """(model, optimizer) after ``steps`` updates built as the runner builds them."""
    model = _model()
    opt = build_optimizer(opt_cfg, model, comm, comm_cfg)
    data = np.random.RandomState(10 + comm.rank)
    for _ in range(steps):
        x = data.standard_normal((8, 12)).astype(np.float32)
        t = data.randint(0, 5, 8).astype(np.int32)
        if lossfun:
            opt.update(model, x, t)
        else:
            model.cleargrads()
            model(x, t).backward()
            opt.update()
    return model, opt


def _steps(n_candidates):
    return 1 + n_candidates * (autotune.TRIALS + 1) + 3  # broadcast-only, the trial, then 3 with the choice


def _assert_same(a, b):
    for (name, x), (_, y) in zip(sorted(a.namedparams()), sorted(b.namedparams())):
        assert x.array.tobytes() == y.array.tobytes(), name


@pytest.fixture(scope="module")
def comm():
    c = chainermn.create_communicator(DEFAULT)
    yield c
    c.finalize()


def _auto_cfg(**kw):
    """The runner's default; ``autotune=all``: overlap tried without a spare core too (this machine's
    ranks share its cores: the trial's whole set, as a machine with cores to spare runs it)."""
    kw.setdefault("autotune", "all")
    return OptimizerConfig(name="momentum_sgd", lr=0.1, **kw), CommunicatorConfig(name=DEFAULT, chosen_by_auto=True)


@pytest.mark.parametrize("cap", [None, 0.01])  # buckets sized to the model (one here), or many small ones
def test_trial_is_bitwise_the_old_default(comm, cap):
    opt_cfg, comm_cfg = _auto_cfg(bucket_cap_mb=cap)
    tuned, opt = _train(comm, opt_cfg, comm_cfg, steps=20)
    old_cfg = OptimizerConfig(name="momentum_sgd", lr=0.1, overlap=False)
    plain, old = _train(comm, old_cfg, CommunicatorConfig(name=DEFAULT), steps=20)
    assert old._tuner is None and old._overlap is None
    _assert_same(tuned, plain)
    assert opt.t == old.t == 19  # the first update only broadcasts
    if comm.size == 1:
        assert opt._tuner is None  # nothing to average: no trial
        return
    tuner = opt._tuner
    n = len(tuner.candidates)
    assert n == (2 if cap else 3)  # no overlap, overlap with each bucket size; one node: one communicator
    assert _steps(n) <= 20 and tuner.chosen is not None and len(tuner.decision) == n
    assert tuner.candidates[0] == autotune.Candidate(DEFAULT, False)  # the old default first
    # every rank keeps the same setting, and the optimizer runs it
    assert len({str(c) for c in object_ops.allgather_obj(comm.mpi_comm, tuner.chosen)}) == 1
    assert (opt._overlap is not None) == tuner.chosen.overlap
    if cap and tuner.chosen.overlap:
        assert opt._overlap.stats["buckets"] > 3
    opt.finalize()
    old.finalize()


def test_overlap_is_tried_only_with_a_spare_core(comm):
    """``autotune=true`` leaves overlap out where a rank has no core to spare for its thread."""
    from mnframe.runtime.threads import has_spare_core, usable_cpus

    opt_cfg, comm_cfg = _auto_cfg(autotune=True)
    model, opt = _train(comm, opt_cfg, comm_cfg, steps=2)
    spare = has_spare_core(len(usable_cpus()), comm.size)  # every rank of these tests on this machine
    if comm.size == 1:
        assert opt._tuner is None
    elif spare:
        assert [c.overlap for c in opt._tuner.candidates] == [False, True, True]
    else:
        assert opt._tuner is None and opt._overlap is None  # one node: nothing else to try
    opt.finalize()


def test_explicit_options_win(comm):
    base = dict(name="momentum_sgd", lr=0.1)
    for cfg, overlap in [
        (OptimizerConfig(**base, overlap=False), False),
        (OptimizerConfig(**base, overlap=True), True),
        (OptimizerConfig(**base, overlap=True, bucket_cap_mb=0.01), True),
        (OptimizerConfig(**base, autotune=False), False),
        (OptimizerConfig(**base, double_buffering=True), False),
    ]:
        # communicator named by the user (not chosen_by_auto): only overlap could be tried, and it is set
        model, opt = _train(comm, cfg, CommunicatorConfig(name=DEFAULT), steps=3)
        assert opt._tuner is None, cfg
        assert (opt._overlap is not None) == overlap, cfg
        if cfg.bucket_cap_mb:
            assert opt._overlap.bucket_cap_mb == 0.01
        opt.finalize()
    # numerics the user chose end the trial too
    for comm_cfg in [
        CommunicatorConfig(name=DEFAULT, chosen_by_auto=True, allreduce_grad_dtype="auto"),
        CommunicatorConfig(name=DEFAULT, chosen_by_auto=True, compression="powersgd"),
    ]:
        opt = build_optimizer(OptimizerConfig(**base), _model(), comm, comm_cfg)
        assert opt._tuner is None and opt._overlap is None
        opt.finalize()


def test_update_without_lossfun_keeps_the_old_default(comm):
    opt_cfg, comm_cfg = _auto_cfg(bucket_cap_mb=0.01)
    tuned, opt = _train(comm, opt_cfg, comm_cfg, steps=5, lossfun=False)
    plain, old = _train(comm, OptimizerConfig(name="momentum_sgd", lr=0.1, overlap=False), comm_cfg, 5, False)
    _assert_same(tuned, plain)
    if comm.size > 1:
        assert opt._tuner.chosen == autotune.Candidate(DEFAULT, False) and opt._overlap is None
    opt.finalize()
    old.finalize()


def _means(name):
    c = chainermn.create_communicator(name)
    m = chainer.Chain()
    with m.init_scope():
        m.a = chainer.links.Linear(300, 700)
        m.b = chainer.links.Linear(700, 10)
    rng = np.random.default_rng(c.rank + 7)
    for _, p in sorted(m.namedparams()):
        p.grad = (rng.standard_normal(p.shape) * rng.choice([1e-3, 1.0, 1e3], p.shape)).astype(np.float32)
    c.multi_node_mean_grad(m)
    c.finalize()
    return [p.grad.tobytes() for _, p in sorted(m.namedparams())]


@pytest.mark.parametrize("name", [n for n in autotune.EXACT_CPU if n != DEFAULT])
def test_exact_communicators_agree_bitwise(name):
    """Gradients over six orders of magnitude: any change of summation order shows."""
    assert _means(name) == _means(DEFAULT)
