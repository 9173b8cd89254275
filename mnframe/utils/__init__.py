"""Small helpers shared by mnframe's modules (filesystem safety, ...)."""
from mnframe.utils.fs import atomic_path, atomic_write_bytes, atomic_write_text, fsync_dir

__all__ = ["atomic_path", "atomic_write_bytes", "atomic_write_text", "fsync_dir"]
