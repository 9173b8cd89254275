"""MultiNodeChainList and the spec's model-parallel examples, checked against
the same model run unsplit in one process.

Every rank builds every link from the same seed, so each can compute the
reference loss and gradients locally; the split model must match them (loss on
the rank that computes it, each link's gradients on the rank that holds it).
With 3 ranks the 2-rank examples leave rank 2 idle; the pipeline and the
non-connected graph use all three.
"""

import copy

import chainer
import chainer.functions as F
import chainer.links as L
import numpy as np
import pytest

import mnframe
import mnframe.functions as mnf

MPI_SIZES = (2, 3)
MPI_TIMEOUT = 120

RTOL, ATOL = 1e-5, 1e-6


@pytest.fixture(scope="module")
def comm(mpi_comm):
    return mnframe.create_communicator("naive", mpi_comm=mpi_comm)


def seeded(build, seed=0):
    """``build()`` with numpy's global RNG (Chainer's initializers) seeded."""
    state = np.random.get_state()
    np.random.seed(seed)
    try:
        return build()
    finally:
        np.random.set_state(state)


def clone(link):
    return copy.deepcopy(link)


def assert_grads_equal(split, reference, what):
    got = dict(split.namedparams())
    want = dict(reference.namedparams())
    assert sorted(got) == sorted(want), what
    for name, p in got.items():
        assert p.grad is not None, f"{what}{name}: no gradient"
        np.testing.assert_allclose(p.grad, want[name].grad, rtol=RTOL, atol=ATOL, err_msg=f"{what}{name}")


def assert_params_equal(split, reference, what):
    want = dict(reference.namedparams())
    for name, p in split.namedparams():
        np.testing.assert_allclose(p.array, want[name].array, rtol=RTOL, atol=ATOL, err_msg=f"{what}{name}")


def batch(n=8, n_in=6, n_out=2, seed=1):
    rng = np.random.RandomState(seed)
    return rng.randn(n, n_in).astype(np.float32), rng.randint(0, n_out, n).astype(np.int32)


# -- API reference: split MLP on 2 processes ------------------------------------------


class MLP(chainer.Chain):
    def __init__(self, n_in, n_hidden, n_out):
        super().__init__(l1=L.Linear(n_in, n_hidden), l2=L.Linear(n_hidden, n_hidden), l3=L.Linear(n_hidden, n_out))

    def __call__(self, x):
        h1 = F.relu(self.l1(x))
        h2 = F.relu(self.l2(h1))
        return self.l3(h2)


class Model0(mnframe.MultiNodeChainList):
    def __init__(self, comm, first, last):
        super().__init__(comm)
        self.add_link(first, rank_in=None, rank_out=1)
        self.add_link(last, rank_in=1, rank_out=None)


class Model1(mnframe.MultiNodeChainList):
    def __init__(self, comm, middle):
        super().__init__(comm)
        self.add_link(middle, rank_in=0, rank_out=0)


def _three_mlps():
    return seeded(lambda: (MLP(6, 5, 4), MLP(4, 5, 3), MLP(3, 4, 2)))


def _run_split_mlp(comm, steps):
    """Spec's Model0/Model1 on ranks 0/1 vs. the composed MLPs, for ``steps`` SGD steps."""
    first, middle, last = _three_mlps()
    reference = chainer.ChainList(*[clone(m) for m in (first, middle, last)])
    if comm.rank == 0:
        model = Model0(comm, first, last)
        mine = [(first, reference[0]), (last, reference[2])]
    else:
        model = Model1(comm, middle)
        mine = [(middle, reference[1])]
    opt = chainer.optimizers.SGD(lr=0.1).setup(model)
    ref_opt = chainer.optimizers.SGD(lr=0.1).setup(reference)
    for step in range(steps):
        x, t = batch(seed=step)
        ref_loss = F.softmax_cross_entropy(reference[2](reference[1](reference[0](x))), t)
        reference.cleargrads()
        ref_loss.backward()
        model.cleargrads()
        if comm.rank == 0:
            loss = F.softmax_cross_entropy(model(x), t)
            np.testing.assert_allclose(loss.array, ref_loss.array, rtol=RTOL)
        else:
            loss = model()  # the delegate variable
            assert loss.shape == (0,)
        loss.backward()
        for split, ref in mine:
            assert_grads_equal(split, ref, f"rank {comm.rank} step {step} ")
        opt.update()
        ref_opt.update()
    for split, ref in mine:
        assert_params_equal(split, ref, f"rank {comm.rank} after {steps} steps ")


