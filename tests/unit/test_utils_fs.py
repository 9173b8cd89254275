"""mnframe.runtime.fs: atomic writes publish all or nothing."""

import os

import numpy as np
import pytest

from mnframe.runtime import fs


def _leftovers(directory):
    return [n for n in os.listdir(directory) if n.endswith(".tmp")]


def test_atomic_write_bytes_and_text(tmp_path):
    p = tmp_path / "a.bin"
    fs.atomic_write_bytes(p, b"hello")
    assert p.read_bytes() == b"hello"
    fs.atomic_write_bytes(p, b"replaced")
    assert p.read_bytes() == b"replaced"
    t = tmp_path / "a.txt"
    fs.atomic_write_text(str(t), "héllo")
    assert t.read_text(encoding="utf-8") == "héllo"
    assert _leftovers(tmp_path) == []


def test_atomic_path_publishes_on_success(tmp_path):
    target = tmp_path / "arr.npz"
    with fs.atomic_path(target) as tmp:
        assert os.path.dirname(tmp) == str(tmp_path)
        assert not target.exists()
        with open(tmp, "wb") as f:
            np.savez(f, x=np.arange(3))
    with np.load(target) as z:
        np.testing.assert_array_equal(z["x"], np.arange(3))
    assert _leftovers(tmp_path) == []
    assert os.stat(target).st_mode & 0o777 == fs._DEFAULT_MODE  # not mkstemp's 0600


def test_atomic_path_failure_keeps_old_file(tmp_path):
    target = tmp_path / "keep.txt"
    target.write_text("old")
    with pytest.raises(RuntimeError):
        with fs.atomic_path(target) as tmp:
            with open(tmp, "w") as f:
                f.write("partial")
            raise RuntimeError("killed mid-write")
    assert target.read_text() == "old"
    assert _leftovers(tmp_path) == []


def test_atomic_path_missing_temp_is_an_error(tmp_path):
    target = tmp_path / "x"
    with pytest.raises(FileNotFoundError, match="vanished"):
        with fs.atomic_path(target) as tmp:
            os.remove(tmp)
    assert not target.exists()


def test_fsync_dir_accepts_dir_and_file(tmp_path):
    fs.fsync_dir(tmp_path)
    f = tmp_path / "f"
    f.write_text("x")
    fs.fsync_dir(f)
    fs.fsync_dir(tmp_path / "does-not-exist" / "f")  # tolerated
