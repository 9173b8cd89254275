"""The GPU wiring that can be checked without a GPU: strategy tables, CUDA-aware detection."""

import importlib

import pytest

from mnframe.communicators import cuda_aware, registry
from mnframe.optimizers import multi_node


def _load(target):
    if isinstance(target, str):
        module, _, attr = target.partition(":")
        return getattr(importlib.import_module(module), attr)  # imports without CuPy
    return target


@pytest.mark.parametrize("name", list(registry.COMMUNICATORS))
def test_every_name_has_a_gpu_strategy_and_cpu_ones_a_cpu_strategy(name):
    info = registry.COMMUNICATORS[name]
    cls = info.cls
    assert "cupy" in cls.grad_devices(), f"{name} must average CuPy gradients (ChainerMN API reference: GPU OK)"
    assert ("numpy" in cls.grad_devices()) == info.cpu_ok
    for target in cls.reducers.values():
        assert callable(_load(target))
    assert cls.double_buffering in multi_node.AVERAGERS
    assert callable(_load(multi_node.AVERAGERS[cls.double_buffering]))


def test_pure_nccl_double_buffers_on_a_cuda_stream():
    cls = registry.COMMUNICATORS["pure_nccl"].cls
    assert cls.double_buffering == "nccl"


@pytest.mark.parametrize("value,want", [("1", True), ("true", True), ("0", False), ("off", False), ("", None)])
def test_cuda_aware_env_override(monkeypatch, value, want):
    monkeypatch.setenv(cuda_aware.ENV, value)
    assert cuda_aware.from_env() is want
    if want is not None:
        assert cuda_aware.detect() == (want, f"{cuda_aware.ENV}={int(want)}")


def test_cuda_aware_bad_env_names_the_variable(monkeypatch):
    monkeypatch.setenv(cuda_aware.ENV, "maybe")
    with pytest.raises(ValueError, match="MNFRAME_CUDA_AWARE='maybe'"):
        cuda_aware.detect()


def test_cuda_aware_library_query(monkeypatch):
    """The pip MPICH answers the MPIX query (built without CUDA: False); agreed() on one rank follows it."""
    monkeypatch.delenv(cuda_aware.ENV, raising=False)
    answer = cuda_aware.query_library()
    assert answer in (True, False, None)
    aware, how = cuda_aware.detect()
    assert aware is bool(answer) and how
    from mpi4py import MPI

    assert cuda_aware.agreed(MPI.COMM_SELF) is aware
