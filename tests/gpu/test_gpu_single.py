"""One process, one GPU: NcclGroup's calls, every GPU strategy's pack/sum/unpack path, dtypes,
batched_copy, double buffering, MNBN over NCCL, bcast_data, the runner's device and CuPy seed.

On one rank a sum over ranks is the value itself, so nothing here proves
averaging: these tests prove that the device code runs and round-trips
exactly (NCCL's arguments, pointers, counts, dtypes and streams; the packing
kernels, with a scale != 1 where it is applied). ``multi_node_mean_grad`` on
one rank returns early, so the strategies are called directly
(``comm._reducer_for("cupy").mean``). Cross-rank averaging on one GPU, with
real NCCL calls: tests/gpu/test_gpu_mpi.py (MNFRAME_FAKE_NODE_SIZE=1).
"""

import chainer
import chainer.links as L
import numpy as np
import pytest

import mnframe as chainermn
from mnframe.communicators import packing, registry

GPU_NAMES = [n for n in registry.COMMUNICATORS]  # every name averages CuPy gradients
DTYPES = [np.float16, np.float32, np.float64]


class Net(chainer.Chain):
    """Parameters of assorted shapes (odd sizes, a 0-d-like bias) in one dtype."""

    def __init__(self, dtype):
        super().__init__()
        with self.init_scope():
            self.a = L.Linear(
                7,
                5,
                initialW=chainer.initializers.Normal(1.0, dtype=dtype),
                initial_bias=chainer.initializers.Zero(dtype),
            )
            self.b = L.Convolution2D(
                3,
                4,
                3,
                initialW=chainer.initializers.Normal(1.0, dtype=dtype),
                initial_bias=chainer.initializers.Zero(dtype),
            )
            self.c = L.Linear(
                5,
                1,
                initialW=chainer.initializers.Normal(1.0, dtype=dtype),
                initial_bias=chainer.initializers.Zero(dtype),
            )


def _model(cupy, dtype, seed=0):
    model = Net(dtype)
    model.to_device("@cupy:0")
    rs = np.random.RandomState(seed)
    for _, p in sorted(model.namedparams()):
        p.grad = cupy.asarray(rs.standard_normal(p.shape).astype(dtype))
    return model


def _grads(model):
    return {
        n: None if p.grad is None else chainer.backend.CpuDevice().send(p.grad).copy()
        for n, p in sorted(model.namedparams())
    }


def _direct_mean(comm, model, zero_fill=False):
    """What multi_node_mean_grad does past its one-rank shortcut."""
    params, sig = packing.describe(model, zero_fill)
    layout = packing.build_layout(params, sig, comm.get_config("allreduce_grad_dtype"))
    comm._reducer_for("cupy").mean(layout, params)


def _rtol(*dtypes):
    return 2e-3 if any(np.dtype(d) == np.float16 for d in dtypes if d is not None) else 1e-6


@pytest.mark.parametrize("name", GPU_NAMES)
@pytest.mark.parametrize("batched", [False, True])
def test_every_name_on_gpu_arrays(cupy, name, batched):
    comm = chainermn.create_communicator(name, batched_copy=batched)
    model = _model(cupy, np.float32)
    before = _grads(model)
    for step in range(2):  # fresh gradients, then gradients that are the buffer's views
        _direct_mean(comm, model)
        after = _grads(model)
        for n, p in sorted(model.namedparams()):
            np.testing.assert_allclose(after[n], before[n], rtol=1e-6, err_msg=f"{name} step {step} {n}")
            assert isinstance(p.grad, cupy.ndarray), n
    comm.finalize()


