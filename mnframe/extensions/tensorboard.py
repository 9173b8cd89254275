"""TensorBoard event files of what the LogReport logs (``logger=tensorboard``).

``TensorBoardReport`` reads the entries of a ``LogReport`` (by its extension
name) as they appear and writes every number in them as a scalar at the
entry's iteration, so TensorBoard shows exactly the values of the JSON log.
The runner adds it on rank 0 only. It needs tensorboardX
(``pip install 'mnframe[tensorboard]'``), imported when training starts.
"""

from __future__ import annotations

import numbers
import os

from chainer.training import extension

NOT_SCALARS = ("epoch", "iteration")  # the axes, not observations


class TensorBoardReport(extension.Extension):
    """Write each new entry of the LogReport ``log_report`` to ``log_dir``
    (default ``<trainer.out>/tensorboard``); called every iteration, after the
    LogReport (a reader). Entries restored by a resume are not written again."""

    trigger = (1, "iteration")
    priority = extension.PRIORITY_READER

    def __init__(self, log_report: str = "log_report", log_dir=None):
        self._log_report = log_report
        self._log_dir = log_dir
        self._writer = None
        self._written = None  # how many LogReport entries are in the event file

    @property
    def log_dir(self):
        return self._log_dir

    def initialize(self, trainer):
        from tensorboardX import SummaryWriter

        if self._log_dir is None:
            self._log_dir = os.path.join(trainer.out, "tensorboard")
        from mnframe.runtime.safe_paths import refuse_links

        refuse_links(trainer.out, self._log_dir)  # a planted link: never write through it (status 2)
        self._written = len(trainer.get_extension(self._log_report).log)  # resumed entries
        # tensorboardX names files by the second they were opened: a resume within the same
        # second would overwrite the first run's file, so the suffix says where this one starts
        self._writer = SummaryWriter(logdir=self._log_dir, filename_suffix=f".from{self._written}")

    def __call__(self, trainer):
        log = trainer.get_extension(self._log_report).log
        if self._writer is None:
            self.initialize(trainer)
        new = log[self._written :]
        for entry in new:
            step = entry.get("iteration", trainer.updater.iteration)
            for key, value in entry.items():
                if key not in NOT_SCALARS and isinstance(value, numbers.Real):
                    self._writer.add_scalar(key, float(value), step)
        if new:
            self._written = len(log)
            self._writer.flush()

    def finalize(self):
        if self._writer is not None:
            self._writer.close()
            self._writer = None
