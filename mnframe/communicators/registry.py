"""The table of communicator names (import-light: no mpi4py, no CuPy).

The one place a communicator name is stated: the factory resolves
``class_path`` lazily, each class takes its ``reducers`` from its row, the
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


@dataclasses.dataclass(frozen=True)
class CommunicatorInfo:
    """One communicator name: its class and the strategy per gradient array module.

    ``reducers`` maps the array module of the gradients ("numpy", "cupy") to a
    ``"module:attr"`` reducer class or factory; the class registered under the
    name takes it as its own ``reducers`` table (``MpiCommunicator``'s
    ``registry_name``), and ``cpu_ok``/``needs_cuda`` follow from its keys.
    """

    class_path: str  # "module:Class"
    reducers: Mapping[str, str]  # "numpy"/"cupy" -> "module:attr"
    needs_nccl: bool  # needs NCCL (through CuPy)
    description: str

    @property
    def cpu_ok(self) -> bool:
        """Averages NumPy (CPU) gradients."""
        return "numpy" in self.reducers

    @property
    def needs_cuda(self) -> bool:
        """GPU only: needs CuPy and a CUDA device."""
        return not self.cpu_ok


# Rows name classes by "module:attr" strings, not the classes themselves: every communicator and
# reducer module imports mpi4py.MPI (which starts MPI) and the GPU ones need CuPy at first use, while
# composing a config, --help and --check read this table without MPI or CuPy
# (tests/unit/test_comm_signatures.py: test_registry_is_import_light). Every string is resolved and
# checked against its class by tests/unit/test_comm_gpu_tables.py and test_comm_signatures.py.
_P = "mnframe.communicators."


def _info(module, cls, description, *, cupy, numpy=None, needs_nccl=False):
    """One row: ``module:cls`` and each reducer as ``module:attr``, all under ``mnframe.communicators``.

    ``cupy`` (the GPU reducer) is required: every ChainerMN communicator averages
    GPU gradients. ``numpy`` (the CPU reducer) is given when the name also trains
    on the CPU; without it the name is GPU-only (``needs_cuda``)."""
    reducers = {"numpy": _P + numpy} if numpy else {}
    reducers["cupy"] = _P + cupy
    return CommunicatorInfo(f"{_P}{module}:{cls}", types.MappingProxyType(reducers), needs_nccl, description)


COMMUNICATORS = {
    "naive": _info(
        "naive",
        "NaiveCommunicator",
        "one MPI allreduce per parameter (reference, testing)",
        numpy="naive:NaiveReducer",
        cupy="device_reducers:NaiveDeviceReducer",
    ),
    "flat": _info(
        "flat",
        "FlatCommunicator",
        "one persistent flat buffer, one MPI allreduce over all ranks",
        numpy="flat:FlatReducer",
        cupy="device_reducers:flat_reducer",
    ),
    "hierarchical": _info(
        "hierarchical",
        "HierarchicalCommunicator",
        "shared-memory reduce in the node, leaders' allreduce, broadcast in the node",
        numpy="hierarchical:HierarchicalReducer",
        cupy="device_reducers:NcclHierarchicalReducer",
    ),
    "two_dimensional": _info(
        "two_dimensional",
        "TwoDimensionalCommunicator",
        "shared-memory reduce-scatter, per-slice allreduce across nodes, allgather",
        numpy="two_dimensional:TwoDimensionalReducer",
        cupy="device_reducers:NcclTwoDimensionalReducer",
    ),
    # the two_dimensional reducer as is: on one node it is the fused pass (the class refuses several nodes)
    "single_node": _info(
        "single_node",
        "SingleNodeCommunicator",
        "all ranks on one node: one fused shared-memory pass",
        numpy="two_dimensional:TwoDimensionalReducer",
        cupy="device_reducers:NcclSingleNodeReducer",
    ),
    "dummy": _info(
        "dummy",
        "DummyCommunicator",
        "no gradient exchange (benchmarking only)",
        numpy="dummy:DummyReducer",
        cupy="device_reducers:DummyDeviceReducer",
    ),
    "pure_nccl": _info(
        "pure_nccl",
        "PureNcclCommunicator",
        "NCCL allreduce of GPU gradients",
        cupy="device_reducers:NcclAllReducer",
        needs_nccl=True,
    ),
    "non_cuda_aware": _info(
        "non_cuda_aware",
        "NonCudaAwareCommunicator",
        "GPU gradients staged through host memory and averaged over MPI",
        cupy="device_reducers:HostStagedReducer",
    ),
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
