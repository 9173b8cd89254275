"""Ranks sharing a GPU, decided on CPU with CUDA faked at the one probe (``cuda_env.probe``).

The probe says "CUDA works, NCCL loads, N GPUs"; everything above it is the
real code: the communicator default, the runner's device plan (which GPU, and
whether the communicator's NCCL group would hold two ranks of one GPU) and
MultiNodeBatchNormalization's 'auto' choice. All ranks run on one host, so
more ranks than faked GPUs means ranks share one. No CuPy is imported.
"""

import logging

import chainer
import numpy as np
import pytest

import mnframe as chainermn
from mnframe import cuda_env
from mnframe.builder import placement
from mnframe.links import batch_normalization as bn
from mnframe.runtime.errors import ConfigError

MPI_SIZES = (1, 2, 3)


def fake_cuda(monkeypatch, gpus, nccl=True):
    info = cuda_env.CudaProbe(
        problem=None,
        device_count=gpus,
        cupy_version="14.2.0",
        cupy_package="cupy-cuda13x",
        cuda_major=13,
        nccl_problem=None if nccl else "CuPy cannot load NCCL (pip install nvidia-nccl-cu13)",
    )
    monkeypatch.setattr(cuda_env, "probe", lambda: info)
    return info


def no_cuda(monkeypatch):
    monkeypatch.setattr(cuda_env, "probe", lambda: cuda_env.CudaProbe(problem="CuPy is not installed"))


def world_size():
    from mpi4py import MPI

    return MPI.COMM_WORLD.size


@pytest.mark.parametrize("gpus", [1, 2, 3])
def test_default_communicator_avoids_nccl_on_shared_gpus(monkeypatch, caplog, gpus):
    fake_cuda(monkeypatch, gpus)
    size = world_size()
    with caplog.at_level(logging.INFO, logger="mnframe.communicators"):
        comm = chainermn.create_communicator()
    want = "PureNcclCommunicator" if size <= gpus else "NonCudaAwareCommunicator"
    assert type(comm).__name__ == want
    said = [r.getMessage() for r in caplog.records if "create_communicator" in r.getMessage()]
    assert len(said) == (1 if comm.rank == 0 else 0), said  # one line, on rank 0
    if comm.rank == 0 and size > gpus:
        assert f"{size} ranks share {gpus} GPU(s)" in said[0]
    comm.finalize()


def test_default_without_nccl_or_cuda(monkeypatch):
    fake_cuda(monkeypatch, world_size(), nccl=False)
    comm = chainermn.create_communicator()
    assert type(comm).__name__ == "NonCudaAwareCommunicator"  # CUDA without NCCL: host-staged
    comm.finalize()
    no_cuda(monkeypatch)
    comm = chainermn.create_communicator()
    assert type(comm).__name__ == "TwoDimensionalCommunicator"
    comm.finalize()


def test_device_plan_shares_gpus_with_host_staging(monkeypatch):
    fake_cuda(monkeypatch, 1)
    comm = chainermn.create_communicator("non_cuda_aware")
    gpu, line = placement.gpu_plan(comm, 1)
    assert gpu == 0
    if comm.size == 1:
        assert "one GPU per rank" in line
    else:
        assert f"up to {comm.size} per GPU" in line and "NonCudaAwareCommunicator" in line
    comm.finalize()


def test_device_plan_refuses_nccl_on_a_shared_gpu(monkeypatch):
    fake_cuda(monkeypatch, 1)
    comm = chainermn.create_communicator("pure_nccl")
    if comm.size == 1:
        assert placement.gpu_plan(comm, 1)[0] == 0
    else:
        with pytest.raises(ConfigError) as info:  # on every rank, the same message
            placement.gpu_plan(comm, 1)
        text = str(info.value)
        assert "communicator=non_cuda_aware" in text and f"ranks {list(range(comm.size))} on GPU 0" in text
    comm.finalize()


def test_device_plan_one_gpu_per_rank(monkeypatch):
    size = world_size()
    fake_cuda(monkeypatch, size)
    comm = chainermn.create_communicator("pure_nccl")
    gpu, line = placement.gpu_plan(comm, size)
    assert gpu == comm.intra_rank == comm.rank
    assert "one GPU per rank" in line
    comm.finalize()


def test_device_plan_fake_nodes_of_one_rank_share_one_gpu(monkeypatch):
    """MNFRAME_FAKE_NODE_SIZE=1: every rank is a node of its own, its NCCL group (hierarchical,
    two_dimensional) holds one rank, so all ranks may share GPU 0 -- how the GPU tests run NCCL on one GPU."""
    fake_cuda(monkeypatch, 1)
    monkeypatch.setenv("MNFRAME_FAKE_NODE_SIZE", "1")
    for name in ("two_dimensional", "hierarchical"):
        comm = chainermn.create_communicator(name)
        assert comm.inter_size == comm.size and comm.intra_rank == 0
        gpu, _ = placement.gpu_plan(comm, 1)
        assert gpu == 0
        comm.finalize()
    monkeypatch.delenv("MNFRAME_FAKE_NODE_SIZE")
    comm = chainermn.create_communicator("two_dimensional")
    if comm.size > 1:  # one real node: its NCCL group would hold every rank, all on GPU 0
        with pytest.raises(ConfigError):
            placement.gpu_plan(comm, 1)
    comm.finalize()


def test_mnbn_auto_decision_table():
    ok = (None, ("host", "0000:01:00.0"))
    other = (None, ("host", "0000:02:00.0"))
    assert bn._auto_choice([ok]) == (True, None)
    assert bn._auto_choice([ok, other]) == (True, None)
    use, why = bn._auto_choice([ok, ok])
    assert not use and "share a GPU" in why
    use, why = bn._auto_choice([ok, other, ok])
    assert not use and "share a GPU" in why
    use, why = bn._auto_choice([ok, ("CuPy with NCCL is not importable", None)])
    assert not use and why.startswith("rank 1:")


def test_mnbn_auto_on_numpy_inputs_picks_mpi_and_says_so(caplog):
    comm = chainermn.create_communicator("two_dimensional")
    link = chainermn.links.MultiNodeBatchNormalization(3, comm)
    x = np.arange(12, dtype=np.float32).reshape(4, 3) + comm.rank
    bn._LOGGED.clear()
    with caplog.at_level(logging.INFO, logger="mnframe.links"), chainer.using_config("train", True):
        link(x)
        link(x)
    assert link._exchange.name == "mpi"
    said = [r.getMessage() for r in caplog.records if "communication_backend='auto'" in r.getMessage()]
    assert len(said) == (1 if comm.rank == 0 else 0)
    link.finalize()
    assert link._exchange is None
    comm.finalize()
