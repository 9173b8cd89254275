"""ChainerMN's module path ``chainermn.extensions.checkpoint``: mnframe's multi-node checkpointer.

``_CheckpointStats`` is mnframe's ``CheckpointStats`` with ChainerMN's timing
interface (``start``/``end`` around a save, ``report`` as one line of text),
for code that uses it directly (ChainerMN's tests do).
"""

import time

from mnframe.extensions.checkpointer import CheckpointStats, create_multi_node_checkpointer
from mnframe.extensions.checkpointer import MultiNodeCheckpointer as _MultiNodeCheckpointer  # noqa: F401

__all__ = ["create_multi_node_checkpointer"]


class _CheckpointStats(CheckpointStats):
    """Save durations, timed by ``start()``/``end()``; ``report()`` is a one-line summary."""

    def __init__(self):
        super().__init__()
        self._started = None

    def start(self):
        self._started = time.perf_counter()

    def end(self):
        if self._started is None:
            raise RuntimeError("_CheckpointStats.end() called without start()")
        self.record(time.perf_counter() - self._started)
        self._started = None

    def report(self):
        stats = super().report()
        return ", ".join(f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v}" for k, v in stats.items())
