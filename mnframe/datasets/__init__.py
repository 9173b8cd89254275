"""Datasets: scatter_dataset/scatter_index (each rank receives only its shard) and create_empty_dataset."""

from mnframe._lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "create_empty_dataset": "mnframe.datasets.empty:create_empty_dataset",
        "DataSizeError": "mnframe.datasets.scatter:DataSizeError",
        "scatter_index": "mnframe.datasets.scatter:scatter_index",
        "scatter_dataset": "mnframe.datasets.scatter:scatter_dataset",
    },
)
