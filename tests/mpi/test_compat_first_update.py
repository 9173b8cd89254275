"""ChainerMN's first update: it broadcasts rank 0's parameters and makes no step.

``optimizer.t`` stays 0 after the first ``update()``; with double buffering the
first step is made by the third update (the second only starts averaging).
The "already broadcast" state is saved with the optimizer, so a run resumed
from a checkpoint continues bitwise like the uninterrupted run, wherever it was
saved. Expectations come from rank and size: the reference is one process
over the global batch (every rank's local batch, in rank order).
"""

import os
import tempfile

import chainer
import chainer.functions as F
import chainer.links as L
import numpy as np
import pytest

import mnframe as chainermn

MPI_SIZES = (1, 2, 3)
MPI_TIMEOUT = 180

LOCAL_BATCH, N_IN, N_OUT, LR = 3, 4, 3, 0.1


@pytest.fixture(scope="module")
def comm():
    return chainermn.create_communicator("naive")


def mlp(seed):
    state = np.random.get_state()
    np.random.seed(seed)
    try:
        return chainer.Sequential(L.Linear(N_IN, 5), F.tanh, L.Linear(5, N_OUT))
    finally:
        np.random.set_state(state)


def global_batch(step, size):
    rng = np.random.RandomState(50 + step)
    return (
        rng.randn(LOCAL_BATCH * size, N_IN).astype(np.float32),
        rng.randint(0, N_OUT, LOCAL_BATCH * size).astype(np.int32),
    )


def local(batch, comm):
    part = slice(comm.rank * LOCAL_BATCH, (comm.rank + 1) * LOCAL_BATCH)
    return tuple(a[part] for a in batch)


def lossfun(model):
    return lambda x, t: F.softmax_cross_entropy(model(x), t)


def params(model):
    return {name: p.array.copy() for name, p in sorted(model.namedparams())}


def same_on_every_rank(comm, values):
    for name, value in comm.mpi_comm.bcast(values, root=0).items():
        np.testing.assert_array_equal(values[name], value, err_msg=f"rank {comm.rank}: {name}")


def test_first_update_broadcasts_the_current_weights_and_does_not_step(comm):
    model = mlp(seed=comm.rank)
    opt = chainermn.create_multi_node_optimizer(chainer.optimizers.SGD(lr=LR), comm).setup(model)
    # weights changed after setup on one rank only (e.g. loaded there): the first update shares them
    if comm.rank == 0:
        for p in model.params():
            p.array += 1.0
    shared = comm.mpi_comm.bcast(params(model), root=0)
    opt.update(lossfun(model), *local(global_batch(0, comm.size), comm))
    assert opt.t == 0 and opt.actual_optimizer.t == 0
    for name, value in params(model).items():
        np.testing.assert_array_equal(value, shared[name], err_msg=name)
    # from the second update on: averaged gradients, one step each, like one process over the global batch
    ref = mlp(seed=0)
    for p, q in zip(sorted(ref.namedparams()), sorted(model.namedparams())):
        p[1].array[...] = q[1].array
    ref_opt = chainer.optimizers.SGD(lr=LR).setup(ref)
    for step in range(1, 4):
        batch = global_batch(step, comm.size)
        opt.update(lossfun(model), *local(batch, comm))
        ref_opt.update(lossfun(ref), *batch)
        assert opt.t == ref_opt.t == step
    for name, value in params(ref).items():
        np.testing.assert_allclose(params(model)[name], value, rtol=1e-5, atol=1e-6, err_msg=name)
    same_on_every_rank(comm, params(model))


def test_double_buffering_steps_first_at_the_third_update(comm):
    model = mlp(seed=comm.rank)
    opt = chainermn.create_multi_node_optimizer(chainer.optimizers.SGD(lr=LR), comm, double_buffering=True).setup(model)
    ts = []
    for step in range(5):
        opt.update(lossfun(model), *local(global_batch(step, comm.size), comm))
        ts.append(opt.t)
    opt.wait()
    assert ts == [0, 0, 1, 2, 3]
    same_on_every_rank(comm, params(model))


def test_updater_iterations_are_one_ahead_of_t(comm):
    """A StandardUpdater counts every update; ``t`` counts the steps: one fewer."""
    x, t = local(global_batch(0, comm.size), comm)
    it = chainer.iterators.SerialIterator(chainer.datasets.TupleDataset(x, t), 1, shuffle=False)
    model = L.Classifier(mlp(seed=comm.rank))
    opt = chainermn.create_multi_node_optimizer(chainer.optimizers.SGD(lr=LR), comm).setup(model)
    updater = chainer.training.updaters.StandardUpdater(it, opt)
    for n in range(1, 6):
        updater.update()
        assert updater.iteration == n and opt.t == n - 1


def _updater(comm, seed, double_buffering=False):
    x, t = local(global_batch(7, comm.size), comm)
    # no shuffling: the order sampler's random state is not part of an updater's state
    it = chainer.iterators.SerialIterator(chainer.datasets.TupleDataset(x, t), 2, shuffle=False)
    model = L.Classifier(mlp(seed=seed))
    opt = chainermn.create_multi_node_optimizer(
        chainer.optimizers.MomentumSGD(lr=LR), comm, double_buffering=double_buffering
    ).setup(model)
    return chainer.training.updaters.StandardUpdater(it, opt), model


@pytest.mark.parametrize("double_buffering", [False, True])
@pytest.mark.parametrize("saved_at", [0, 1, 2, 4])
def test_resume_continues_bitwise(comm, saved_at, double_buffering):
    """Double buffering: the checkpoint also holds the gradient sums in flight."""
    total = 6
    lag = 2 if double_buffering else 1  # updates that make no step
    updater, model = _updater(comm, seed=comm.rank, double_buffering=double_buffering)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "state.npz")
        for n in range(total):
            if n == saved_at:
                chainer.serializers.save_npz(path, updater)
            updater.update()
        uninterrupted = params(model)
        assert updater.get_optimizer("main").t == total - lag
        # a new process: other initial weights, then the checkpoint of every rank
        resumed, resumed_model = _updater(comm, seed=100 + comm.rank, double_buffering=double_buffering)
        chainer.serializers.load_npz(path, resumed)
    opt = resumed.get_optimizer("main")
    assert opt.t == max(saved_at - lag, 0)
    for _ in range(total - saved_at):
        resumed.update()
    assert opt.t == total - lag and resumed.iteration == total
    for name, value in params(resumed_model).items():
        np.testing.assert_array_equal(value, uninterrupted[name], err_msg=f"rank {comm.rank} {name}")


def test_a_file_loaded_on_rank_0_only_is_shared_by_the_next_update(comm):
    """Not every rank resumed: all of them agree to broadcast rank 0's loaded weights (no hang, no step)."""
    updater, model = _updater(comm, seed=comm.rank)
    updater.update()
    updater.update()
    saved = params(model)
    fresh, fresh_model = _updater(comm, seed=100 + comm.rank)
    if comm.rank == 0:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "state.npz")
            chainer.serializers.save_npz(path, updater)
            chainer.serializers.load_npz(path, fresh)
    fresh.update()
    if comm.size == 1:  # then every rank resumed: the update steps, as the original's third one
        updater.update()
        assert fresh.get_optimizer("main").t == 2
        expected = params(model)
    else:
        assert fresh.get_optimizer("main").t == (1 if comm.rank == 0 else 0)
        expected = comm.mpi_comm.bcast(saved, root=0)
    for name, value in params(fresh_model).items():
        np.testing.assert_array_equal(value, expected[name], err_msg=name)
