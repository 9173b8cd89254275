"""PowerSGD's parts without MPI: which gradients are compressed, the bytes it sends, Gram-Schmidt,
the checkpoint state (round trip, afresh on a resize), and the configuration's checks."""

import chainer
import chainer.links as L
import numpy as np
import pytest
from chainer.serializers.npz import DictionarySerializer, NpzDeserializer

from mnframe.builder.validate import validate
from mnframe.communicators import options as config
from mnframe.communicators import powersgd
from mnframe.config import compose as C
from mnframe.config.issues import ConfigError

# the mnist recipe's MLP (1000 units) on 28x28 MNIST, Chainer's (out, in) weights
MLP_SHAPES = [(1000, 784), (1000,), (1000, 1000), (1000,), (10, 1000), (10,)]


def test_which_gradients_are_compressed():
    assert powersgd.compressible((1000, 784), 4)
    assert powersgd.compressible((10, 1000), 4)  # 4 * 1010 < 10000
    assert not powersgd.compressible((1000,), 4)  # vectors go whole
    assert not powersgd.compressible((4, 1000), 4)  # the smallest side must exceed the rank
    assert not powersgd.compressible((6, 6), 4)  # 4 * 12 >= 36: the factors are no smaller
    assert powersgd.compressible((64, 3, 3, 3), 4)  # a kernel seen as 64 x 27
    assert powersgd.matrix_shape((64, 3, 3, 3)) == (64, 27)


def test_the_mnist_mlp_sends_under_a_twentieth_of_float32():
    sent, full = powersgd.wire_elements(MLP_SHAPES, powersgd.DEFAULT_RANK)
    assert full == 784_000 + 1_000_000 + 10_000 + 2_010
    assert sent == 4 * (1784 + 2000 + 1010) + 2_010
    assert sent * 20 <= full


def test_gram_schmidt_orthonormal_and_zero_safe():
    a = np.random.RandomState(0).standard_normal((50, 4)).astype(np.float32)
    powersgd.orthogonalize(a)
    np.testing.assert_allclose(a.T @ a, np.eye(4), atol=1e-5)
    z = np.zeros((10, 3), np.float32)
    powersgd.orthogonalize(z)
    assert not z.any()
    p, q = np.random.RandomState(1).standard_normal((2, 7, 3))
    np.testing.assert_allclose(powersgd.outer_sum(p, q), p @ q.T, rtol=1e-12)


def _model_with_state(steps=3):
    model = chainer.Chain()
    with model.init_scope():
        model.l = L.Linear(20, 30)
    ps = powersgd.PowerSGD()
    for step in range(steps):
        rs = np.random.RandomState(step)
        for _, p in model.namedparams():
            p.grad = rs.standard_normal(p.shape).astype(np.float32)
        ps.mean(list(sorted(model.namedparams())), 2, 1, None)
    return model, ps


def _saved(model, ps, world_size):
    s = DictionarySerializer()
    ps.serialize(s[powersgd.STATE_KEY], model, world_size)
    return s.target


def test_state_round_trip_and_afresh_on_a_resize(capsys):
    model, ps = _model_with_state()
    w = model.l.W
    st = ps.state(w)
    assert st.steps == 3 and st.q.shape == (20, 2) and st.error.shape == (30, 20)
    arrays = _saved(model, ps, world_size=2)

    back = powersgd.PowerSGD()
    back.serialize(NpzDeserializer(arrays)[powersgd.STATE_KEY], model, 2)
    got = back.state(w)
    assert got.steps == 3 and got.q.tobytes() == st.q.tobytes() and got.error.tobytes() == st.error.tobytes()
    assert back.state(model.l.b).q is None and back.state(model.l.b).steps == 3

    resized = powersgd.PowerSGD()
    resized.serialize(NpzDeserializer(arrays)[powersgd.STATE_KEY], model, 3, say_rank0=True)
    assert resized.state(w).steps == 0 and resized.state(w).q is None
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["mnframe powersgd: compression state (Q, error feedback) starts afresh: the world size changed"]

    empty = powersgd.PowerSGD()
    empty.serialize(NpzDeserializer({})[powersgd.STATE_KEY], model, 2, say_rank0=True)
    assert "the checkpoint holds none" in capsys.readouterr().err


def test_state_keys_are_per_rank():
    from mnframe.checkpoint.trainer_io import is_per_rank

    model, ps = _model_with_state()
    keys = ["updater/optimizer:main/" + k for k in _saved(model, ps, 2)]
    assert keys and all(is_per_rank(k) for k in keys)
    assert not is_per_rank("updater/optimizer:main/l/W/m")


def test_communicator_config_values():
    assert config.check("compression", "none") is None
    assert config.check("compression", "powersgd") == "powersgd"
    with pytest.raises(ValueError, match="expected one of none, powersgd"):
        config.check("compression", "topk")
    with pytest.raises(ValueError, match="integer >= 1"):
        config.check("powersgd_rank", 0)
    with pytest.raises(ValueError, match="integer >= 0"):
        config.check("powersgd_start_iter", -1)


def _refused(*overrides):
    with pytest.raises(ConfigError) as info:
        validate(C.compose(list(overrides), ()), 2)
    return str(info.value)


@pytest.mark.slow  # a subprocess or many config compositions: the full tier
def test_runner_config():
    cfg = validate(C.compose(["communicator.compression=powersgd", "communicator.powersgd_rank=2"], ()), 2)
    assert cfg.communicator.compression == "powersgd" and cfg.communicator.powersgd_rank == 2
    assert cfg.communicator.powersgd_start_iter == powersgd.DEFAULT_START_ITER
    assert validate(C.compose([], ()), 2).communicator.compression == "none"
    assert "communicator.compression" in _refused("communicator.compression=topk")
    assert "communicator.powersgd_rank" in _refused("communicator.powersgd_rank=0")
    assert "double_buffering" in _refused("communicator.compression=powersgd", "optimizer.double_buffering=true")
    assert "model-parallel" in _refused("recipe=mnist_model_parallel", "communicator.compression=powersgd")


def test_float16_gradients_are_compressed_in_float32():
    model = chainer.Chain()
    with model.init_scope():
        model.l = L.Linear(20, 30)
    model.l.W.array = model.l.W.array.astype(np.float16)
    ps = powersgd.PowerSGD()
    for step in range(3):
        for _, p in model.namedparams():
            p.grad = np.random.RandomState(step).standard_normal(p.shape).astype(p.dtype)
        ps.mean(list(sorted(model.namedparams())), 2, 1, None)
    assert model.l.W.grad.dtype == np.float16 and np.isfinite(model.l.W.grad).all()
    st = ps.state(model.l.W)
    assert st.q.dtype == st.error.dtype == np.float32
    assert np.linalg.matrix_rank(model.l.W.grad.astype(np.float64), tol=1e-2) <= 2