def test_split_mlp_matches_unsplit(comm):
    if comm.rank < 2:
        _run_split_mlp(comm, steps=3)


def test_split_mlp_on_split_communicator(comm):
    """Dual parallelism: the model-parallel pair lives in a sub-communicator whose
    rank order is the reverse of the world's (world 1 is sub 0)."""
    sub = comm.split(0 if comm.rank < 2 else 1, -comm.rank)
    if comm.rank < 2:
        assert sub.size == 2 and sub.rank == 1 - comm.rank
        _run_split_mlp(sub, steps=2)


def test_split_mlp_with_updater_and_empty_dataset(comm):
    """Model-parallel tutorial, input pattern 3: rank 1 only receives, so it iterates an empty dataset of the
    same length; both ranks run Chainer's StandardUpdater and Trainer."""
    from mnframe.datasets import create_empty_dataset

    if comm.rank > 1:
        return
    K, B = 3, 4
    x, t = batch(n=K * B)
    dataset = chainer.datasets.TupleDataset(x, t)
    first, middle, last = _three_mlps()
    reference = chainer.ChainList(*[clone(m) for m in (first, middle, last)])
    if comm.rank == 0:
        model = L.Classifier(Model0(comm, first, last))
        it = chainer.iterators.SerialIterator(dataset, B, shuffle=False)
        mine = [(first, reference[0]), (last, reference[2])]
    else:
        model = Model1(comm, middle)
        empty = create_empty_dataset(dataset)
        assert len(empty) == len(dataset)
        it = chainer.iterators.SerialIterator(empty, B, shuffle=False)
        mine = [(middle, reference[1])]
    opt = chainer.optimizers.SGD(lr=0.1).setup(model)
    chainer.training.Trainer(chainer.training.StandardUpdater(it, opt), (K, "iteration"), out="/tmp").run()
    ref_opt = chainer.optimizers.SGD(lr=0.1).setup(reference)
    for k in range(K):
        reference.cleargrads()
        xb, tb = x[k * B : (k + 1) * B], t[k * B : (k + 1) * B]
        F.softmax_cross_entropy(reference[2](reference[1](reference[0](xb))), tb).backward()
        ref_opt.update()
    for split, ref in mine:
        assert_params_equal(split, ref, f"rank {comm.rank} after {K} updater steps ")


# -- a pipeline over every rank, trained with Chainer's updater --------------------


class Stage(chainer.Chain):
    """Some of the reference MLP's layers (relu after all but the very last)."""

    def __init__(self, layers, last):
        super().__init__()
        with self.init_scope():
            self.layers = chainer.ChainList(*layers)
        self.last = last

    def __call__(self, x, *unused):
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if not (self.last and i == len(self.layers) - 1):
                x = F.relu(x)
        return x


def _pipeline_parts(n):
    """The reference MLP and its layers split into ``n`` consecutive stages."""
    ref = seeded(lambda: MLP(6, 5, 2))
    layers = [ref.l1, ref.l2, ref.l3]
    bounds = np.array_split(np.arange(3), n)
    stages = [Stage([clone(layers[i]) for i in b], last=(b[-1] == 2)) for b in bounds]
    return ref, stages


def _pipeline_model(comm, stage):
    r, n = comm.rank, comm.size
    model = mnframe.MultiNodeChainList(comm)
    model.add_link(stage, rank_in=None if r == 0 else r - 1, rank_out=None if r == n - 1 else r + 1)
    return L.Classifier(model) if r == n - 1 else model


