"""The one reader of ``.npz`` files: data only, no pickle, bounded sizes, names that stay inside.

``numpy.load(allow_pickle=True)`` (which ``chainer.serializers.load_npz`` passes)
runs whatever a pickled entry's ``__reduce__`` names, so a checkpoint from a
shared file system or a colleague could run code. ``SafeNpz`` opens an archive
and checks every member *before* anything is loaded:

* member names are relative, without ``..`` or empty parts, each once, ending in ``.npy``;
* only stored or deflated members; a member declaring more bytes than deflate can
  produce from its compressed size (1032:1), or than this machine's memory, is a zip bomb;
  with ``stored_only`` (mnframe's checkpoint files, written uncompressed) a deflated member
  is refused, so no entry declares more bytes than the file holds;
* each ``.npy`` header is parsed as a literal (NumPy's parser, header size capped), its
  dtype must not hold Python objects, and ``shape x itemsize`` must equal the member's
  declared size: a header claiming 10^12 elements is refused without allocating them.

A refusal raises ``UnsafeFile`` (a ConfigError: status 2), one line naming the file and
the entry. Entries are then read on demand into freshly allocated arrays; ``load_npz`` first
compares each entry's declared shape with the array it fills and refuses one declaring more
(nothing allocated). ``load_npz``
is ``chainer.serializers.load_npz`` on top of it; ``load_arrays`` reads a data or input
file (datasets, ``predict``'s inputs) with an error that says what the file should be.
Nothing else in mnframe calls ``numpy.load``. ``NONE`` is how mnframe's writer
(``mnframe._internal.npz_write.write_npz``) stores Chainer's ``None`` values without a pickle.
"""

import os
import re
import zipfile
from collections.abc import Mapping

import numpy

from mnframe.runtime.errors import ConfigError

__all__ = ["UnsafeFile", "SafeNpz", "load_npz", "load_arrays", "NotAnNpzFile", "encode", "NONE_DTYPE"]

DEFLATE_MAX_RATIO = 1032  # the most one deflate byte can expand to (zlib's technical notes)
MAX_HEADER = 10000  # NumPy's own default cap on a .npy header
_DRIVE = re.compile(r"^[A-Za-z]:")
# Chainer stores None (an uninitialized parameter, an unset state) as a pickled object
# array; mnframe writes a 0-d array of this dtype instead and reads it back as None.
NONE_DTYPE = numpy.dtype([("mnframe_none", "u1")])


class UnsafeFile(ConfigError):
    """A file mnframe was asked to read could run code or exhaust memory; it was not loaded (status 2)."""


def encode(key, value):
    """``value`` as an array that needs no pickle (None -> a NONE_DTYPE scalar); ValueError otherwise."""
    array = numpy.asanyarray(value)
    if array.dtype.hasobject:
        if array.shape == () and array[()] is None:
            return numpy.zeros((), NONE_DTYPE)
        raise ValueError(
            f"cannot save {key!r}: it holds Python objects ({type(value).__name__}), which would need a "
            f"pickle to store; serialize it as numbers or a string"
        )
    return array


def memory_bytes():
    """Physical memory of this machine (no entry may claim more); a large fallback if unknown."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 1 << 40


def bad_member_name(name):
    """Why a zip member name could write or read outside its archive's place, or None."""
    if not name:
        return "an empty name"
    if name.startswith(("/", "\\")) or _DRIVE.match(name):
        return "an absolute path"
    parts = re.split(r"[/\\]", name)
    if ".." in parts:
        return "a '..' component"
    if "" in parts[:-1] or "\x00" in name:
        return "an empty or NUL path component"
    return None


