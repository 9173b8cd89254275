"""Data-parallel training under MPI: optimizer equivalence, double buffering, evaluator, MNIST tutorial.

Expectations are computed in-process: one model trained on the concatenation of
every rank's batch (the global batch) must end where the data-parallel ranks end.
"""

import chainer
import chainer.functions as F
import chainer.links as L
import numpy as np
import pytest

import mnframe as chainermn

MPI_SIZES = (1, 2, 3)
MPI_TIMEOUT = 120

LOCAL_BATCH = 4
STEPS = 3


@pytest.fixture(scope="module")
def comm():
    return chainermn.create_communicator("naive")


class MLP(chainer.Chain):
    def __init__(self, seed, n_in=5, n_hidden=6, n_out=3):
        super().__init__()
        init = chainer.initializers.Normal(0.5, dtype=np.float32)
        with chainer.using_config("dtype", np.float32):
            np.random.seed(seed)
            with self.init_scope():
                self.l1 = L.Linear(n_in, n_hidden, initialW=init)
                self.l2 = L.Linear(n_hidden, n_out, initialW=init)

    def forward(self, x):
        return self.l2(F.tanh(self.l1(x)))


def _global_batch(step, size):
    rng = np.random.RandomState(100 + step)
    x = rng.randn(LOCAL_BATCH * size, 5).astype(np.float32)
    t = rng.randint(0, 3, LOCAL_BATCH * size).astype(np.int32)
    return x, t


def _lossfun(model):
    return lambda x, t: F.softmax_cross_entropy(model(x), t)


OPTIMIZERS = {
    "adam": lambda: chainer.optimizers.Adam(alpha=0.01),
    "momentum": lambda: chainer.optimizers.MomentumSGD(lr=0.1, momentum=0.9),
}


def _params(model):
    return {name: p.array.copy() for name, p in sorted(model.namedparams())}


@pytest.mark.parametrize("opt_name", sorted(OPTIMIZERS))
@pytest.mark.parametrize("weight_decay", [False, True])
def test_equivalence_with_single_process(comm, opt_name, weight_decay):
    model = MLP(seed=comm.rank)  # different on every rank: the wrapper must broadcast rank 0's
    opt = chainermn.create_multi_node_optimizer(OPTIMIZERS[opt_name](), comm).setup(model)
    ref = MLP(seed=0)
    ref_opt = OPTIMIZERS[opt_name]()
    ref_opt.setup(ref)
    if weight_decay:
        opt.add_hook(chainer.optimizer_hooks.WeightDecay(0.01))
        ref_opt.add_hook(chainer.optimizer_hooks.WeightDecay(0.01))
    r = comm.rank
    for step in range(STEPS):
        x, t = _global_batch(step, comm.size)
        local = slice(r * LOCAL_BATCH, (r + 1) * LOCAL_BATCH)
        opt.update(_lossfun(model), x[local], t[local])
        if step > 0:  # as in ChainerMN, the first update only broadcasts rank 0's parameters
            ref_opt.update(_lossfun(ref), x, t)
    assert opt.t == ref_opt.t == STEPS - 1
    for name, value in _params(ref).items():
        np.testing.assert_allclose(_params(model)[name], value, rtol=1e-5, atol=1e-6, err_msg=name)


def test_wrapper_forwards_attributes_and_serializes(comm):
    model = MLP(seed=comm.rank)
    actual = chainer.optimizers.MomentumSGD(lr=0.1)
    opt = chainermn.create_multi_node_optimizer(actual, comm)
    assert opt.setup(model) is opt
    opt.lr = 0.05
    assert actual.lr == 0.05 and opt.target is model
    opt.add_hook(chainer.optimizer_hooks.GradientClipping(1.0))
    assert "GradientClipping" in actual._hookable._pre_update_hooks
    x, t = _global_batch(0, 1)
    opt.update(_lossfun(model), x, t)  # broadcast only
    opt.update(_lossfun(model), x, t)
    saved = {}
    opt.serialize(chainer.serializers.DictionarySerializer(saved))
    assert saved["t"] == 1 and saved["multi_node_broadcast_done"] == 1
    other = chainermn.create_multi_node_optimizer(chainer.optimizers.MomentumSGD(lr=0.1), comm)
    other.setup(MLP(seed=0))
    other.serialize(chainer.serializers.NpzDeserializer(saved))
    assert other.t == 1


def test_update_without_lossfun(comm):
    """The StandardUpdater-free path: the caller runs backward, update() averages and steps."""
    model = MLP(seed=comm.rank)
    opt = chainermn.create_multi_node_optimizer(chainer.optimizers.SGD(lr=1.0), comm).setup(model)
    for p in model.params():
        p.grad = np.full_like(p.array, comm.rank)
    opt.update()  # the first update broadcasts rank 0's parameters, no step
    assert opt.t == 0
    before = _params(model)
    for name, value in comm.mpi_comm.bcast(before, root=0).items():
        np.testing.assert_array_equal(before[name], value)
    opt.update()
    assert opt.t == 1
    mean = (comm.size - 1) / 2
    for name, p in sorted(model.namedparams()):
        np.testing.assert_allclose(p.array, before[name] - mean, rtol=1e-6)


