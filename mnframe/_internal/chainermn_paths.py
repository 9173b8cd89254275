"""ChainerMN's module paths and the names mnframe serves at each: the one table (import-light).

A key is a module path below the package (``""`` is the package itself,
``"communicators.flat_communicator"`` is ``chainermn.communicators.flat_communicator``);
the same path exists as ``mnframe.<path>`` and, under ``python -m mnframe.compat``,
as ``chainermn.<path>``. A value is:

- ``OWN``: mnframe's own module of that path (a file that implements it);
- ``{name: "module:attr"}``: the names served there. For a package (``PACKAGES``)
  its ``__init__`` exports them lazily (``mnframe._internal.lazy``); any other path has no
  file: ``mnframe._internal.path_finder`` makes the module from its row when it is first
  imported, so the objects keep their home module (``__module__``, pickles).

Read by ``mnframe._internal.lazy`` (packages), ``mnframe._internal.path_finder`` (modules made from
rows) and ``mnframe.compat.alias`` (which ``chainermn.*`` names exist). The list
is ChainerMN 7.8.1's modules, ChainerMN 6's ``hierarchical_``, ``two_dimensional_``
and ``single_node_communicator``, and ``communicators._base`` (the API reference's
home of ``CommunicatorBase``).
"""

OWN = None

_C = "mnframe.communicators."
_E = "mnframe.extensions."
_F = "mnframe.functions."

