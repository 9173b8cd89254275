"""Iterators that share or synchronise batches across ranks."""

from mnframe._lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "create_multi_node_iterator": "mnframe.iterators.multi_node:create_multi_node_iterator",
        "create_synchronized_iterator": "mnframe.iterators.synchronized:create_synchronized_iterator",
    },
)