def test_lazy_parameters_are_broadcast(comm):
    np.random.seed(comm.rank)
    model = L.Linear(None, 2)
    opt = chainermn.create_multi_node_optimizer(chainer.optimizers.SGD(lr=0.1), comm).setup(model)
    x = np.random.RandomState(comm.rank).randn(3, 4).astype(np.float32)
    loss = lambda x: F.sum(model(x))  # noqa: E731
    opt.update(loss, x)  # W appears in this forward: broadcast, no step
    assert opt.t == 0
    gathered = comm.mpi_comm.allgather(model.W.array)
    assert all(np.array_equal(g, gathered[0]) for g in gathered)
    opt.update(loss, x)
    assert opt.t == 1
    gathered = comm.mpi_comm.allgather(model.W.array)
    assert all(np.array_equal(g, gathered[0]) for g in gathered)


def test_double_buffering_is_one_step_stale(comm):
    """Update t steps with mean(g_{t-1}); as in ChainerMN the first update only broadcasts
    and the second only starts the averaging."""
    steps = STEPS + 1
    model = MLP(seed=comm.rank)
    opt = chainermn.create_multi_node_optimizer(
        chainer.optimizers.MomentumSGD(lr=0.1), comm, double_buffering=True
    ).setup(model)
    ref = MLP(seed=0)
    ref_opt = chainer.optimizers.MomentumSGD(lr=0.1)
    ref_opt.setup(ref)
    previous = None
    r = comm.rank
    for step in range(steps):
        x, t = _global_batch(step, comm.size)
        local = slice(r * LOCAL_BATCH, (r + 1) * LOCAL_BATCH)
        opt.update(_lossfun(model), x[local], t[local])
        if step == 0:
            continue  # broadcast only: these gradients are dropped
        ref.cleargrads()
        _lossfun(ref)(x, t).backward()
        fresh = {name: p.grad.copy() for name, p in ref.namedparams()}
        if previous is not None:
            for name, p in ref.namedparams():
                p.grad = previous[name]
            ref_opt.update()
        previous = fresh
    opt.wait()
    assert opt.t == ref_opt.t == steps - 2
    for name, value in _params(ref).items():
        np.testing.assert_allclose(_params(model)[name], value, rtol=1e-5, atol=1e-6, err_msg=name)


# ---- evaluator ----------------------------------------------------------------------------


class Reporter(chainer.Chain):
    """Reports the mean of its input's first column as 'value'."""

    def forward(self, x):
        chainer.report({"value": F.mean(x[:, 0])}, self)


def _unequal_shard(comm):
    """Rank r holds r + 1 examples (full batches of 1) with value 10 * r + i."""
    return [np.array([10.0 * comm.rank + i], np.float32) for i in range(comm.rank + 1)]


def test_evaluator_weights_by_examples(comm):
    shard = _unequal_shard(comm)
    it = chainer.iterators.SerialIterator(shard, 1, repeat=False, shuffle=False)
    base = chainer.training.extensions.Evaluator(it, Reporter())
    ev = chainermn.create_multi_node_evaluator(base, comm)
    assert isinstance(ev, chainer.training.extensions.Evaluator)
    assert type(base) is chainer.training.extensions.Evaluator  # the original is untouched
    result = ev()
    everything = [10.0 * r + i for r in range(comm.size) for i in range(r + 1)]
    np.testing.assert_allclose(result["main/value"], np.mean(everything), rtol=1e-6)
    np.testing.assert_allclose(base()["main/value"], np.mean([e[0] for e in shard]), rtol=1e-6)


class CustomEvaluator(chainer.training.extensions.Evaluator):
    """A user subclass with its own evaluate (reports the mean example)."""

    def evaluate(self):
        it = self.get_iterator("main")
        it.reset()
        values = [float(e[0]) for batch in it for e in batch]
        return {"custom": np.mean(values)}


def test_custom_evaluator_subclass(comm):
    shard = _unequal_shard(comm)
    it = chainer.iterators.SerialIterator(shard, 2, repeat=False, shuffle=False)
    ev = chainermn.create_multi_node_evaluator(CustomEvaluator(it, Reporter()), comm)
    assert isinstance(ev, CustomEvaluator)
    everything = [10.0 * r + i for r in range(comm.size) for i in range(r + 1)]
    np.testing.assert_allclose(ev.evaluate()["custom"], np.mean(everything), rtol=1e-6)
    ev.serialize(chainer.serializers.DictionarySerializer({}))  # still a (serializable) extension


