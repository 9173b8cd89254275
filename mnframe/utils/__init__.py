"""Small helpers shared by mnframe's modules.

``fs``: crash-safe (atomic, fsynced) file writes. ``collectives``: host-side
collectives on a communicator's ``mpi_comm``, recorded in the op log, and
helpers to share a verdict so every rank raises the same error. ``sizes``: byte
counts as people read them. ``fs`` and ``sizes`` import nothing of mnframe (the
runtime uses them); ``collectives`` sits on ``communicators``.
"""

from mnframe.utils.fs import atomic_path, atomic_write_bytes, atomic_write_text, fsync_dir

__all__ = ["atomic_path", "atomic_write_bytes", "atomic_write_text", "fsync_dir"]
