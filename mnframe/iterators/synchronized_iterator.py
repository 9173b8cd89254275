"""ChainerMN's module path ``chainermn.iterators.synchronized_iterator``."""

from mnframe.iterators.synchronized import create_synchronized_iterator

__all__ = ["create_synchronized_iterator"]
