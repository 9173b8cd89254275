"""The multi-node optimizer wrapper."""

from mnframe._lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__)  # the names: mnframe._chainermn_paths, row "optimizers"
