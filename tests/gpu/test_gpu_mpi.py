"""Run tests/gpu/mpi/* under mpiexec on a GPU machine, with a hard timeout.

Strategies without NCCL (non_cuda_aware, flat, naive, dummy) run with several
ranks on any number of GPUs (ranks may share one). NCCL refuses two ranks of
one NCCL group on one GPU, but with MNFRAME_FAKE_NODE_SIZE=1 every rank is a
node of its own: hierarchical and two_dimensional then make real NCCL calls
in one-rank groups and average across ranks over MPI, so 2 and 3 ranks on a
single GPU test real cross-rank means through the NCCL code ("fake1" cases).
test_gpu_shared.py checks what happens when ranks share a GPU (2 ranks, one
GPU). The cases with one NCCL group over several GPUs need one GPU per rank
and skip, saying so, on smaller machines.
"""

import os
from pathlib import Path

import pytest

from mnframe.communicators import registry
from mnframe.testing import run_pytest_module


def gpu_count():
    if registry.cuda_problem():
        return 0
    import cupy

    return cupy.cuda.runtime.getDeviceCount()


HERE = Path(__file__).parent
TIMEOUT = int(os.environ.get("MNFRAME_GPU_MPI_TIMEOUT", "300"))  # seconds per case (scripts/gpu_check.sh: 100)
HOST_NAMES = "non_cuda_aware,flat,naive,dummy"
NCCL_NAMES = "pure_nccl,hierarchical,two_dimensional,single_node"
FAKE_NODE_NAMES = "hierarchical,two_dimensional"  # NCCL in one-rank nodes, MPI between them

# (id, module, ranks, environment, GPUs needed)
FAKE1 = {"MNFRAME_FAKE_NODE_SIZE": "1"}
CASES = [
    ("host-2", "test_gpu_comm.py", 2, {"MNFRAME_GPU_NAMES": HOST_NAMES}, 1),
    ("host-3", "test_gpu_comm.py", 3, {"MNFRAME_GPU_NAMES": HOST_NAMES}, 1),
    (
        "host-2x2nodes",
        "test_gpu_comm.py",
        4,
        {"MNFRAME_GPU_NAMES": "non_cuda_aware,flat", "MNFRAME_FAKE_NODE_SIZE": "2"},
        1,
    ),
    ("nccl-fake1-2", "test_gpu_comm.py", 2, {"MNFRAME_GPU_NAMES": FAKE_NODE_NAMES, **FAKE1}, 1),
    ("nccl-fake1-3", "test_gpu_comm.py", 3, {"MNFRAME_GPU_NAMES": FAKE_NODE_NAMES, **FAKE1}, 1),
    ("train-host-2", "test_gpu_train.py", 2, {"MNFRAME_GPU_NAMES": "non_cuda_aware"}, 1),
    ("train-nccl-fake1-2", "test_gpu_train.py", 2, {"MNFRAME_GPU_NAMES": "two_dimensional", **FAKE1}, 1),
    ("train-nccl-fake1-3", "test_gpu_train.py", 3, {"MNFRAME_GPU_NAMES": "hierarchical", **FAKE1}, 1),
    ("shared-2", "test_gpu_shared.py", 2, {"CUDA_VISIBLE_DEVICES": "0"}, 1),  # both ranks on one GPU
    ("powersgd-host-2", "test_gpu_powersgd.py", 2, {"MNFRAME_GPU_NAMES": "non_cuda_aware,flat"}, 1),
    ("powersgd-nccl-fake1-3", "test_gpu_powersgd.py", 3, {"MNFRAME_GPU_NAMES": "two_dimensional", **FAKE1}, 1),
    ("overlap-host-2", "test_gpu_overlap.py", 2, {"MNFRAME_GPU_NAMES": "non_cuda_aware,flat,naive"}, 1),
    ("overlap-nccl-fake1-3", "test_gpu_overlap.py", 3, {"MNFRAME_GPU_NAMES": FAKE_NODE_NAMES, **FAKE1}, 1),
    ("nccl-2", "test_gpu_comm.py", 2, {"MNFRAME_GPU_NAMES": NCCL_NAMES}, 2),
    (
        "nccl-2x2nodes",
        "test_gpu_comm.py",
        4,
        {"MNFRAME_GPU_NAMES": "hierarchical,two_dimensional,pure_nccl", "MNFRAME_FAKE_NODE_SIZE": "2"},
        4,
    ),
    ("train-nccl-2", "test_gpu_train.py", 2, {"MNFRAME_GPU_NAMES": "pure_nccl"}, 2),
    ("overlap-nccl-2", "test_gpu_overlap.py", 2, {"MNFRAME_GPU_NAMES": "pure_nccl,two_dimensional"}, 2),
]


@pytest.mark.parametrize("module,n,env,gpus", [pytest.param(*c[1:], id=c[0]) for c in CASES])
def test_gpu_mpi_module(module, n, env, gpus):
    have = gpu_count()
    if have < gpus:
        pytest.skip(f"needs {gpus} GPUs (NCCL runs one rank per GPU), this machine has {have}")
    path = HERE / "mpi" / module
    result = run_pytest_module(path, n, timeout=TIMEOUT, env=env, cwd=str(HERE.parent.parent))
    if result.timed_out:
        pytest.fail(f"{module} with {n} ranks timed out after {TIMEOUT}s\n{result.output[-6000:]}")
    assert result.returncode == 0, f"{module} with {n} ranks exited {result.returncode}\n{result.output[-8000:]}"
