"""GPU code paths checked on CPU, with CUDA or CuPy faked at an honest boundary.

* package hints follow the CuPy installed (cu12 vs cu13), in the probe, NCCL's
  error and ``doctor`` (the probe answer is faked, the hint code is real);
* on a CuPy without cuDNN, Chainer's per-rank "cuDNN is not enabled" warning
  is filtered (only it) and rank 0 logs one note;
* CuPy's generator is re-seeded and saved in checkpoints and restored on
  load (a fake ``cupy`` module stands in for the real one: its generator
  keeps a counter, the state CuPy cannot export);
* the NCCL groups of double buffering and MNBN are closed by ``finalize()``
  of their owner and of the communicator;
* the runner accepts double buffering with every communicator.
"""

import logging
import sys
import types
import warnings

import chainer
import numpy as np
import pytest

import mnframe as chainermn
from mnframe import cuda_env
from mnframe.checkpoint import rng
from mnframe.commands import doctor
from mnframe.communicators import nccl_ops


def _probe(major, package=None, cupy="14.2.0", nccl=None, cudnn=False):
    return cuda_env.CudaProbe(
        problem=None,
        device_count=1,
        cupy_version=cupy,
        cupy_package=package or f"cupy-cuda{major}x",
        cuda_major=major,
        nccl_problem=nccl,
        has_cudnn=cudnn,
    )


# --------------------------------------------------------------------------- hints (item 7)


@pytest.mark.parametrize(
    "dist,major",
    [
        ("cupy-cuda13x", 13),
        ("cupy-cuda12x", 12),
        ("cupy_cuda11x", 11),
        ("cupy-cuda114", 11),
        ("cupy", None),
        (None, None),
    ],
)
def test_cuda_major_from_the_cupy_distribution(dist, major):
    assert cuda_env.cuda_major_of(dist) == major


def test_packages_follow_the_cuda_major():
    assert cuda_env.package_for("nccl", 13) == "nvidia-nccl-cu13"
    assert cuda_env.package_for("nccl", 12) == "nvidia-nccl-cu12"
    assert cuda_env.package_for("cudnn", 12) == "nvidia-cudnn-cu12"
    assert cuda_env.package_for("nvrtc", 13) == "nvidia-cuda-nvrtc"  # CUDA 13 dropped the suffix
    assert cuda_env.package_for("nvrtc", 12) == "nvidia-cuda-nvrtc-cu12"


@pytest.mark.parametrize("major", [12, 13])
def test_nccl_error_names_the_matching_package(monkeypatch, major):
    monkeypatch.setattr(cuda_env, "probe", lambda: _probe(major))
    seen = [("CuPy cannot load NCCL", ("h", "0")), (None, ("h", "1"))]
    with pytest.raises(RuntimeError) as info:
        nccl_ops._raise_if_unusable("pure_nccl", seen)
    assert f"pip install nvidia-nccl-cu{major}" in str(info.value)
    assert "cu12" not in str(info.value) or major == 12


@pytest.mark.parametrize("major", [12, 13])
def test_doctor_names_the_matching_nccl_package(monkeypatch, major):
    monkeypatch.setattr(cuda_env, "probe", lambda: _probe(major, nccl="CuPy cannot load NCCL"))
    results = {r.step: r for r in doctor.check_cuda()}
    assert results["CUDA"].status == "PASS" and f"cupy-cuda{major}x" in results["CUDA"].detail
    assert results["NCCL"].status == "FAIL" and f"nvidia-nccl-cu{major}" in results["NCCL"].fix


def test_doctor_without_cupy(monkeypatch):
    monkeypatch.setattr(cuda_env, "probe", lambda: cuda_env.CudaProbe(problem="CuPy is not installed (...)"))
    (result,) = doctor.check_cuda()
    assert result.status == "SKIP" and "cupy-cuda13x" in result.fix


# --------------------------------------------------------------------------- cuDNN (item 2)


def test_doctor_says_which_cupy_keeps_cudnn(monkeypatch):
    monkeypatch.setattr(cuda_env, "probe", lambda: _probe(13))
    results = {r.step: r for r in doctor.check_cuda()}
    note = results["cuDNN"].detail
    assert results["cuDNN"].status == "INFO"
    assert "has no cuDNN" in note and "cupy-cuda12x<14" in note and "nvidia-cudnn-cu12" in note
    monkeypatch.setattr(cuda_env, "probe", lambda: _probe(12, cupy="13.6.0", cudnn=True))
    assert {r.step: r for r in doctor.check_cuda()}["cuDNN"].status == "PASS"


