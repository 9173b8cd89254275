"""A CSV table of what the LogReport logs (``logger=csv``).

``CSVReport`` rewrites ``<trainer.out>/<file_name>`` (atomically) whenever the
LogReport named ``log_report`` has a new entry: one row per entry, ``epoch`` and
``iteration`` first, then every key in the order it first appeared (a key an
entry lacks, such as ``validation/*`` between evaluations, is left empty). The
table is the log itself, which a resume restores, so rows are never doubled.
The runner adds it on rank 0 only.
"""

from __future__ import annotations

import csv
import io
import os

from chainer.training import extension

from mnframe.runtime.fs import atomic_write_text

FIRST = ("epoch", "iteration")


def log_columns(log):
    """``epoch``, ``iteration``, then every other key in first-seen order."""
    keys = [k for k in FIRST if any(k in e for e in log)]
    for entry in log:
        keys += [k for k in entry if k not in keys]
    return keys


def log_to_csv(log) -> str:
    columns = log_columns(log)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for entry in log:
        writer.writerow(["" if entry.get(c) is None else entry[c] for c in columns])
    return out.getvalue()


class CSVReport(extension.Extension):
    """Write the LogReport ``log_report``'s entries to ``file_name`` in ``trainer.out``."""

    trigger = (1, "iteration")
    priority = extension.PRIORITY_READER

    def __init__(self, log_report: str = "log_report", file_name: str = "metrics.csv"):
        self._log_report = log_report
        self._file_name = file_name
        self._rows = None

    def __call__(self, trainer):
        log = trainer.get_extension(self._log_report).log
        if len(log) != self._rows:
            atomic_write_text(os.path.join(trainer.out, self._file_name), log_to_csv(log))
            self._rows = len(log)
