"""mnframe: a ChainerMN implementation with a declarative runner.

``import mnframe as chainermn`` gives every public name of ChainerMN. Names are
resolved lazily from the table below, so importing mnframe costs almost nothing
and CUDA/NCCL code is only imported when a GPU path is actually used.
"""

from mnframe import _numpy_compat
from mnframe.runtime import early_hook

_numpy_compat.apply()
early_hook.install()  # an exception once MPI runs aborts the job, even before create_communicator

__version__ = "0.1.0"

# public name -> "module:attribute" (or "module" for a subpackage)
_EXPORTS = {
    # subpackages, as in chainermn
    "communicators": "mnframe.communicators",
    "datasets": "mnframe.datasets",
    "extensions": "mnframe.extensions",
    "functions": "mnframe.functions",
    "global_except_hook": "mnframe.global_except_hook",
    "iterators": "mnframe.iterators",
    "links": "mnframe.links",
    "optimizers": "mnframe.optimizers",
    # top-level names
    "CommunicatorBase": "mnframe.communicators:CommunicatorBase",
    "create_communicator": "mnframe.communicators:create_communicator",
    "DataSizeError": "mnframe.datasets:DataSizeError",
    "scatter_dataset": "mnframe.datasets:scatter_dataset",
    "scatter_index": "mnframe.datasets:scatter_index",
    "create_empty_dataset": "mnframe.datasets:create_empty_dataset",
    "create_multi_node_checkpointer": "mnframe.extensions:create_multi_node_checkpointer",
    "create_multi_node_evaluator": "mnframe.extensions:create_multi_node_evaluator",
    "GenericMultiNodeEvaluator": "mnframe.extensions:GenericMultiNodeEvaluator",
    "MultiNodeChainList": "mnframe.links:MultiNodeChainList",
    "create_multi_node_optimizer": "mnframe.optimizers:create_multi_node_optimizer",
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name):
    target = _EXPORTS.get(name)
    if target is None:
        raise AttributeError(f"module 'mnframe' has no attribute {name!r}")
    from mnframe._import_path import resolve  # import-light

    value = globals()[name] = resolve(target)  # cache: the next lookup is a plain dict hit
    return value


def __dir__():
    return __all__
