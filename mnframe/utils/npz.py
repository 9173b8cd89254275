"""NumPy ``.npz`` files: writing Chainer objects without leaking a half-written zip, and reading
data files with an error that says what is wrong.

``numpy.savez`` (and so ``chainer.serializers.save_npz``) leaves its ``ZipFile``
open when a write fails (a full disk): the real error is followed, at garbage
collection, by "Exception ignored in ZipFile.__del__". ``save_npz`` writes the
same archive but closes every handle deterministically and re-raises only the
first error, and it never writes a pickle: Chainer's ``None`` values are stored as
``safe_npz.NONE_DTYPE`` scalars, any other Python object is refused with its key
(``mnframe.utils.safe_npz`` reads such archives back without pickle).
``load_arrays`` opens an ``.npz`` data file and turns NumPy's
misleading "Cannot load file containing pickled data" for a file that is not
an ``.npz`` into a message naming the file and what was expected.
"""

import zipfile

import numpy

from mnframe.runtime.errors import ConfigError
from mnframe.utils.sizes import human_bytes

__all__ = ["save_npz", "serialize", "write_npz", "load_arrays", "NotAnNpzFile"]


def save_npz(file, obj, compression=True):
    """Serialize ``obj`` as ``chainer.serializers.save_npz`` does (a dict is taken as serialized already),
    into a path or binary file object."""
    write_npz(file, obj if isinstance(obj, dict) else serialize(obj), compression)


def serialize(obj):
    """{key: array} of ``obj`` as ``chainer.serializers.save_npz`` would write them."""
    from chainer.serializers.npz import DictionarySerializer

    serializer = DictionarySerializer()
    serializer.save(obj)
    return serializer.target


def payload_bytes(arrays):
    """The bytes of the arrays an npz of ``arrays`` holds (the file is a little larger)."""
    return sum(numpy.asanyarray(v).nbytes for v in arrays.values())


class WriteFailed(OSError):
    """Writing ``path`` failed: ``str()`` is 'could not write PATH (N needed): ERROR', the line a
    failed save reports (errno kept from the original error)."""

    def __init__(self, path, nbytes, exc):
        super().__init__(getattr(exc, "errno", None), str(exc))
        self.path, self.nbytes, self.cause = path, nbytes, exc

    def __str__(self):
        return f"could not write {self.path} ({human_bytes(self.nbytes)} needed): {self.cause}"


def write_npz(file, arrays, compression=True):
    """``numpy.savez[_compressed](file, **arrays)`` that closes every handle even when a write fails
    and stores no pickle (None as a ``NONE_DTYPE`` scalar; other objects: ValueError naming the key)."""
    from mnframe.utils.safe_npz import encode

    arrays = {key: encode(key, value) for key, value in arrays.items()}
    mode = zipfile.ZIP_DEFLATED if compression else zipfile.ZIP_STORED
    archive = zipfile.ZipFile(file, mode="w", compression=mode, allowZip64=True)
    try:
        for key, value in arrays.items():
            member = archive.open(key + ".npy", mode="w", force_zip64=True)
            try:
                numpy.lib.format.write_array(member, value, allow_pickle=False)
            except BaseException:
                _close_quietly(member)
                raise
            member.close()
    except BaseException:
        _close_quietly(archive)  # the first error is the one to report
        raise
    archive.close()


def _close_quietly(handle):
    try:
        handle.close()
    except Exception:
        pass


class NotAnNpzFile(ConfigError):
    """A data file is not the NumPy ``.npz`` archive it should be (the dataset path is wrong: status 2)."""


def load_arrays(path, keys, what="data file"):
    """{key: array} for ``keys`` from the ``.npz`` at ``path``; NotAnNpzFile naming the file otherwise."""
    if not zipfile.is_zipfile(path):
        raise NotAnNpzFile(
            f"{path} is not a NumPy .npz archive (a zip file written by numpy.savez); "
            f"expected a {what} holding the arrays {', '.join(map(repr, keys))}"
        )
    try:
        with numpy.load(path, allow_pickle=False) as archive:
            missing = [k for k in keys if k not in archive.files]
            if missing:
                raise NotAnNpzFile(
                    f"{path} has no array {', '.join(map(repr, missing))} (it holds "
                    f"{', '.join(map(repr, archive.files)) or 'nothing'}); expected a {what} "
                    f"holding {', '.join(map(repr, keys))}"
                )
            return {k: archive[k] for k in keys}
    except NotAnNpzFile:
        raise
    except (ValueError, OSError, zipfile.BadZipFile, EOFError) as exc:
        raise NotAnNpzFile(
            f"{path} cannot be read as a NumPy .npz archive ({type(exc).__name__}: {exc}); "
            f"expected a {what} holding {', '.join(map(repr, keys))}"
        ) from None