def _chainer_cudnn_warning():
    # the warning as chainer.backends.cuda.check_cuda_available issues it (module chainer.backends.cuda)
    warnings.warn_explicit(
        "cuDNN is not enabled.\nPlease reinstall CuPy after you install cudnn",
        UserWarning,
        "cuda.py",
        154,
        module="chainer.backends.cuda",
    )


@pytest.mark.parametrize("rank", [0, 1])
def test_one_cudnn_note_on_rank_0_instead_of_a_warning_per_rank(monkeypatch, caplog, rank):
    monkeypatch.setattr(cuda_env, "probe", lambda: _probe(13))
    monkeypatch.setattr(cuda_env, "_NOTED", [])
    with warnings.catch_warnings(record=True) as seen, caplog.at_level(logging.WARNING, logger="mnframe.cuda"):
        warnings.simplefilter("always")
        cuda_env.quiet_cudnn_warning(rank)
        cuda_env.quiet_cudnn_warning(rank)  # idempotent
        _chainer_cudnn_warning()
        warnings.warn_explicit("cuDNN is not enabled", UserWarning, "x.py", 1, module="somebody.else")
        warnings.warn("another chainer warning", UserWarning, stacklevel=1)
    texts = [str(w.message) for w in seen]
    assert not any(t.startswith("cuDNN is not enabled.\nPlease") for t in texts)  # Chainer's: filtered
    assert "cuDNN is not enabled" in texts and "another chainer warning" in texts  # the rest: kept
    notes = [r.getMessage() for r in caplog.records if "has no cuDNN" in r.getMessage()]
    assert len(notes) == (1 if rank == 0 else 0)


def test_no_note_where_cudnn_works(monkeypatch, caplog):
    monkeypatch.setattr(cuda_env, "probe", lambda: _probe(12, cupy="13.6.0", cudnn=True))
    monkeypatch.setattr(cuda_env, "_NOTED", [])
    with caplog.at_level(logging.WARNING, logger="mnframe.cuda"):
        cuda_env.quiet_cudnn_warning(0)
    assert not caplog.records and cuda_env.cudnn_note() is None


# --------------------------------------------------------------------------- CuPy's generator (item 4)


class _FakeGenerator:
    """Stands in for cupy.random.RandomState: a seed plus how far it has drawn (cuRAND's hidden offset)."""

    def __init__(self, seed=0):
        self.seed(seed)

    def seed(self, seed=None):
        self._state = np.random.RandomState(int(seed) % (2**32))

    def random_sample(self, size, dtype=np.float64):
        values = self._state.random_sample(size).astype(dtype)
        return types.SimpleNamespace(get=lambda: values)


def _fake_cupy(monkeypatch, device_id=0):
    states = {}

    def get_random_state():
        return states.setdefault(device_id, _FakeGenerator())

    def seed(s):
        get_random_state().seed(s)

    random_mod = types.SimpleNamespace(
        _generator=types.SimpleNamespace(_random_states=states), get_random_state=get_random_state, seed=seed
    )
    fake = types.SimpleNamespace(
        random=random_mod, cuda=types.SimpleNamespace(Device=lambda: types.SimpleNamespace(id=device_id))
    )
    monkeypatch.setitem(sys.modules, "cupy", fake)
    return fake


def _save(state):
    target = chainer.serializers.DictionarySerializer()
    state.serialize(target)
    return dict(target.target)


def _load(state, saved):
    state.serialize(chainer.serializers.NpzDeserializer(saved))


def test_cupy_generator_is_seeded_saved_and_restored(monkeypatch):
    cupy = _fake_cupy(monkeypatch)
    rng.seed_cupy(7)
    state = rng.RngState(dict)
    draw = lambda: cupy.random.get_random_state().random_sample((4,)).get()  # noqa: E731
    draw()
    saved = _save(state)
    assert "cupy_seed" in saved
    after_save = [draw() for _ in range(3)]  # the uninterrupted run goes on from the re-seeding point
    cupy.random.seed(12345)  # a resumed process: whatever state it started with
    draw()
    _load(state, saved)
    resumed = [draw() for _ in range(3)]
    for a, b in zip(after_save, resumed):
        np.testing.assert_array_equal(a, b)


def test_seed_everything_seeds_cupy_on_a_gpu_device(monkeypatch):
    from mnframe import pipeline

    cupy = _fake_cupy(monkeypatch)
    gpu = types.SimpleNamespace(xp=cupy)
    pipeline.seed_everything(3, gpu)
    first = cupy.random.get_random_state().random_sample((3,)).get()
    pipeline.seed_everything(3, gpu)
    np.testing.assert_array_equal(first, cupy.random.get_random_state().random_sample((3,)).get())


