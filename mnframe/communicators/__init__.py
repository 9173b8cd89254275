"""Communicators: create_communicator and the strategies behind it (registry.py holds the name table)."""

from mnframe._internal.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__
)  # the names: mnframe._internal.chainermn_paths, row "communicators"
