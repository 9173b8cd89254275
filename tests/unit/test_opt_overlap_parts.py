"""The parts of overlap=True that need no MPI: the backward driver, bucket plans, config checks."""

import chainer
import chainer.functions as F
import chainer.links as L
import numpy as np
import pytest

from mnframe.builder.validate import validate
from mnframe.config import compose as C
from mnframe.config.issues import ConfigError
from mnframe.optimizers import early_backward
from mnframe.optimizers.overlap import bucket_cap_bytes, plan_buckets


class Net(chainer.Chain):
    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.a = L.Linear(6, 8)
            self.shared = L.Linear(8, 8)
            self.out = L.Linear(8, 3)
            self.unused = L.Linear(2, 2)

    def forward(self, x, t):
        h = F.relu(self.a(x))
        h = self.shared(F.tanh(self.shared(h))) + h  # a weight used twice, a skip connection
        return F.softmax_cross_entropy(self.out(h), t)


def _grads(accumulate, driver, loss_scale=None):
    np.random.seed(0)
    model = Net()
    x = np.random.standard_normal((4, 6)).astype(np.float32)
    t = np.array([0, 1, 2, 1], np.int32)
    finals = []
    for _ in range(2 if accumulate else 1):
        if not accumulate:
            model.cleargrads()
        loss = model(x, t)
        if driver:
            late = early_backward.backward(loss, loss_scale, finals.append)
        else:
            loss.backward(loss_scale=loss_scale)
            late = None
    return model, finals, late


@pytest.mark.parametrize("accumulate", [False, True], ids=["cleargrads", "accumulating"])
@pytest.mark.parametrize("loss_scale", [None, 8.0])
def test_driver_gives_chainers_gradients_bitwise(accumulate, loss_scale):
    ref, _, _ = _grads(accumulate, driver=False, loss_scale=loss_scale)
    got, finals, late = _grads(accumulate, driver=True, loss_scale=loss_scale)
    for (name, a), (_, b) in zip(sorted(ref.namedparams()), sorted(got.namedparams())):
        assert (a.grad is None) == (b.grad is None), name
        if a.grad is not None:
            assert a.grad.tobytes() == b.grad.tobytes(), name
        assert getattr(a, "_loss_scale", None) == getattr(b, "_loss_scale", None)
    # handed over early: the last layers first; the shared weight only after its second use
    names = {id(p): n for n, p in got.namedparams()}
    order = [names[id(v)] for v in finals[-7:]]
    assert order.index("/out/W") < order.index("/shared/W") < order.index("/a/W")
    assert late == [] and "/unused/W" not in order


def test_plan_buckets_caps_bytes_in_order():
    sizes = {"a": 40, "b": 40, "c": 100, "d": 10}
    assert plan_buckets(["d", "c", "b", "a"], sizes, 60) == (("d",), ("c",), ("b",), ("a",))
    assert plan_buckets(["d", "b", "a", "c"], sizes, 100) == (("d", "b", "a"), ("c",))


def test_the_first_bucket_is_small_so_averaging_starts_early():
    """DDP's rule: the first bucket (the last layers) has its own, smaller cap; later ones the cap."""
    sizes = {"a": 40, "b": 40, "c": 100, "d": 10}
    assert plan_buckets(["d", "b", "a", "c"], sizes, 100, first_cap_bytes=50) == (("d", "b"), ("a",), ("c",))
    assert plan_buckets(["d", "b", "a", "c"], sizes, 100, first_cap_bytes=5) == (("d",), ("b", "a"), ("c",))
    # a first cap above the cap is the cap
    assert plan_buckets(["d", "b", "a", "c"], sizes, 60, first_cap_bytes=1000) == (("d", "b"), ("a",), ("c",))


def test_the_default_cap_is_sized_to_the_model():
    """Without bucket_cap_mb: a quarter of the gradients, at least 1 MiB and at most DDP's 25 MiB."""
    mib = 1 << 20
    assert bucket_cap_bytes(None, 6.5 * mib) == int(6.5 * mib / 4)  # NIN at width 0.5: four buckets
    assert bucket_cap_bytes(None, 0.2 * mib) == mib  # small models: DDP's first-bucket size
    assert bucket_cap_bytes(None, 400 * mib) == 25 * mib  # large ones: DDP's cap
    assert bucket_cap_bytes(3, 400 * mib) == 3 * mib  # a given cap is kept
    assert bucket_cap_bytes(1e-9, mib) == 1


def _refused(*overrides):
    with pytest.raises(ConfigError) as info:
        validate(C.compose(list(overrides), ()), 1)
    return str(info.value)


@pytest.mark.slow  # a subprocess or many config compositions: the full tier
def test_config_checks():
    assert "set one of them" in _refused("optimizer.overlap=true", "optimizer.double_buffering=true")
    assert "optimizer.bucket_cap_mb" in _refused("optimizer.overlap=true", "optimizer.bucket_cap_mb=0")
    assert "overlap, which is off" in _refused("optimizer.overlap=false", "optimizer.bucket_cap_mb=4")
    assert "overlap, which is off" in _refused("optimizer.autotune=false", "optimizer.bucket_cap_mb=4")
    auto = validate(C.compose(["optimizer.bucket_cap_mb=4"], ()), 1)  # overlap auto: the trial's buckets
    assert auto.optimizer.overlap == "auto" and auto.optimizer.bucket_cap_mb == 4
    cfg = validate(C.compose(["optimizer.overlap=true", "optimizer.bucket_cap_mb=4"], ()), 1)
    assert cfg.optimizer.overlap is True and cfg.optimizer.bucket_cap_mb == 4


def test_an_op_of_another_thread_leaves_the_op_in_flight_alone():
    """The overlap's thread communicates while the main thread waits in ``overlap:wait``: the op in
    flight (what the collective deadlines watch) stays the main thread's."""
    import threading

    from mnframe.runtime import oplog

    log = oplog.OpLog()
    inside, release = threading.Event(), threading.Event()

    def worker():
        with log.op("bucket"):
            inside.set()
            release.wait(10)

    with log.op("overlap:wait") as waiting:
        t = threading.Thread(target=worker)
        t.start()
        inside.wait(10)
        assert log.current is waiting
        release.set()
        t.join()
        assert log.current is waiting
    assert log.current is None
    assert [r.name for r in log.history] == ["bucket", "overlap:wait"]
