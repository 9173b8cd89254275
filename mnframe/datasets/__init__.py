"""Datasets: scatter_dataset/scatter_index (each rank receives only its shard) and create_empty_dataset."""

from mnframe._internal.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__)  # the names: mnframe._internal.chainermn_paths, row "datasets"
