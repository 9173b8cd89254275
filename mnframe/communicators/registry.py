"""The table of communicator names: each name's class (import-light: no MPI started, no CuPy).

The one place a communicator name is stated: the factory creates the row's class
(which states its own ``reducers``, the strategy per gradient array module), the
runner's ``communicator`` config group is generated from ``COMMUNICATORS``
(``mnframe.config.compose``), and the config validator reads ``needs_cuda``
and ``cpu_ok`` without starting MPI. Adding a name is one row here plus its
module.

``create_communicator()`` with no name picks ``factory.default_name`` (every
rank's view: ``GPU_DEFAULT``, pure_nccl, with CUDA, NCCL and a GPU per rank;
non_cuda_aware when ranks share a GPU or NCCL is missing; else
``CPU_DEFAULT``, two_dimensional, the fastest CPU strategy here: a single
fused shared-memory pass on one node, slice-wise allreduce across nodes).
The runner's ``communicator=auto`` (its default) goes by the training device
instead (``name_for_device``), so a CPU run on a GPU machine still averages
NumPy gradients.
"""

import dataclasses
import types
from typing import Mapping

# The communicator modules import mpi4py.MPI only on first use (runtime.mpi_comm.MPI) and CuPy only
# when GPU gradients are averaged, so composing a config, --help and --check read this table
# without starting MPI (tests/unit/test_comm_signatures.py: test_registry_is_import_light).
from mnframe.communicators.dummy import DummyCommunicator
from mnframe.communicators.flat import FlatCommunicator
from mnframe.communicators.hierarchical import HierarchicalCommunicator
from mnframe.communicators.naive import NaiveCommunicator
from mnframe.communicators.non_cuda_aware import NonCudaAwareCommunicator
from mnframe.communicators.pure_nccl import PureNcclCommunicator
from mnframe.communicators.single_node import SingleNodeCommunicator
from mnframe.communicators.two_dimensional import TwoDimensionalCommunicator


@dataclasses.dataclass(frozen=True)
class CommunicatorInfo:
    """One communicator name: its class, which states its strategy per gradient array module.

    ``reducers`` is the class's table from the array module of the gradients ("numpy",
    "cupy") to a reducer class or factory; ``cpu_ok``/``needs_cuda`` follow from its keys.
    """

    cls: type  # an MpiCommunicator subclass
    needs_nccl: bool  # needs NCCL (through CuPy)
    description: str

    @property
    def reducers(self) -> Mapping[str, object]:
        """Array module ("numpy", "cupy") -> reducer: a class, or "module:attr" (GPU, imported on first use)."""
        return types.MappingProxyType(self.cls.reducers)

    @property
    def cpu_ok(self) -> bool:
        """Averages NumPy (CPU) gradients."""
        return "numpy" in self.reducers

    @property
    def needs_cuda(self) -> bool:
        """GPU only: needs CuPy and a CUDA device."""
        return not self.cpu_ok


def _info(cls, description, *, needs_nccl=False):
    """One row. Every ChainerMN communicator averages GPU gradients (``cupy`` in its class's
    ``reducers``); with ``numpy`` there too the name also trains on the CPU, else it is GPU-only."""
    return CommunicatorInfo(cls, needs_nccl, description)


COMMUNICATORS = {
    "naive": _info(NaiveCommunicator, "one MPI allreduce per parameter (reference, testing)"),
    "flat": _info(FlatCommunicator, "one persistent flat buffer, one MPI allreduce over all ranks"),
    "hierarchical": _info(
        HierarchicalCommunicator, "shared-memory reduce in the node, leaders' allreduce, broadcast in the node"
    ),
    "two_dimensional": _info(
        TwoDimensionalCommunicator, "shared-memory reduce-scatter, per-slice allreduce across nodes, allgather"
    ),
    # the two_dimensional reducer as is: on one node it is the fused pass (the class refuses several nodes)
    "single_node": _info(SingleNodeCommunicator, "all ranks on one node: one fused shared-memory pass"),
    "dummy": _info(DummyCommunicator, "no gradient exchange (benchmarking only)"),
    "pure_nccl": _info(PureNcclCommunicator, "NCCL allreduce of GPU gradients", needs_nccl=True),
    "non_cuda_aware": _info(NonCudaAwareCommunicator, "GPU gradients staged through host memory and averaged over MPI"),
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


AUTO = "auto"


def name_for_device(device):
    """The communicator ``auto`` stands for in the runner: the GPU default when the
    job trains on GPUs (``device`` "gpu"), the CPU default otherwise."""
    return GPU_DEFAULT if device == "gpu" else CPU_DEFAULT


def cpu_names():
    return [n for n, info in COMMUNICATORS.items() if info.cpu_ok]
