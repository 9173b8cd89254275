"""Trainer extensions: multi-node evaluators, checkpointer, snapshots, persistent averaging, early stopping."""

from mnframe._lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "AllreducePersistent": "mnframe.extensions.allreduce_persistent:AllreducePersistent",
        "create_multi_node_checkpointer": "mnframe.extensions.checkpointer:create_multi_node_checkpointer",
        "create_multi_node_evaluator": "mnframe.extensions.evaluator:create_multi_node_evaluator",
        "GenericMultiNodeEvaluator": "mnframe.extensions.evaluator:GenericMultiNodeEvaluator",
        "multi_node_snapshot": "mnframe.extensions.snapshot:multi_node_snapshot",
        "ObservationAggregator": "mnframe.extensions.observation_aggregator:ObservationAggregator",
        "MultiNodeEarlyStoppingTrigger": "mnframe.extensions.early_stopping:MultiNodeEarlyStoppingTrigger",
    },
)