def test_pipeline_over_all_ranks_trains_like_one_process(comm):
    """Stages on ranks 0..n-1, StandardUpdater on every rank: the first and last
    rank share batches (multi-node iterator), the middle ones use empty datasets.
    After K steps each stage's parameters equal the unsplit MLP's."""
    from mnframe.datasets import create_empty_dataset
    from mnframe.iterators import create_multi_node_iterator

    K, B = 3, 4
    x, t = batch(n=K * B)
    dataset = chainer.datasets.TupleDataset(x, t)
    ref, stages = _pipeline_parts(comm.size)
    r, n = comm.rank, comm.size
    model = _pipeline_model(comm, stages[r])
    # The first and last rank share batches; split is collective, so every rank calls it.
    ends = comm.split(0 if r in (0, n - 1) else 1, r)
    if 0 < r < n - 1:
        it = chainer.iterators.SerialIterator(create_empty_dataset(dataset), B, shuffle=False)
    else:
        plain = chainer.iterators.SerialIterator(dataset, B, shuffle=False)
        it = create_multi_node_iterator(plain, ends, rank_master=0)
    opt = chainer.optimizers.SGD(lr=0.1).setup(model)
    updater = chainer.training.StandardUpdater(it, opt)
    chainer.training.Trainer(updater, (K, "iteration"), out="/tmp").run()

    ref_opt = chainer.optimizers.SGD(lr=0.1).setup(ref)
    for k in range(K):
        ref.cleargrads()
        F.softmax_cross_entropy(ref(x[k * B : (k + 1) * B]), t[k * B : (k + 1) * B]).backward()
        ref_opt.update()
    layers = [ref.l1, ref.l2, ref.l3]
    bounds = np.array_split(np.arange(3), n)
    for split, i in zip(stages[r].layers, bounds[r]):
        assert_params_equal(split, layers[i], f"rank {r} layer {i} ")


def test_ensemble_with_scattered_datasets_and_updater(comm):
    """Model-parallel tutorial, input pattern 1 + Example 2: each rank trains on its own shard and the
    ranks average their predictions with allgather."""
    from mnframe.datasets import scatter_dataset

    class Ensemble(chainer.Chain):
        def __init__(self):
            super().__init__()
            with self.init_scope():
                self.f = L.Linear(6, 2)

        def __call__(self, x):
            h = mnf.allgather(comm, self.f(x))
            return F.average(F.stack(h, axis=0), axis=0)

    x, t = batch(n=4 * comm.size)
    shard = scatter_dataset(chainer.datasets.TupleDataset(x, t), comm)
    model = L.Classifier(seeded(Ensemble, seed=comm.rank))
    before = model.predictor.f.W.array.copy()
    opt = chainer.optimizers.SGD(lr=0.1).setup(model)
    it = chainer.iterators.SerialIterator(shard, 2, shuffle=False)
    chainer.training.Trainer(chainer.training.StandardUpdater(it, opt), (2, "iteration"), out="/tmp").run()
    assert not np.allclose(before, model.predictor.f.W.array)
    assert np.isfinite(model.predictor.f.W.array).all()


def test_ensemble_allgather_gradients_match_reference(comm):
    """Averaging ensemble: rank r's link gets d(sum of every rank's loss)/d(theta_r)."""
    links = seeded(lambda: [L.Linear(6, 2) for _ in range(comm.size)])
    data = [batch(n=4, seed=10 + r) for r in range(comm.size)]
    mine = clone(links[comm.rank])
    x, t = data[comm.rank]
    hs = mnf.allgather(comm, mine(x))
    F.softmax_cross_entropy(F.average(F.stack(hs, axis=0), axis=0), t).backward()
    # Reference: every rank's prediction needs every link applied to that rank's x.
    ref = chainer.ChainList(*links)
    total = 0
    for r in range(comm.size):
        xr, tr = data[r]
        hr = [ref[j](data[j][0]) for j in range(comm.size)]
        total += F.softmax_cross_entropy(F.average(F.stack(hr, axis=0), axis=0), tr)
    total.backward()
    assert_grads_equal(mine, ref[comm.rank], f"rank {comm.rank} ")


# -- API reference: sending tuples ----------------------------------------------------------


class NN0(chainer.Chain):
    def __init__(self):
        super().__init__(a=L.Linear(3, 4), b=L.Linear(3, 2))

    def __call__(self, x):
        return self.a(x), F.tanh(self.b(x))


class NN1(chainer.Chain):
    def __init__(self):
        super().__init__(c=L.Linear(6, 2))

    def __call__(self, y):
        y0, y1 = y  # unpack tuple from NN0
        return self.c(F.concat((y0, y1), axis=1))


