"""``create_communicator``: a name from the registry table -> a communicator instance."""
import difflib

from mnframe._import_path import resolve as _resolve  # "module:Class" -> the class
from mnframe.communicators import config, registry


def _check_name(name):
    if name in registry.COMMUNICATORS:
        return
    valid = ", ".join(registry.COMMUNICATORS)
    close = difflib.get_close_matches(str(name), registry.COMMUNICATORS, n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    raise ValueError(f"unknown communicator {name!r}.{hint} Valid names: {valid}")


def _check_device(name):
    info = registry.COMMUNICATORS[name]
    if not info.needs_cuda:
        return
    problem = registry.cuda_problem(needs_nccl=info.needs_nccl)
    if problem:
        raise RuntimeError(f"communicator {name!r} runs on GPUs but {problem}. "
                           f"Names that work on CPU: {', '.join(registry.cpu_names())}")


def create_communicator(communicator_name=None, mpi_comm=None, allreduce_grad_dtype=None, batched_copy=False):
    """Create a communicator.

    ``communicator_name``: a key of ``registry.COMMUNICATORS``; None picks
    ``registry.default_name()`` (pure_nccl on GPUs with NCCL, else
    two_dimensional). ``mpi_comm``: an mpi4py communicator (COMM_WORLD by
    default). ``allreduce_grad_dtype``: dtype of gradients on the wire (None:
    each parameter's own), honoured by every communicator. ``batched_copy``:
    accepted for compatibility (packing is always batched).
    """
    name = registry.default_name() if communicator_name is None else communicator_name
    _check_name(name)
    config.check("allreduce_grad_dtype", allreduce_grad_dtype)
    _check_device(name)
    if mpi_comm is None:
        from mpi4py import MPI
        mpi_comm = MPI.COMM_WORLD
    cls = _resolve(registry.COMMUNICATORS[name].class_path)
    comm = cls(mpi_comm=mpi_comm, allreduce_grad_dtype=allreduce_grad_dtype, batched_copy=batched_copy)
    _notify_activation(comm)
    return comm


def _notify_activation(comm):
    from mnframe.runtime import activation

    activation.on_communicator_created(comm)