class SafeNpz(Mapping):
    """A checked ``.npz`` archive: ``npz[key]`` reads one array; ``key in npz``; ``npz.files``.

    ``file`` is a path or a seekable binary file object; ``name`` is how errors call it.
    Use it as a context manager (or call ``close``).
    """

    def __init__(self, file, name=None, stored_only=False):
        self.stored_only = stored_only  # refuse compressed members (mnframe's checkpoints are stored)
        self.name = name or (os.fspath(file) if isinstance(file, (str, os.PathLike)) else "<in-memory archive>")
        self._zip = None
        try:
            if isinstance(file, (str, os.PathLike)):
                size = os.path.getsize(file)
            else:
                size = file.seek(0, os.SEEK_END)
                file.seek(0)
            self._zip = zipfile.ZipFile(file)
            self._entries = self._check(size)
        except UnsafeFile:
            self.close()
            raise
        except (zipfile.BadZipFile, OSError, EOFError, ValueError) as exc:
            self.close()
            raise UnsafeFile(f"{self.name} is not a readable .npz archive ({type(exc).__name__}: {exc})") from None

    def _refuse(self, entry, why):
        raise UnsafeFile(f"refusing to load {self.name}: entry {entry!r} {why}; nothing was loaded from it")

    def _check(self, archive_size):  # noqa: C901 (one check per line of the module docstring)
        entries, budget = {}, memory_bytes()
        total = 0
        for info in self._zip.infolist():
            name = info.filename
            problem = bad_member_name(name)
            if problem:
                self._refuse(name, f"has {problem} (a path outside the archive)")
            if not name.endswith(".npy"):
                self._refuse(name, "is not a .npy array")
            key = name[: -len(".npy")]
            if key in entries:
                self._refuse(name, "appears twice")
            if info.flag_bits & 0x1:
                self._refuse(name, "is encrypted")
            if info.compress_type == zipfile.ZIP_STORED:
                if info.file_size != info.compress_size:
                    self._refuse(name, f"is stored but declares {info.file_size} bytes in {info.compress_size}")
            elif info.compress_type == zipfile.ZIP_DEFLATED and self.stored_only:
                self._refuse(
                    name,
                    f"is compressed and declares {info.file_size} bytes from {info.compress_size}, but mnframe "
                    f"writes checkpoint files uncompressed (a zip bomb, or a file mnframe did not write); "
                    f"nothing was inflated",
                )
            elif info.compress_type == zipfile.ZIP_DEFLATED:
                if info.file_size > DEFLATE_MAX_RATIO * info.compress_size + 1024:
                    self._refuse(
                        name,
                        f"declares {info.file_size} bytes from {info.compress_size} compressed bytes, more than "
                        f"deflate can produce (a zip bomb)",
                    )
            else:
                self._refuse(name, f"uses zip compression method {info.compress_type} (only stored and deflate)")
            if info.header_offset + info.compress_size > archive_size:
                self._refuse(name, f"declares {info.compress_size} bytes past the end of the file")
            total += info.file_size
            if total > budget:
                self._refuse(name, f"brings the declared size to {total} bytes, more than this machine's memory")
            entries[key] = (info,) + self._header(info)
        return entries

    def _header(self, info):
        """(shape, dtype, fortran, data offset) of one member, checked against its declared size."""
        name = info.filename
        with self._zip.open(info) as f:
            try:
                version = numpy.lib.format.read_magic(f)
                if version == (1, 0):
                    shape, fortran, dtype = numpy.lib.format.read_array_header_1_0(f, max_header_size=MAX_HEADER)
                elif version == (2, 0):
                    shape, fortran, dtype = numpy.lib.format.read_array_header_2_0(f, max_header_size=MAX_HEADER)
                else:
                    raise ValueError(f".npy format version {version} is not supported")
            except (ValueError, SyntaxError, TypeError, EOFError) as exc:
                self._refuse(name, f"has no valid .npy header ({' '.join(str(exc).split())})")
            offset = f.tell()
        if dtype.hasobject:
            self._refuse(
                name,
                f"holds an object array (dtype {dtype}: pickled Python objects, which could run code; "
                f"files written before mnframe stopped pickling None hold such entries: start afresh, resume=never)",
            )
        count = 1
        for n in shape:
            count *= n
        if count * dtype.itemsize != info.file_size - offset:
            self._refuse(
                name,
                f"claims shape {shape} of {dtype} ({count * dtype.itemsize} bytes) but holds "
                f"{info.file_size - offset} bytes",
            )
        return shape, dtype, fortran, offset

    def declared(self, key):
        """(shape, dtype) entry ``key`` declares in its header (checked; nothing is read or allocated)."""
        _, shape, dtype, _, _ = self._entries[key]
        return tuple(shape), dtype

    def nbytes(self, key):
        """The bytes entry ``key`` declares (what reading it allocates)."""
        shape, dtype = self.declared(key)
        return int(numpy.prod(shape, dtype=object)) * dtype.itemsize

    # -- Mapping ------------------------------------------------------------------
    @property
    def files(self):
        return list(self._entries)

    def __iter__(self):
        return iter(self._entries)

    def __len__(self):
        return len(self._entries)

    def __contains__(self, key):
        return key in self._entries

    def __getitem__(self, key):
        info, shape, dtype, fortran, offset = self._entries[key]
        if dtype == NONE_DTYPE and shape == ():
            return numpy.asarray(None, dtype=object)  # made here, never unpickled
        flat = numpy.empty(info.file_size - offset, numpy.uint8)
        with self._zip.open(info) as f:
            f.read(offset)
            view, done = memoryview(flat), 0
            while done < len(flat):
                n = f.readinto(view[done:])
                if not n:
                    raise UnsafeFile(f"{self.name}: entry {info.filename!r} is truncated")
                done += n
            f.read(1)  # reach the end: zipfile checks the CRC there
        array = flat.view(dtype) if dtype.itemsize else numpy.empty(0, dtype)
        return array.reshape(shape[::-1]).T if fortran else array.reshape(shape)

    def close(self):
        if self._zip is not None:
            self._zip.close()
            self._zip = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _bounded_deserializer():
    """``NpzDeserializer`` that compares each entry's declared size with the value it fills before
    reading it: an entry declaring more than the model's or optimizer's array (or a scalar) holds is
    refused without allocating it (issue 38). Values not sized yet (None) are bounded by the archive."""
    from chainer.serializers.npz import NpzDeserializer

    class BoundedDeserializer(NpzDeserializer):
        def __getitem__(self, key):
            key = key.strip("/")
            return BoundedDeserializer(
                self.npz, self.path + key + "/", strict=self.strict, ignore_names=self.ignore_names
            )

        def _ignored(self, full):
            names = self.ignore_names if isinstance(self.ignore_names, (tuple, list)) else (self.ignore_names,)
            return any((n == full) if isinstance(n, str) else (callable(n) and n(full)) for n in names)

        def __call__(self, key, value):
            full = self.path + key.lstrip("/")
            if isinstance(self.npz, SafeNpz) and full in self.npz and not self._ignored(full):
                if isinstance(value, (bool, int, float, numpy.generic)):
                    have = 1
                elif hasattr(value, "shape") and hasattr(value, "dtype"):  # NumPy, CuPy: copied into in place
                    have = int(numpy.prod(value.shape, dtype=object))
                else:
                    have = None  # None (not sized yet) or another type: bounded by the archive itself
                shape, dtype = self.npz.declared(full)
                if have is not None and int(numpy.prod(shape, dtype=object)) > have:
                    raise UnsafeFile(
                        f"refusing to load {self.npz.name}: entry {full + '.npy'!r} declares shape {shape} of {dtype} "
                        f"({self.npz.nbytes(full)} bytes) where the model or optimizer holds shape "
                        f"{tuple(numpy.shape(value))}; nothing was allocated for it"
                    )
            return super().__call__(key, value)

    return BoundedDeserializer


