"""The multi-node optimizer wrapper."""

from mnframe._lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "create_multi_node_optimizer": "mnframe.optimizers.multi_node:create_multi_node_optimizer",
    },
)
