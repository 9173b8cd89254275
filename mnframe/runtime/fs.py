"""Crash-safe file writes.

A checkpoint that is half written when a job is killed must never be mistaken
for a good one. Every writer here goes through a temporary file in the *same
directory* (so the final ``os.replace`` is an atomic rename on one filesystem),
fsyncs the data, renames it onto the target and fsyncs the directory so the
rename itself survives a power loss. Readers therefore see either the old file
or the complete new one, never a prefix.
"""

import contextlib
import os
import tempfile

__all__ = ["atomic_path", "atomic_write_bytes", "atomic_write_text", "fsync_dir"]


def fsync_dir(path):
    """Flush a directory's entries (new names, renames) to disk.

    ``path`` may be a directory or a file inside it. Filesystems or platforms
    that cannot open a directory (Windows) are tolerated silently: the data
    itself was already fsynced.
    """
    path = os.fspath(path)
    directory = path if os.path.isdir(path) else (os.path.dirname(path) or ".")
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _default_mode():
    # mkstemp creates 0600 files; give published files the usual 0666 & ~umask.
    # Reading the umask means setting it, so do it once at import time.
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


_DEFAULT_MODE = _default_mode()


def default_mode():
    """The mode of a published file: 0666 & ~umask (read at import time)."""
    return _DEFAULT_MODE


def _fsync_file(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_path(path, fsync=True):
    """Yield a temporary path next to ``path``; publish it there on success.

    Write whatever you like to the yielded path (e.g. ``numpy.savez`` or
    ``chainer.serializers.save_npz``). When the ``with`` block ends normally the
    file is fsynced and atomically renamed onto ``path``; if the block raises,
    the temporary file is removed and ``path`` is left untouched.
    The temporary name starts with ``.`` and ends with ``.tmp`` so directory
    scans that look for finished files can skip it. (Into a run directory someone else
    may have written: ``mnframe.runtime.safe_paths``.)
    """
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    base = os.path.basename(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{base}.", suffix=".tmp", dir=directory)
    os.close(fd)
    try:
        os.chmod(tmp, _DEFAULT_MODE)
        yield tmp
        if not os.path.exists(tmp):
            raise FileNotFoundError(
                f"atomic_path: the temporary file {tmp!r} vanished before it could be published "
                f"as {path!r}; write to the yielded path, do not move it"
            )
        if fsync:
            _fsync_file(tmp)
        os.replace(tmp, path)
        if fsync:
            fsync_dir(directory)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)
        raise


def atomic_write_bytes(path, data, fsync=True):
    """Write ``data`` (bytes-like) to ``path`` atomically (all or nothing)."""
    with atomic_path(path, fsync=fsync) as tmp:
        with open(tmp, "wb") as f:
            f.write(data)


def atomic_write_text(path, text, encoding="utf-8", fsync=True):
    """Write ``text`` to ``path`` atomically (all or nothing)."""
    atomic_write_bytes(path, text.encode(encoding), fsync=fsync)