def load_npz(file, obj, path="", strict=True, ignore_names=None, name=None, stored_only=False):
    """``chainer.serializers.load_npz`` through ``SafeNpz``: the same keys and options, no pickle, and no
    entry read that declares more than the value it fills (``stored_only``: as ``SafeNpz``)."""
    with SafeNpz(file, name=name, stored_only=stored_only) as npz:
        _bounded_deserializer()(npz, path=path, strict=strict, ignore_names=ignore_names).load(obj)


class NotAnNpzFile(ConfigError):
    """A data file is not the NumPy ``.npz`` archive it should be (the dataset path is wrong: status 2)."""


def load_arrays(path, keys=None, what="data file"):
    """{key: array} for ``keys`` (None: every array) from the ``.npz`` at ``path``, read through
    ``SafeNpz`` (no pickle, bounded sizes); NotAnNpzFile naming the file and what was expected otherwise.
    NumPy's own message for a file that is not an ``.npz`` ("Cannot load file containing pickled
    data") is replaced by one that says what the file should be."""
    holding = f" holding the arrays {', '.join(map(repr, keys))}" if keys else ""
    if not zipfile.is_zipfile(path):
        raise NotAnNpzFile(
            f"{path} is not a NumPy .npz archive (a zip file written by numpy.savez); expected a {what}{holding}"
        )
    try:
        with SafeNpz(path) as archive:
            wanted = archive.files if keys is None else keys
            missing = [k for k in wanted if k not in archive]
            if missing:
                raise NotAnNpzFile(
                    f"{path} has no array {', '.join(map(repr, missing))} (it holds "
                    f"{', '.join(map(repr, archive.files)) or 'nothing'}); expected a {what}{holding}"
                )
            return {k: archive[k] for k in wanted}
    except UnsafeFile as exc:
        raise NotAnNpzFile(f"{exc}; expected a {what}{holding}") from None