PATHS = {
    "": {
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
        "CommunicatorBase": _C + "base:CommunicatorBase",
        "create_communicator": _C + "factory:create_communicator",
        "DataSizeError": "mnframe.datasets.scatter:DataSizeError",
        "scatter_dataset": "mnframe.datasets.scatter:scatter_dataset",
        "scatter_index": "mnframe.datasets.scatter:scatter_index",
        "create_empty_dataset": "mnframe.datasets.empty:create_empty_dataset",
        "create_multi_node_checkpointer": _E + "checkpointer:create_multi_node_checkpointer",
        "create_multi_node_evaluator": _E + "evaluator:create_multi_node_evaluator",
        "GenericMultiNodeEvaluator": _E + "evaluator:GenericMultiNodeEvaluator",
        "MultiNodeChainList": "mnframe.links.chain_list:MultiNodeChainList",
        "create_multi_node_optimizer": "mnframe.optimizers.multi_node:create_multi_node_optimizer",
    },
    "global_except_hook": OWN,
    "nccl": OWN,
    "communicators": {
        "CommunicatorBase": _C + "base:CommunicatorBase",
        "create_communicator": _C + "factory:create_communicator",
    },
    "communicators._base": {"CommunicatorBase": _C + "base:CommunicatorBase"},
    "communicators._communication_utility": OWN,
    "communicators._memory_utility": OWN,
    "communicators.communicator_base": {"CommunicatorBase": _C + "base:CommunicatorBase"},
    "communicators.mpi_communicator_base": {
        # every communicator name derives from mnframe's MpiCommunicator (its subclass fills ``reducers``)
        "MpiCommunicatorBase": _C + "mpi_communicator:MpiCommunicator",
        "chunked_bcast_obj": _C + "_communication_utility:chunked_bcast_obj",
    },
    "communicators.dummy_communicator": {"DummyCommunicator": _C + "dummy:DummyCommunicator"},
    "communicators.flat_communicator": {"FlatCommunicator": _C + "flat:FlatCommunicator"},
    "communicators.hierarchical_communicator": {
        "HierarchicalCommunicator": _C + "hierarchical:HierarchicalCommunicator"
    },
    "communicators.naive_communicator": {"NaiveCommunicator": _C + "naive:NaiveCommunicator"},
    "communicators.non_cuda_aware_communicator": {
        "NonCudaAwareCommunicator": _C + "non_cuda_aware:NonCudaAwareCommunicator"
    },
    # the GPU classes import without CuPy; creating one needs CUDA (and NCCL)
    "communicators.pure_nccl_communicator": {"PureNcclCommunicator": _C + "pure_nccl:PureNcclCommunicator"},
    "communicators.single_node_communicator": {"SingleNodeCommunicator": _C + "single_node:SingleNodeCommunicator"},
    "communicators.two_dimensional_communicator": {
        "TwoDimensionalCommunicator": _C + "two_dimensional:TwoDimensionalCommunicator"
    },
    "datasets": {
        "create_empty_dataset": "mnframe.datasets.empty:create_empty_dataset",
        "DataSizeError": "mnframe.datasets.scatter:DataSizeError",
        "scatter_index": "mnframe.datasets.scatter:scatter_index",
        "scatter_dataset": "mnframe.datasets.scatter:scatter_dataset",
    },
    "datasets.empty_dataset": {"create_empty_dataset": "mnframe.datasets.empty:create_empty_dataset"},
    "datasets.scatter": OWN,
    "extensions": {
        "AllreducePersistent": _E + "allreduce_persistent:AllreducePersistent",
        "create_multi_node_checkpointer": _E + "checkpointer:create_multi_node_checkpointer",
        "create_multi_node_evaluator": _E + "evaluator:create_multi_node_evaluator",
        "GenericMultiNodeEvaluator": _E + "evaluator:GenericMultiNodeEvaluator",
        "multi_node_snapshot": _E + "snapshot:multi_node_snapshot",
        "ObservationAggregator": _E + "observation_aggregator:ObservationAggregator",
        "MultiNodeEarlyStoppingTrigger": _E + "early_stopping:MultiNodeEarlyStoppingTrigger",
    },
    "extensions._multi_node_snapshot": {
        "multi_node_snapshot": _E + "snapshot:multi_node_snapshot",
        "_MultiNodeSnapshot": _E + "snapshot:MultiNodeSnapshot",
        "_parse_replica_sets": _E + "snapshot:parse_replica_sets",  # ChainerMN's tests call it
    },
    "extensions.allreduce_persistent": OWN,
    "extensions.checkpoint": {
        "create_multi_node_checkpointer": _E + "checkpointer:create_multi_node_checkpointer",
        "_MultiNodeCheckpointer": _E + "checkpointer:MultiNodeCheckpointer",
        "_CheckpointStats": _E + "checkpointer:TimedCheckpointStats",  # ChainerMN's tests time saves with it
    },
    "extensions.multi_node_early_stopping_trigger": {
        "MultiNodeEarlyStoppingTrigger": _E + "early_stopping:MultiNodeEarlyStoppingTrigger",
        "ObservationAggregator": _E + "observation_aggregator:ObservationAggregator",
    },
    "extensions.multi_node_evaluator": {
        "GenericMultiNodeEvaluator": _E + "evaluator:GenericMultiNodeEvaluator",
        "create_multi_node_evaluator": _E + "evaluator:create_multi_node_evaluator",
    },
    "extensions.observation_aggregator": OWN,
    "functions": {
        "allgather": _F + "collective:allgather",
        "alltoall": _F + "collective:alltoall",
        "bcast": _F + "collective:bcast",
        "gather": _F + "collective:gather",
        "scatter": _F + "collective:scatter",
        "send": _F + "point_to_point:send",
        "recv": _F + "point_to_point:recv",
        # also a module path: the package binds the function over the module (as ChainerMN's __init__ does)
        "pseudo_connect": _F + "connect:pseudo_connect",
    },
    "functions.batch_normalization": OWN,
    "functions.collective_communication": {
        name: _F + "collective:" + name
        for name in ("AllGather", "AllToAll", "Bcast", "Gather", "Scatter")
        + ("allgather", "alltoall", "bcast", "gather", "scatter")
    },
    "functions.point_to_point_communication": {
        name: _F + "point_to_point:" + name for name in ("Recv", "Send", "recv", "send")
    },
    "functions.pseudo_connect": {
        "PseudoConnect": _F + "connect:PseudoConnect",
        "pseudo_connect": _F + "connect:pseudo_connect",
    },
    "iterators": {
        "create_multi_node_iterator": "mnframe.iterators.multi_node:create_multi_node_iterator",
        "create_synchronized_iterator": "mnframe.iterators.synchronized:create_synchronized_iterator",
    },
    "iterators.multi_node_iterator": {
        "create_multi_node_iterator": "mnframe.iterators.multi_node:create_multi_node_iterator",
        # ChainerMN's control-message codec (its tests call it; mnframe's iterator does not use it)
        "_build_ctrl_msg": "mnframe.iterators.control_message:build_ctrl_msg",
        "_parse_ctrl_msg": "mnframe.iterators.control_message:parse_ctrl_msg",
    },
    "iterators.synchronized_iterator": {
        "create_synchronized_iterator": "mnframe.iterators.synchronized:create_synchronized_iterator"
    },
    "links": {
        "MultiNodeBatchNormalization": "mnframe.links.batch_normalization:MultiNodeBatchNormalization",
        # also a module path: the package binds the function over the module (as ChainerMN's __init__ does)
        "create_mnbn_model": "mnframe.links.mnbn_model:create_mnbn_model",
        "MultiNodeChainList": "mnframe.links.chain_list:MultiNodeChainList",
        "create_multi_node_n_step_rnn": "mnframe.links.n_step_rnn:create_multi_node_n_step_rnn",
    },
    "links.batch_normalization": OWN,
    "links.create_mnbn_model": {"create_mnbn_model": "mnframe.links.mnbn_model:create_mnbn_model"},
    "links.multi_node_chain_list": {"MultiNodeChainList": "mnframe.links.chain_list:MultiNodeChainList"},
    "links.n_step_rnn": OWN,
    "optimizers": {
        "create_multi_node_optimizer": "mnframe.optimizers.multi_node:create_multi_node_optimizer",
    },
    "testing": OWN,
    "testing.device": OWN,
}

# the paths that are packages in mnframe (a file ``__init__.py``; a row of names is exported lazily)
PACKAGES = frozenset(("", "communicators", "datasets", "extensions", "functions", "iterators", "links", "optimizers"))


def row(module_name):
    """The row of ``mnframe.<path>`` (a dict of names, or OWN); KeyError for a path not in the table."""
    return PATHS[relative(module_name)]


def relative(module_name, package="mnframe"):
    """``mnframe.x.y`` -> ``"x.y"`` (``package`` itself -> ``""``); None outside ``package``."""
    if module_name == package:
        return ""
    if module_name.startswith(package + "."):
        return module_name[len(package) + 1 :]
    return None


def made_from_row(path):
    """True for a path that has no file: its module is made from its row of names."""
    return PATHS.get(path, OWN) is not OWN and path not in PACKAGES
