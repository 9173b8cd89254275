"""ChainerMN's module path ``chainermn.iterators.multi_node_iterator``."""
from mnframe.iterators.multi_node import create_multi_node_iterator

__all__ = ["create_multi_node_iterator"]
