"""compression='powersgd' on CuPy gradients (each name in MNFRAME_GPU_NAMES): every rank ends with
bitwise the same gradients, CuPy arrays of the parameters' dtype, equal (to rounding) to the same
steps on NumPy copies through the CPU ``flat`` communicator; the state round-trips a checkpoint.

Written with the CPU tests (tests/mpi/test_comm_powersgd.py); run by tests/gpu/test_gpu_mpi.py."""

import chainer
import chainer.links as L
import numpy as np
import pytest
from chainer.serializers.npz import DictionarySerializer, NpzDeserializer

import mnframe as chainermn
from mnframe.communicators import powersgd

RANK, START, STEPS = 2, 1, 4


def _model():
    m = chainer.Chain()
    with m.init_scope():
        m.big = L.Linear(24, 16)  # compressed
        m.thin = L.Linear(16, 2)  # too thin: whole
    return m


def _grads(model, step, rank):
    out = {}
    for i, (n, p) in enumerate(sorted(model.namedparams())):
        a = np.random.RandomState(1000 * step + i).standard_normal(p.shape)
        b = np.random.RandomState(5000 + 1000 * step + i).standard_normal(p.shape)
        out[n] = (a + rank * 0.3 * b).astype(np.float32)
    return out


def _run(comm, model, to_device):
    got = []
    for step in range(STEPS):
        grads = _grads(model, step, comm.rank)
        for n, p in model.namedparams():
            p.grad = to_device(grads[n])
        comm.multi_node_mean_grad(model)
        got.append({n: p.grad for n, p in sorted(model.namedparams())})
    return got


@pytest.mark.parametrize("wire", [None, "float16"])
def test_bitwise_equal_on_every_rank_and_as_on_the_cpu(cupy, names, wire):
    cpu_comm = chainermn.create_communicator(
        "flat", allreduce_grad_dtype=wire, compression="powersgd", powersgd_rank=RANK, powersgd_start_iter=START
    )
    cpu = _run(cpu_comm, _model(), np.asarray)
    for name in names:
        comm = chainermn.create_communicator(
            name, allreduce_grad_dtype=wire, compression="powersgd", powersgd_rank=RANK, powersgd_start_iter=START
        )
        model = _model()
        model.to_device(chainer.get_device(f"@cupy:{cupy.cuda.Device().id}"))
        got = _run(comm, model, cupy.asarray)
        mine = []
        for step, (g, c) in enumerate(zip(got, cpu)):
            for n in g:
                assert isinstance(g[n], cupy.ndarray) and g[n].dtype == np.float32, (name, n)
                host = cupy.asnumpy(g[n])
                mine.append(host.ravel())
                tol = 2e-2 if wire else 1e-4
                np.testing.assert_allclose(host, c[n], atol=tol * np.abs(c[n]).max(), err_msg=f"{name} {n} {step}")
        mine = np.concatenate(mine)
        for other in comm.mpi_comm.allgather(mine):
            assert other.tobytes() == mine.tobytes(), name
        # the state round-trips a checkpoint onto the GPU
        saved = DictionarySerializer()
        comm.powersgd.serialize(saved[powersgd.STATE_KEY], model, comm.size)
        back = powersgd.PowerSGD()
        back.serialize(NpzDeserializer(saved.target)[powersgd.STATE_KEY], model, comm.size)
        st, was = back.state(model.big.W), comm.powersgd.state(model.big.W)
        assert isinstance(st.q, cupy.ndarray) and isinstance(st.error, cupy.ndarray)
        assert cupy.asnumpy(st.error).tobytes() == cupy.asnumpy(was.error).tobytes()
        comm.finalize()
    cpu_comm.finalize()
