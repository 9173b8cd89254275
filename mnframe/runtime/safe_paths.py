"""Reading and writing inside a run directory someone else may have written: never through a link.

A run directory can be handed over, or shared on a cluster file system, and someone who
can write it can plant a symbolic link where mnframe writes (``eval/``, ``predict/``,
``checkpoints/``, an output file) to make it overwrite a file elsewhere (issue 38).
``open_dir`` opens a directory component by component from the run directory with
``O_DIRECTORY|O_NOFOLLOW`` (creating what is missing), ``write_inside`` publishes a file
there atomically relative to that descriptor (``O_EXCL|O_NOFOLLOW`` temporary file, then
a rename, as ``mnframe.runtime.fs`` does for crash safety), and ``refuse_links`` is the
``lstat`` check of every component for readers and writers that need a path (the
checkpoint directory, TensorBoard's). A link is ``LinkRefused``: one line naming it and
how to fix it, status 2. The run directory itself, and a path outside it that the user
named (``--out``), are the user's choice and may be links.
"""

import contextlib
import errno
import os
import stat

from mnframe.runtime.errors import ConfigError
from mnframe.runtime.fs import default_mode

__all__ = ["LinkRefused", "open_dir", "refuse_links", "write_inside"]

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _NOFOLLOW | _CLOEXEC


class LinkRefused(ConfigError):
    """A path mnframe would read or write inside a run directory is, or goes through, a
    symbolic link (or is not what it should be): refused, nothing read or written (status 2)."""


def _refuse(path, what="directory"):
    try:
        target = os.readlink(path)
    except OSError:
        target = None
    if target is None:
        raise LinkRefused(f"{path} is not a {what} (refused, nothing read or written through it)")
    raise LinkRefused(
        f"{path} is a symbolic link to {target}: mnframe does not read or write through links in a run "
        f"directory (refused, nothing read or written through it); remove it (rm {path}) and run again"
    )


def _inside(base, path):
    """The components of ``path`` below ``base`` (both absolute), or None when it is not below it."""
    rel = os.path.relpath(path, base)
    if rel == os.curdir:
        return []
    parts = rel.split(os.sep)
    return None if parts[0] == os.pardir else parts


def refuse_links(base, path):
    """Raise ``LinkRefused`` if ``path`` or any existing directory between ``base`` and it is a
    symbolic link (``lstat``; ``base`` itself, named by the user, may be one). A ``path``
    outside ``base`` (chosen by the user) is checked itself only."""
    base, path = os.path.abspath(os.fspath(base)), os.path.abspath(os.fspath(path))
    parts = _inside(base, path)
    chain = [path] if parts is None else [os.path.join(base, *parts[: i + 1]) for i in range(len(parts))]
    for i, current in enumerate(chain):
        try:
            mode = os.lstat(current).st_mode
        except FileNotFoundError:
            return
        if stat.S_ISLNK(mode) or (i < len(chain) - 1 and not stat.S_ISDIR(mode)):
            _refuse(current)


def open_dir(base, path, create=False):
    """A descriptor of directory ``path``, opened from ``base`` one component at a time without
    following a link (``O_DIRECTORY|O_NOFOLLOW``; missing components are created with
    ``create``). ``LinkRefused`` names the first link. A ``path`` outside ``base`` is opened
    as given (the user chose it)."""
    base, path = os.path.abspath(os.fspath(base)), os.path.abspath(os.fspath(path))
    parts = _inside(base, path)
    if parts is None:
        if create:
            os.makedirs(path, exist_ok=True)
        base, parts = path, []
    fd = os.open(base, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _CLOEXEC)
    current = base
    try:
        for part in parts:
            current = os.path.join(current, part)
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, dir_fd=fd)
            try:
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                    _refuse(current)
                raise
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def write_inside(base, path, data, fsync=True):
    """Publish ``data`` (bytes) as ``path`` atomically, never through a link: its directory is
    opened with ``open_dir`` (created if missing), the temporary file with ``O_EXCL|O_NOFOLLOW``
    relative to it, and ``path`` itself must not be a link (``LinkRefused``)."""
    path = os.path.abspath(os.fspath(path))
    name = os.path.basename(path)
    dir_fd = open_dir(base, os.path.dirname(path), create=True)
    try:
        try:
            if stat.S_ISLNK(os.lstat(name, dir_fd=dir_fd).st_mode):
                _refuse(path, "file")
        except FileNotFoundError:
            pass
        tmp = f".{name}.{os.urandom(6).hex()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, default_mode(), dir_fd=dir_fd)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                if fsync:
                    os.fsync(f.fileno())
            os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp, dir_fd=dir_fd)
            raise
        if fsync:
            with contextlib.suppress(OSError):
                os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