def test_checkpoints_without_cupy_are_unchanged(monkeypatch):
    monkeypatch.delitem(sys.modules, "cupy", raising=False)
    saved = _save(rng.RngState(dict))
    assert "cupy_seed" not in saved
    _fake_cupy(monkeypatch)  # a GPU job resuming a CPU job's checkpoint keeps its own seed
    _load(rng.RngState(dict), saved)


# --------------------------------------------------------------------------- closing NCCL groups (item 5)


class _FakeGroup:
    closed = 0

    def close(self):
        self.closed += 1


def _stream_averager(comm):
    from mnframe.optimizers.double_buffering_nccl import StreamStaleAverager

    averager = StreamStaleAverager.__new__(StreamStaleAverager)  # no CuPy: only the close path is exercised
    averager.communicator, averager._pending, averager._slots = comm, None, {}
    averager._nccl = _FakeGroup()
    comm.close_on_finalize(averager.close)
    return averager


def test_double_buffering_group_closed_by_optimizer_and_communicator():
    comm = chainermn.create_communicator("naive")
    averager = _stream_averager(comm)
    group = averager._nccl
    opt = chainermn.create_multi_node_optimizer(chainer.optimizers.SGD(), comm)
    opt.__dict__["_averager"] = averager
    opt.finalize()
    assert group.closed == 1 and averager._nccl is None
    averager._nccl = second = _FakeGroup()
    comm.finalize()  # the communicator closes what was built over it
    assert second.closed == 1
    comm.finalize()
    assert second.closed == 1


def test_mpi_double_buffering_finalize_waits():
    comm = chainermn.create_communicator("naive")
    opt = chainermn.create_multi_node_optimizer(chainer.optimizers.SGD(), comm, double_buffering=True)
    opt.finalize()  # nothing in flight: returns
    comm.finalize()


def test_mnbn_group_closed_by_link_and_communicator():
    from mnframe.links import batch_normalization as bn

    comm = chainermn.create_communicator("naive")
    link = chainermn.links.MultiNodeBatchNormalization(3, comm, communication_backend="mpi")
    exchange = bn._NcclExchange(comm)
    exchange._group = group = _FakeGroup()
    link._exchange = exchange
    link.finalize()
    assert group.closed == 1 and link._exchange is None
    exchange._group = second = _FakeGroup()
    comm.close_on_finalize(exchange.close)
    comm.finalize()
    assert second.closed == 1


# --------------------------------------------------------------------------- runner (item 6)


@pytest.mark.parametrize("name", ["two_dimensional", "flat", "naive", "hierarchical"])
def test_runner_accepts_double_buffering_with_every_cpu_communicator(name):
    from mnframe.commands import cli

    text = cli.check([f"communicator={name}", "optimizer.double_buffering=true"], 2, has_cuda=False)
    assert "double_buffering" in text or text


def test_gpu_check_training_overrides_validate():
    """scripts/gpu_check.sh's ResNet-50 runs are valid runner configs on a GPU machine (2 ranks)."""
    import re
    from pathlib import Path

    from mnframe.commands import cli

    script = (Path(__file__).resolve().parents[2] / "scripts" / "gpu_check.sh").read_text()
    words = re.search(r'^RESNET_ARGS="([^"]+)"', script, re.M).group(1).split()
    extras = [m.split() for m in re.findall(r'RESNET_EXTRA="([^"]+)"', script)]  # step 7's runs
    assert len(extras) >= 2
    runs = [("pure_nccl", []), ("two_dimensional", [])] + [("two_dimensional", e) for e in extras]
    for comm, extra in runs:
        text = cli.check(
            words
            + [
                "dataset.source.n_synthetic=384",
                "dataset.batch_size=16",
                f"communicator={comm}",
                "trainer.stop=[12,iteration]",
            ]
            + extra,
            2,
            has_cuda=True,
        )
        assert f"communicator {comm}" in text, (extra, text)


def test_nccl_version_text():
    """NCCL's version code as doctor and the GPU check print it (the first GPU run printed "None")."""
    from mnframe import cuda_env

    assert cuda_env.nccl_version_text(22803) == "2.28.3"
    assert cuda_env.nccl_version_text(2708) == "2.7.8"
    assert cuda_env.nccl_version_text(None) == "unknown"
