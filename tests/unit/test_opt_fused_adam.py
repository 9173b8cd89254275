"""mnframe.optimizers.fused.Adam updates bitwise like chainer.optimizers.Adam, and falls back to it."""

import chainer
import numpy as np
import pytest

from mnframe._internal.import_path import resolve as import_target
from mnframe.builder.optimizer import OPTIMIZERS
from mnframe.optimizers import fused

SHAPES = [(3, 5), (7,), (1,), (40, 33)]  # 40 * 33 > the patched BLOCK: several blocks and a partial one


class Net(chainer.Chain):
    def __init__(self, dtype):
        super().__init__()
        rng = np.random.RandomState(0)
        with self.init_scope():
            for i, shape in enumerate(SHAPES):
                setattr(self, f"p{i}", chainer.Parameter(rng.standard_normal(shape).astype(dtype)))


def _run(optimizer_cls, hparams, dtype, steps=4):
    """Parameters and optimizer states after ``steps`` updates with the same pseudo-random gradients."""
    model = Net(dtype)
    opt = optimizer_cls(**hparams)
    opt.setup(model)
    rng = np.random.RandomState(1)
    for _ in range(steps):
        for p in model.params():
            p.grad = rng.standard_normal(p.shape).astype(dtype)
        opt.update()
    out = {name: p.array.copy() for name, p in model.namedparams()}
    for name, p in model.namedparams():
        out.update({f"{name}/{k}": v.copy() for k, v in p.update_rule.state.items()})
    return out


@pytest.mark.parametrize(
    "hparams",
    [
        {},
        {"alpha": 0.01, "beta1": 0.8, "beta2": 0.99, "eps": 1e-6},
        {"weight_decay_rate": 0.1, "eta": 0.3},
        {"amsgrad": True},
        {"amsgrad": True, "weight_decay_rate": 0.01},
    ],
    ids=["default", "hparams", "weight_decay", "amsgrad", "amsgrad_wd"],
)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_bitwise_equal_to_chainer(monkeypatch, hparams, dtype):
    monkeypatch.setattr(fused, "BLOCK", 512)
    monkeypatch.setattr(fused, "_scratch", {})
    expected = _run(chainer.optimizers.Adam, hparams, dtype)
    got = _run(fused.Adam, hparams, dtype)
    assert expected.keys() == got.keys()
    for key in expected:
        assert got[key].dtype == expected[key].dtype
        assert np.array_equal(got[key], expected[key]), key


@pytest.mark.parametrize(
    "hparams, dtype",
    [
        ({"adabound": True}, np.float32),  # not on the fast path: Chainer's update
        ({"alpha": np.float64(0.002)}, np.float32),  # NumPy scalar: Chainer's update
        ({}, np.float16),  # float16 computes in float32: Chainer's update
    ],
)
def test_falls_back_to_chainer(monkeypatch, hparams, dtype):
    def fail(*args):
        raise AssertionError("the fast path ran")

    monkeypatch.setattr(fused, "_scratch_block", fail)
    expected = _run(chainer.optimizers.Adam, hparams, dtype)
    got = _run(fused.Adam, hparams, dtype)
    for key in expected:
        assert np.array_equal(got[key], expected[key]), key


def test_state_is_interchangeable_with_chainer(tmp_path):
    model = Net(np.float32)
    opt = fused.Adam()
    opt.setup(model)
    for p in model.params():
        p.grad = np.ones(p.shape, np.float32)
    opt.update()
    chainer.serializers.save_npz(tmp_path / "opt.npz", opt)
    other = chainer.optimizers.Adam()
    other.setup(Net(np.float32))
    chainer.serializers.load_npz(tmp_path / "opt.npz", other)
    assert other.t == 1
    for (_, p), (_, q) in zip(model.namedparams(), other.target.namedparams()):
        assert np.array_equal(p.update_rule.state["m"], q.update_rule.state["m"])


def test_optimizer_adam_builds_the_fused_class():
    cls = import_target(OPTIMIZERS["adam"])
    assert cls is fused.Adam and issubclass(cls, chainer.optimizers.Adam)