def test_sending_tuples(comm):
    nn0, nn1 = seeded(lambda: (NN0(), NN1()))
    ref0, ref1 = clone(nn0), clone(nn1)
    x = np.random.RandomState(3).randn(5, 3).astype(np.float32)
    ref_y = ref1(ref0(x))
    F.sum(ref_y * ref_y).backward()
    if comm.rank == 0:
        model = mnframe.MultiNodeChainList(comm)
        model.add_link(nn0, rank_in=None, rank_out=1)
        phi = model(x)
        phi.backward()
        assert_grads_equal(nn0, ref0, "NN0 ")
    elif comm.rank == 1:
        model = mnframe.MultiNodeChainList(comm)
        model.add_link(nn1, rank_in=0, rank_out=None)
        y = model()
        np.testing.assert_allclose(y.array, ref_y.array, rtol=RTOL)
        F.sum(y * y).backward()
        assert_grads_equal(nn1, ref1, "NN1 ")


# -- API reference: non-connected graphs ---------------------------------------------------------


def _links(n):
    return seeded(lambda: [L.Linear(3, 3) for _ in range(n)], seed=4)


def test_non_connected_graph(comm):
    """NonConnectedGraph (API reference), on the ranks we have: rank 0 receives from q and
    sends to p (component A), then receives from p and sends to q (B).
    p = 1, q = size-1; with 2 ranks p == q. The whole model is
    E(B(C(A(D(x))))), D and E on q, C on p."""
    A, B, C, D, E = _links(5)
    ref = chainer.ChainList(*[clone(link) for link in (A, B, C, D, E)])
    x = np.random.RandomState(5).randn(2, 3).astype(np.float32)
    ref_y = ref[4](F.tanh(ref[1](F.tanh(ref[2](F.tanh(ref[0](F.tanh(ref[3](x)))))))))
    F.sum(ref_y * ref_y).backward()

    p, q = 1, comm.size - 1
    model = mnframe.MultiNodeChainList(comm)
    tanh = lambda link: chainer.Sequential(link, F.tanh)  # noqa: E731
    held = []
    if comm.rank == 0:
        model.add_link(tanh(A), rank_in=q, rank_out=p)
        model.add_link(tanh(B), rank_in=p, rank_out=q)
        held = [(A, ref[0]), (B, ref[1])]
    if comm.rank == q:
        model.add_link(tanh(D), rank_in=None, rank_out=0)
    if comm.rank == p:
        model.add_link(tanh(C), rank_in=0, rank_out=0)
        held.append((C, ref[2]))
    if comm.rank == q:
        model.add_link(E, rank_in=0, rank_out=None)
        held += [(D, ref[3]), (E, ref[4])]
    if comm.rank == q:
        y = model(x)
        np.testing.assert_allclose(y.array, ref_y.array, rtol=RTOL, atol=ATOL)
        F.sum(y * y).backward()
    else:
        model().backward()  # the delegate of the last send
    for link, r in held:
        assert_grads_equal(link, r, f"rank {comm.rank} ")


def test_non_connected_graph_with_intermediate_outputs(comm):
    """NonConnectedGraph2 (API reference): on rank 0, A (rank_in=1, rank_out=None) makes the
    model outputs, then B (rank_in=None, rank_out=1) sends; the returned outputs
    are pseudo-connected to B's delegate so backward reaches both."""
    if comm.rank > 1:
        return
    A, B, C, D = _links(4)
    ref = [clone(link) for link in (A, B, C, D)]
    x0 = np.random.RandomState(6).randn(2, 3).astype(np.float32)
    x1 = np.random.RandomState(7).randn(2, 3).astype(np.float32)
    ref_out0 = ref[0](ref[2](x1))  # rank 0's output: A(C(x1))
    ref_out1 = ref[3](ref[1](x0))  # rank 1's output: D(B(x0))
    (F.sum(ref_out0 * ref_out0) + F.sum(ref_out1)).backward()

    model = mnframe.MultiNodeChainList(comm)
    if comm.rank == 0:
        model.add_link(A, rank_in=1, rank_out=None)
        model.add_link(B, rank_in=None, rank_out=1)
        y = model(x0)
        np.testing.assert_allclose(y.array, ref_out0.array, rtol=RTOL, atol=ATOL)
        F.sum(y * y).backward()
        held = [(A, ref[0]), (B, ref[1])]
    else:
        model.add_link(C, rank_in=None, rank_out=0)
        model.add_link(D, rank_in=0, rank_out=None)
        y = model(x1)
        np.testing.assert_allclose(y.array, ref_out1.array, rtol=RTOL, atol=ATOL)
        F.sum(y).backward()
        held = [(C, ref[2]), (D, ref[3])]
    for link, r in held:
        assert_grads_equal(link, r, f"rank {comm.rank} ")


