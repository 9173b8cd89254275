"""Writing NumPy ``.npz`` files: Chainer objects without leaking a half-written zip, and no pickle.

``numpy.savez`` (and so ``chainer.serializers.save_npz``) leaves its ``ZipFile``
open when a write fails (a full disk): the real error is followed, at garbage
collection, by "Exception ignored in ZipFile.__del__". ``save_npz`` writes the
same archive but closes every handle deterministically and re-raises only the
first error, and it never writes a pickle: Chainer's ``None`` values are stored as
``npz_read.NONE_DTYPE`` scalars, any other Python object is refused with its key
(``mnframe._internal.npz_read``, the one reader, reads such archives back without pickle).
"""

import zipfile

import numpy

from mnframe.runtime.sizes import human_bytes

__all__ = ["save_npz", "serialize", "write_npz", "payload_bytes", "WriteFailed"]


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
    from mnframe._internal.npz_read import encode

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
