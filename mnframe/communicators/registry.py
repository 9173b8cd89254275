"""The table of communicator names (import-light: no mpi4py, no CuPy).

The framework's config validator reads ``COMMUNICATORS`` (names, ``needs_cuda``,
``cpu_ok``) without starting MPI; the factory resolves ``class_path`` lazily.

``default_name()`` (this process's view, without MPI; ``create_communicator()``
with no name uses ``factory.default_name``, which also falls back to
``non_cuda_aware`` when ranks share a GPU):
``pure_nccl`` when CuPy with CUDA devices and NCCL is importable, otherwise
``two_dimensional``, the fastest CPU strategy here (a single fused
shared-memory pass on one node; slice-wise allreduce across nodes).
The runner's ``communicator=auto`` (its default) goes by the training device
instead (``name_for_device``), so a CPU run on a GPU machine still averages
NumPy gradients.
"""
import dataclasses


@dataclasses.dataclass(frozen=True)
class CommunicatorInfo:
    class_path: str     # "module:Class"
    needs_cuda: bool    # needs CuPy and a CUDA device
    needs_nccl: bool    # needs NCCL (through CuPy)
    cpu_ok: bool        # averages NumPy (CPU) gradients
    description: str


_P = "mnframe.communicators."

COMMUNICATORS = {
    "naive": CommunicatorInfo(_P + "naive:NaiveCommunicator", False, False, True,
                              "one MPI allreduce per parameter (reference, testing)"),
    "flat": CommunicatorInfo(_P + "flat:FlatCommunicator", False, False, True,
                             "one persistent flat buffer, one MPI allreduce over all ranks"),
    "hierarchical": CommunicatorInfo(_P + "hierarchical:HierarchicalCommunicator", False, False, True,
                                     "shared-memory reduce in the node, leaders' allreduce, broadcast in the node"),
    "two_dimensional": CommunicatorInfo(_P + "two_dimensional:TwoDimensionalCommunicator", False, False, True,
                                        "shared-memory reduce-scatter, per-slice allreduce across nodes, allgather"),
    "single_node": CommunicatorInfo(_P + "single_node:SingleNodeCommunicator", False, False, True,
                                    "all ranks on one node: one fused shared-memory pass"),
    "dummy": CommunicatorInfo(_P + "dummy:DummyCommunicator", False, False, True,
                              "no gradient exchange (benchmarking only)"),
    "pure_nccl": CommunicatorInfo(_P + "pure_nccl:PureNcclCommunicator", True, True, False,
                                  "NCCL allreduce of GPU gradients"),
    "non_cuda_aware": CommunicatorInfo(_P + "non_cuda_aware:NonCudaAwareCommunicator", True, False, False,
                                       "GPU gradients staged through host memory and averaged over MPI"),
}

CPU_DEFAULT = "two_dimensional"
GPU_DEFAULT = "pure_nccl"


def cuda_problem(needs_nccl=False):
    """None if CUDA (and NCCL when asked) is usable, else a sentence saying what is missing
    (from ``mnframe.cuda_env.probe``, the one CUDA probe)."""
    from mnframe import cuda_env
    info = cuda_env.probe()
    if info.problem is not None:
        return info.problem
    if info.device_count < 1:
        return "no CUDA device is visible"
    if needs_nccl and info.nccl_problem is not None:
        return info.nccl_problem
    return None


def default_name():
    """The best communicator available here: pure_nccl on GPUs with NCCL, else two_dimensional."""
    return GPU_DEFAULT if cuda_problem(needs_nccl=True) is None else CPU_DEFAULT


AUTO = "auto"


def name_for_device(device):
    """The communicator ``auto`` stands for in the runner: the GPU default when the
    job trains on GPUs (``device`` "gpu"), the CPU default otherwise."""
    return GPU_DEFAULT if device == "gpu" else CPU_DEFAULT


def cpu_names():
    return [n for n, info in COMMUNICATORS.items() if info.cpu_ok]