@pytest.mark.parametrize("name", ["pure_nccl", "hierarchical", "two_dimensional", "non_cuda_aware", "flat"])
@pytest.mark.parametrize("model_dtype", DTYPES)
@pytest.mark.parametrize("wire", [None, np.float16, np.float32])
@pytest.mark.parametrize("batched", [False, True])
def test_dtype_combinations(cupy, name, model_dtype, wire, batched):
    comm = chainermn.create_communicator(name, allreduce_grad_dtype=wire, batched_copy=batched)
    model = _model(cupy, model_dtype)
    before = _grads(model)
    _direct_mean(comm, model)
    for n, p in sorted(model.namedparams()):
        assert p.grad.dtype == p.array.dtype, n  # each gradient keeps its parameter's dtype
        got = cupy.asnumpy(p.grad).astype(np.float64)
        np.testing.assert_allclose(
            got,
            before[n].astype(np.float64),
            rtol=_rtol(model_dtype, wire),
            atol=1e-3,
            err_msg=f"{name} {np.dtype(model_dtype).name} wire={wire}",
        )
    comm.finalize()


@pytest.mark.parametrize("batched", [False, True])
def test_missing_gradients_zero_fill(cupy, batched):
    comm = chainermn.create_communicator("pure_nccl", batched_copy=batched)
    model = _model(cupy, np.float32)
    model.b.W.grad = None
    _direct_mean(comm, model, zero_fill=True)
    assert float(cupy.abs(model.b.W.grad).max()) == 0.0
    comm.finalize()


def test_packer_scales_while_packing(cupy):
    """The mean is folded into the packing kernel: pack(scale) == scale * grads, batched or not."""
    from mnframe.communicators.device_packing import DevicePacker

    model = _model(cupy, np.float32)
    params, sig = packing.describe(model, False)
    layout = packing.build_layout(params, sig, np.float16)
    out = {}
    for batched in (False, True):
        buf = cupy.zeros(layout.nbytes, dtype=np.uint8)
        DevicePacker(cupy).pack(layout, layout.group_arrays(buf), layout.entry_views(buf), params, 0.25, batched)
        out[batched] = cupy.asnumpy(buf)
    np.testing.assert_array_equal(out[False].view(np.float16), out[True].view(np.float16))
    for e, view, _, _ in layout.entry_views(cupy.asarray(out[True])):
        want = cupy.asnumpy(params[e.index][1].grad) * 0.25
        np.testing.assert_allclose(cupy.asnumpy(view).astype(np.float32), want, rtol=2e-3, atol=1e-3)


def test_bcast_data_keeps_dtypes(cupy):
    comm = chainermn.create_communicator("pure_nccl")
    model = _model(cupy, np.float16)
    comm.bcast_data(model)
    assert all(p.array.dtype == np.float16 for p in model.params())
    comm.finalize()


def test_double_buffering_schedule_on_a_cuda_stream(cupy):
    """As in ChainerMN: update 1 only broadcasts, update 2 only starts averaging; update t >= 3
    steps with update t-1's gradients."""
    comm = chainermn.create_communicator("pure_nccl")
    model = L.Linear(3, 2)
    model.to_device("@cupy:0")
    opt = chainermn.create_multi_node_optimizer(chainer.optimizers.SGD(lr=1.0), comm, double_buffering=True)
    opt.setup(model)
    from mnframe.optimizers.double_buffering_nccl import StreamStaleAverager

    assert isinstance(opt._averager, StreamStaleAverager)
    w0 = cupy.asnumpy(model.W.array).copy()
    grads = [np.full((2, 3), v, dtype=np.float32) for v in (1.0, 2.0, 3.0, 4.0)]
    history = []
    for g in grads:
        model.cleargrads()
        model.W.grad = cupy.asarray(g)
        model.b.grad = cupy.zeros(2, dtype=np.float32)
        opt.update()
        history.append(cupy.asnumpy(model.W.array).copy())
    opt.wait()
    np.testing.assert_allclose(history[0], w0)  # update 1: broadcast only
    np.testing.assert_allclose(history[1], w0)  # update 2: starts averaging g_2
    np.testing.assert_allclose(history[2], w0 - grads[1])  # update 3: g_2
    np.testing.assert_allclose(history[3], w0 - grads[1] - grads[2])  # update 4: g_3
    comm.finalize()


