"""Chainer's PlotReport, publishing each image atomically.

``PlotReport`` calls ``savefig`` on the final name, so a run interrupted (or a
disk filling up) while it writes leaves a PNG cut short that no image reader
opens. This subclass lets it draw into a hidden temporary name in the same
directory (same extension, so matplotlib picks the same format) and renames
that onto the real name once it is complete.
"""

import os

from chainer.training.extensions import PlotReport


class AtomicPlotReport(PlotReport):
    def __call__(self, trainer):
        final = self._file_name
        tmp = f".{os.path.basename(final)}.tmp{os.getpid()}{os.path.splitext(final)[1]}"
        tmp = os.path.join(os.path.dirname(final), tmp)
        written = os.path.join(trainer.out, tmp)
        self._file_name = tmp  # PlotReport saves to os.path.join(trainer.out, self._file_name)
        try:
            super().__call__(trainer)
        except BaseException:
            if os.path.exists(written):
                os.remove(written)
            raise
        finally:
            self._file_name = final
        if os.path.exists(written):  # drawn this time (its trigger fired and it had data)
            os.replace(written, os.path.join(trainer.out, final))
