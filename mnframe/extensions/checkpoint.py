"""ChainerMN's module path ``chainermn.extensions.checkpoint``: mnframe's multi-node checkpointer."""
from mnframe.extensions.checkpointer import CheckpointStats as _CheckpointStats
from mnframe.extensions.checkpointer import MultiNodeCheckpointer as _MultiNodeCheckpointer
from mnframe.extensions.checkpointer import create_multi_node_checkpointer

__all__ = ["create_multi_node_checkpointer"]