class FailsOnLastRank(chainer.training.extensions.Evaluator):
    def evaluate(self):
        from mpi4py import MPI

        if MPI.COMM_WORLD.rank == MPI.COMM_WORLD.size - 1:
            raise ValueError("broken shard")
        return {"x": 1.0}


def test_evaluator_error_on_one_rank_raises_everywhere(comm):
    it = chainer.iterators.SerialIterator([np.zeros(1, np.float32)], 1, repeat=False)
    ev = chainermn.create_multi_node_evaluator(FailsOnLastRank(it, Reporter()), comm)
    with pytest.raises((ValueError, RuntimeError), match="broken shard"):
        ev.evaluate()


class SumEvaluator(chainermn.GenericMultiNodeEvaluator):
    def calc_local(self, x):
        return float(x.sum())

    def aggregate(self, results):
        return sum(results), len(results)


def test_generic_multi_node_evaluator(comm):
    n = 3 + 9 * comm.rank  # more than one gather round on ranks > 0
    data = [np.array([1.0], np.float32)] * n
    it = chainer.iterators.SerialIterator(data, 1, repeat=False, shuffle=False)
    root = comm.size - 1
    result = SumEvaluator(comm, it, None, root=root)()
    total = sum(3 + 9 * r for r in range(comm.size))
    assert result == ((float(total), total) if comm.rank == root else None)


# ---- the spec's MNIST tutorial, end to end -------------------------------------------------


def _digits():
    """scikit-learn's 8x8 digits (shipped with the package, no download), as float32 and int32.

    Read straight from the package's data file: importing sklearn costs seconds.
    """
    import importlib.util
    import os

    spec = importlib.util.find_spec("sklearn")
    path = os.path.join(spec.submodule_search_locations[0], "datasets", "data", "digits.csv.gz")
    if os.path.exists(path):
        raw = np.loadtxt(path, delimiter=",")
        data, target = raw[:, :-1], raw[:, -1]
    else:  # a layout change in sklearn: take the slow, public way
        from sklearn.datasets import load_digits

        digits = load_digits()
        data, target = digits.data, digits.target
    return (data / 16.0).astype(np.float32), target.astype(np.int32)


def test_mnist_tutorial_end_to_end(comm, tmp_path_factory):
    """001's tutorial with load_digits (no download): communicator, optimizer, scatter, evaluator."""
    from chainer import training
    from chainer.training import extensions

    class MLP3(chainer.Chain):
        def __init__(self, n_units, n_out):
            super().__init__()
            with self.init_scope():
                self.l1 = L.Linear(None, n_units)
                self.l2 = L.Linear(None, n_out)

        def forward(self, x):
            return self.l2(F.relu(self.l1(x)))

    model = L.Classifier(MLP3(32, 10))
    optimizer = chainermn.create_multi_node_optimizer(chainer.optimizers.Adam(alpha=0.01), comm)
    optimizer.setup(model)
    if comm.rank == 0:  # only the root reads the data
        x, y = _digits()
        train = chainer.datasets.TupleDataset(x[:1200], y[:1200])
        test = chainer.datasets.TupleDataset(x[1200:], y[1200:])
    else:
        train, test = None, None
    train = chainermn.scatter_dataset(train, comm, shuffle=True)
    test = chainermn.scatter_dataset(test, comm, shuffle=True)
    train_iter = chainer.iterators.SerialIterator(train, 32)
    test_iter = chainer.iterators.SerialIterator(test, 64, repeat=False, shuffle=False)
    updater = training.StandardUpdater(train_iter, optimizer)
    out = tmp_path_factory.mktemp(f"mnist{comm.rank}")
    trainer = training.Trainer(updater, (40, "iteration"), out=str(out))
    evaluator = extensions.Evaluator(test_iter, model)
    trainer.extend(chainermn.create_multi_node_evaluator(evaluator, comm), trigger=(20, "iteration"))
    if comm.rank == 0:
        trainer.extend(extensions.LogReport(trigger=(20, "iteration")))
    trainer.run()
    final = {n: p.array for n, p in sorted(model.namedparams())}
    gathered = comm.mpi_comm.allgather(final)
    for other in gathered:
        for name in final:
            np.testing.assert_array_equal(other[name], final[name])
    accuracy = chainermn.create_multi_node_evaluator(extensions.Evaluator(test_iter, model), comm)()["main/accuracy"]
    assert comm.mpi_comm.allgather(float(accuracy)) == [float(accuracy)] * comm.size
    # trained: chance is 0.1; 40 steps (one epoch on 1 rank) reach 0.8-0.9, by the shuffle and the init
    assert accuracy > 0.6
    if comm.rank == 0:
        assert (out / "log").exists()