def test_several_outputs_and_several_sends(comm):
    """A component sending to every other rank, each receiver returning a tuple."""
    (W,) = _links(1)
    ref = clone(W)
    x = np.ones((1, 3), np.float32)
    others = [r for r in range(comm.size) if r != 0]
    ref_h = ref(x)
    F.sum(sum(ref_h * (r + 1.0) for r in others)).backward()
    model = mnframe.MultiNodeChainList(comm)
    if comm.rank == 0:
        model.add_link(W, rank_in=None, rank_out=others)
        model(x).backward()
        assert_grads_equal(W, ref, "W ")
    else:
        model.add_link(chainer.Sequential(lambda h: (h * (comm.rank + 1.0), h)), rank_in=0, rank_out=None)
        y, h = model()
        np.testing.assert_allclose(h.array, ref_h.array, rtol=RTOL)
        F.sum(y).backward()


# -- model-parallel tutorial: delegate variables with the plain functions ----------------------------


def test_004_delegate_variable_example(comm):
    """Model_0: f -> send to 1, recv from 1 (delegate) -> h. Model_1: recv -> g -> send."""
    if comm.rank > 1:
        return
    f, g, h = _links(3)
    ref = [clone(link) for link in (f, g, h)]
    x = np.random.RandomState(8).randn(2, 3).astype(np.float32)
    ref_y = ref[2](ref[1](ref[0](x)))
    F.sum(ref_y * ref_y).backward()
    if comm.rank == 0:
        phi = mnf.send(f(x), comm, rank=1)
        z = mnf.recv(comm, rank=1, delegate_variable=phi)
        y = h(z)
        F.sum(y * y).backward()
        np.testing.assert_allclose(y.array, ref_y.array, rtol=RTOL)
        assert_grads_equal(f, ref[0], "f ")
        assert_grads_equal(h, ref[2], "h ")
    else:
        z = mnf.recv(comm, rank=0)
        phi = mnf.send(g(z), comm, rank=0)
        phi.backward()
        assert_grads_equal(g, ref[1], "g ")


# -- create_multi_node_n_step_rnn ---------------------------------------------------------------


def test_multi_node_n_step_rnn_encoder_decoder(comm):
    """Encoder LSTM on rank 0 hands its final states to the decoder LSTM on rank 1."""
    if comm.rank > 1:
        return
    enc, dec = seeded(lambda: (L.NStepLSTM(1, 3, 4, 0.0), L.NStepLSTM(1, 3, 4, 0.0)))
    ref_enc, ref_dec = clone(enc), clone(dec)
    rng = np.random.RandomState(9)
    xs = [rng.randn(n, 3).astype(np.float32) for n in (3, 2)]
    ys_in = [rng.randn(n, 3).astype(np.float32) for n in (2, 4)]
    hy, cy, _ = ref_enc(None, None, xs)
    _, _, ref_ys = ref_dec(hy, cy, ys_in)
    F.sum(F.concat(ref_ys, axis=0) ** 2).backward()
    if comm.rank == 0:
        link = mnframe.links.create_multi_node_n_step_rnn(enc, comm, rank_out=1)
        *_, delegate = link(xs)
        delegate.backward()
        assert_grads_equal(enc, ref_enc, "encoder ")
    else:
        link = mnframe.links.create_multi_node_n_step_rnn(dec, comm, rank_in=0)
        _, _, ys, delegate = link(ys_in)
        assert delegate is None
        F.sum(F.concat(ys, axis=0) ** 2).backward()
        assert_grads_equal(dec, ref_dec, "decoder ")


# -- wrong wiring ---------------------------------------------------------------------------------


def test_wrong_wiring_is_rejected_when_added(comm):
    model = mnframe.MultiNodeChainList(comm)
    with pytest.raises(ValueError, match=r"component 0:Linear.*rank\(s\) \[%d\]" % comm.size):
        model.add_link(L.Linear(2, 2), rank_in=None, rank_out=comm.size)
    with pytest.raises(ValueError, match="own rank %d" % comm.rank):
        model.add_link(L.Linear(2, 2), rank_in=[comm.rank], rank_out=None)
    assert model.wiring() == [] and len(model) == 0
    with pytest.raises(ValueError, match="rank_in"):
        mnframe.links.create_multi_node_n_step_rnn(L.NStepLSTM(1, 2, 2, 0.0), comm, rank_in=comm.rank)