def test_mnbn_nccl_matches_batch_normalization(cupy):
    comm = chainermn.create_communicator("pure_nccl")
    mnbn = chainermn.links.MultiNodeBatchNormalization(4, comm, communication_backend="nccl")
    bn = L.BatchNormalization(4)
    for link in (mnbn, bn):
        link.to_device("@cupy:0")
    x = cupy.asarray(np.random.RandomState(1).standard_normal((8, 4)).astype(np.float32))
    with chainer.using_config("train", True):
        y1, y2 = mnbn(x), bn(x)
    np.testing.assert_allclose(cupy.asnumpy(y1.array), cupy.asnumpy(y2.array), rtol=1e-4, atol=1e-5)
    chainer.functions.sum(y1 * y1).backward()
    chainer.functions.sum(y2 * y2).backward()
    np.testing.assert_allclose(cupy.asnumpy(mnbn.gamma.grad), cupy.asnumpy(bn.gamma.grad), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(cupy.asnumpy(mnbn.avg_mean), cupy.asnumpy(bn.avg_mean), rtol=1e-5)
    comm.finalize()


def _train(device, name, steps=5):
    np.random.seed(0)  # the initializers draw from NumPy's global generator
    rs = np.random.RandomState(0)
    x = rs.standard_normal((32, 7)).astype(np.float32)
    t = rs.randint(0, 3, size=32).astype(np.int32)
    model = L.Classifier(
        chainer.Sequential(
            L.Linear(7, 16, initialW=chainer.initializers.Normal(0.5)),
            chainer.functions.relu,
            L.Linear(16, 3, initialW=chainer.initializers.Normal(0.5)),
        )
    )
    model.to_device(device)
    comm = chainermn.create_communicator(name)
    opt = chainermn.create_multi_node_optimizer(chainer.optimizers.MomentumSGD(lr=0.1), comm)
    opt.setup(model)
    dev = chainer.get_device(device)
    for i in range(steps):
        sl = slice(i * 8 % 32, i * 8 % 32 + 8)
        opt.update(model, dev.send(x[sl]), dev.send(t[sl]))
    comm.finalize()
    return {n: chainer.backend.CpuDevice().send(p.array) for n, p in sorted(model.namedparams())}


@pytest.mark.usefixtures("cupy")
def test_one_rank_gpu_arithmetic_matches_cpu():
    """Forward, backward and update on the GPU agree with the CPU (one rank: no gradient exchange;
    the exchange is compared in tests/gpu/mpi/test_gpu_train.py)."""
    cpu = _train("@numpy", "two_dimensional")
    gpu = _train("@cupy:0", "pure_nccl")
    for n in cpu:
        np.testing.assert_allclose(gpu[n], cpu[n], rtol=1e-4, atol=1e-5, err_msg=n)


def test_cuda_aware_detection_decides_the_flat_path(cupy):
    """What detect() says is what the GPU flat strategy does: device buffers to MPI only when aware
    (and then a device-buffer round trip through MPI must arrive intact), else a host copy."""
    from mpi4py import MPI

    from mnframe.commands.doctor import _device_round_trip
    from mnframe.communicators import cuda_aware, device_reducers

    aware, how = cuda_aware.detect()
    if cuda_aware.from_env() is None:
        assert aware == bool(cuda_aware.query_library()), how
    comm = chainermn.create_communicator("flat")
    model = _model(cupy, np.float32)
    _direct_mean(comm, model)
    reducer = comm._reducer_for("cupy")
    want = device_reducers.MpiDeviceReducer if aware else device_reducers.HostStagedFlatReducer
    assert type(reducer) is want, (aware, how)
    if aware:
        status, _, detail = _device_round_trip(MPI, how)
        assert status == "PASS", detail
    comm.finalize()


# ---------------------------------------------------------------- NcclGroup, called directly (one rank)


@pytest.fixture
def group(cupy):  # noqa: ARG001 - the cupy fixture skips without CuPy (fixtures cannot use usefixtures)
    from mpi4py import MPI

    from mnframe.communicators.nccl_ops import NcclGroup

    g = NcclGroup(MPI.COMM_SELF, "test")
    yield g
    g.close()


def _framed(cupy, dtype, n=37):
    """A buffer with guard elements around the ``n`` in the middle: NCCL must touch only those."""
    buf = cupy.full(n + 8, -7, dtype=dtype)
    body = buf[4 : 4 + n]
    body[...] = cupy.arange(n, dtype=dtype) / 4
    return buf, body


@pytest.mark.parametrize("dtype", DTYPES)
def test_nccl_group_methods_on_one_rank(cupy, group, dtype):
    assert (group.size, group.rank) == (1, 0) and group.comm is not None
    stream = cupy.cuda.Stream(non_blocking=True)
    for call in ("allreduce", "reduce", "bcast", "reduce_scatter_inplace", "allgather_inplace"):
        buf, body = _framed(cupy, dtype)
        want = cupy.asnumpy(body).copy()
        with stream:  # the collective goes on the current stream
            out = getattr(group, call)(body)
        stream.synchronize()
        np.testing.assert_array_equal(cupy.asnumpy(body), want, err_msg=call)
        assert float(cupy.abs(buf[:4] + 7).max()) == 0 and float(cupy.abs(buf[-4:] + 7).max()) == 0, call
        if call.endswith("_inplace") and call.startswith("reduce"):
            assert out.data.ptr == body.data.ptr and out.size == body.size  # this rank's block: all of it


def test_nccl_group_refuses_integers_and_closes_once(cupy, group):
    with pytest.raises(TypeError, match="float16/32/64"):
        group.allreduce(cupy.zeros(4, dtype=np.int32))
    group.close()
    assert group.comm is None
    group.close()


# ---------------------------------------------------------------- runner, seeds, closing


def test_runner_device_and_cupy_seed(cupy):
    from mnframe import pipeline
    from mnframe.builder.placement import select_device

    comm = chainermn.create_communicator("non_cuda_aware")
    device = select_device("gpu", comm)
    assert device.xp is cupy and device.device.id == 0
    pipeline.seed_everything(11, device)
    a = cupy.asnumpy(cupy.random.rand(5))
    pipeline.seed_everything(11, device)
    np.testing.assert_array_equal(a, cupy.asnumpy(cupy.random.rand(5)))
    comm.finalize()


def test_cupy_generator_resumes_exactly(cupy):
    """Marked GPU test of item 4: a checkpoint re-seeds CuPy's generator and stores the seed."""
    from mnframe.checkpoint import rng

    rng.seed_cupy(5)
    state = rng.RngState(dict)
    cupy.random.rand(3)
    saved = chainer.serializers.DictionarySerializer()
    state.serialize(saved)
    after = [cupy.asnumpy(cupy.random.rand(4)) for _ in range(3)]
    cupy.random.seed(999)
    state.serialize(chainer.serializers.NpzDeserializer(dict(saved.target)))
    for a in after:
        np.testing.assert_array_equal(a, cupy.asnumpy(cupy.random.rand(4)))


def test_mnbn_auto_picks_nccl_and_finalize_closes_it(cupy):
    comm = chainermn.create_communicator("pure_nccl")
    link = chainermn.links.MultiNodeBatchNormalization(4, comm)
    link.to_device("@cupy:0")
    x = cupy.asarray(np.random.RandomState(2).standard_normal((6, 4)).astype(np.float32))
    with chainer.using_config("train", True):
        link(x)
    exchange = link._exchange
    assert exchange.name == "nccl" and exchange._group is not None
    link.finalize()
    assert exchange._group is None and link._exchange is None
    comm.finalize()


def test_double_buffering_group_closed_by_finalize(cupy):
    comm = chainermn.create_communicator("pure_nccl")
    model = L.Linear(3, 2)
    model.to_device("@cupy:0")
    opt = chainermn.create_multi_node_optimizer(chainer.optimizers.SGD(lr=1.0), comm, double_buffering=True)
    opt.setup(model)
    for _ in range(2):  # update 1 only broadcasts the parameters; update 2 starts the first exchange
        model.W.grad = cupy.ones((2, 3), dtype=np.float32)
        model.b.grad = cupy.zeros(2, dtype=np.float32)
        opt.update()
    averager = opt._averager
    assert averager._nccl is not None
    opt.finalize()
    assert averager._nccl is None
    comm.finalize()
