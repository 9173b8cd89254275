"""Links: MultiNodeChainList, multi-node batch normalization, multi-node n-step RNN."""

from mnframe._internal.lazy import lazy_exports

# the names: mnframe._internal.chainermn_paths, row "links"; the function that is also a module path is bound now
__getattr__, __dir__, __all__ = lazy_exports(__name__)
