"""A checkpoint handed over by someone else (issue 38, items 3-5): a rank file from another run,
iteration or rank, a zip bomb, and any refused file make the checkpoint unusable like a damaged
one (moved aside, the previous one resumed), and ``checkpoint verify`` says so with the same
checks (``mnframe.checkpoint.admit``). One process; tests/test_rel_foreign_runs.py at 2 ranks."""

import io
import os
import shutil
import struct
import subprocess
import sys
import zipfile
import zlib
from pathlib import Path

import chainer.links as L
import numpy as np
import pytest
from test_rel_safe_load import make_trainer, reseal, run_and_checkpoint, solo  # noqa: E402 (tests/unit is on sys.path)

from mnframe._internal.npz_read import SafeNpz, UnsafeFile, load_npz
from mnframe.checkpoint import admit
from mnframe.checkpoint.attach import attach
from mnframe.checkpoint.manifest import Manifest
from mnframe.commands import checkpoint_inspect as inspect_cli
from mnframe.runtime.errors import CheckpointError

REPO = Path(__file__).resolve().parents[2]
W = "updater/model:main/predictor/W"


def train(run_dir, stop=3):
    run_and_checkpoint(run_dir, stop)


def ckpt(run_dir, iteration=3):
    return Path(run_dir) / "checkpoints" / f"iter_{iteration:08d}"


def resume(run_dir):
    trainer = make_trainer(run_dir, stop=6)
    return attach(trainer, {"interval": 1, "keep": 5}, run_dir, solo())


@pytest.fixture
def run_dir(tmp_path):
    train(tmp_path / "run")
    return tmp_path / "run"


def test_every_rank_file_carries_its_identity_inside_its_hashed_content(run_dir):
    manifest = Manifest.read(str(ckpt(run_dir)))
    assert manifest.run_id and len(manifest.run_id) == 32
    with SafeNpz(ckpt(run_dir) / "rank_00000.npz") as npz:
        assert str(npz[admit.RUN_KEY][()]) == manifest.run_id
        assert npz[admit.NUMBERS_KEY].tolist() == [3, 1, 0]  # iteration, world size, rank
    assert Manifest.read(str(ckpt(run_dir, 1))).run_id == manifest.run_id
    ext = resume(run_dir)
    assert ext.resumed_from == "iter_00000003" and ext.store.run_id == manifest.run_id  # the run goes on


@pytest.mark.parametrize("source", ["another run", "another iteration"])
def test_a_foreign_rank_file_is_refused_moved_aside_and_the_previous_checkpoint_resumed(
    run_dir, tmp_path, source, capsys
):
    if source == "another run":
        train(tmp_path / "other")
        foreign, why = ckpt(tmp_path / "other") / "rank_00000.npz", "run "
    else:
        foreign, why = ckpt(run_dir, 2) / "rank_00000.npz", "iteration 2 (expected 3)"
    shutil.copy(foreign, ckpt(run_dir) / "rank_00000.npz")
    reseal(ckpt(run_dir))
    # checkpoint verify (no MPI) and resume agree: the same check, the same line
    assert inspect_cli.main(["verify", str(run_dir)]) == 1
    out = capsys.readouterr().out
    assert "iter_00000003: DAMAGED" in out and "does not belong to this checkpoint" in out and why in out, out
    ext = resume(run_dir)
    assert ext.resumed_from == "iter_00000002"
    err = capsys.readouterr().err
    assert "does not belong to this checkpoint" in err and why in err
    assert (run_dir / "checkpoints" / "iter_00000003.damaged").is_dir()
    assert inspect_cli.main(["verify", str(run_dir)]) == 0  # what is left all loads


def test_a_rank_file_without_identity_in_a_checkpoint_that_has_one_is_refused(run_dir):
    path = ckpt(run_dir) / "rank_00000.npz"
    with zipfile.ZipFile(path) as z:
        members = {i.filename: z.read(i) for i in z.infolist() if not i.filename.startswith(admit.IDENTITY)}
    with zipfile.ZipFile(path, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    reseal(ckpt(run_dir))
    problems = admit.problems(str(ckpt(run_dir)), Manifest.read(str(ckpt(run_dir))))
    assert len(problems) == 1 and "carries no run identity" in problems[0]


def test_verify_and_resume_refuse_the_same_pickle(run_dir, capsys):
    path = ckpt(run_dir) / "rank_00000.npz"
    with zipfile.ZipFile(path) as z:
        members = {i.filename: z.read(i) for i in z.infolist()}
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.array([{"x": 1}], dtype=object), allow_pickle=True)
    members[W + ".npy"] = buf.getvalue()
    with zipfile.ZipFile(path, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    reseal(ckpt(run_dir))
    assert inspect_cli.main(["verify", str(run_dir), "iter_00000003"]) == 1
    assert "holds an object array" in capsys.readouterr().out
    assert resume(run_dir).resumed_from == "iter_00000002"
    assert "holds an object array" in capsys.readouterr().err
    assert (run_dir / "checkpoints" / "iter_00000003.damaged").is_dir()


def test_an_exact_checkpoint_load_of_a_refused_one_fails_naming_it(run_dir, tmp_path):
    train(tmp_path / "other")
    shutil.copy(ckpt(tmp_path / "other") / "rank_00000.npz", ckpt(run_dir) / "rank_00000.npz")
    reseal(ckpt(run_dir))
    with pytest.raises(CheckpointError, match="iter_00000003.*does not belong to this checkpoint"):
        attach(make_trainer(run_dir, 6), {"load": "iter_00000003", "verify": False}, run_dir, solo())


# -- zip bombs ---------------------------------------------------------------------------


def deflated_zeros(header, nbytes, chunk=16 << 20):
    """A raw deflate stream of ``header`` then ``nbytes`` zero bytes, built in a second: each
    chunk of zeros is compressed once after a full flush (no reference to earlier data), so its
    bytes repeat."""
    head = zlib.compressobj(1, zlib.DEFLATED, -15)
    first = head.compress(header) + head.flush(zlib.Z_FULL_FLUSH)
    zeros = zlib.compressobj(1, zlib.DEFLATED, -15)
    block = zeros.compress(bytes(chunk)) + zeros.flush(zlib.Z_FULL_FLUSH)
    tail = zlib.compressobj(1, zlib.DEFLATED, -15).flush(zlib.Z_FINISH)
    count, rest = divmod(nbytes, chunk)
    last = zlib.compressobj(1, zlib.DEFLATED, -15)
    extra = last.compress(bytes(rest)) + last.flush(zlib.Z_FULL_FLUSH) if rest else b""
    return first + block * count + extra + tail


def write_zip(path, members):
    """A zip of (name, stored or raw deflated bytes, method, declared size) written by hand."""
    out, central = bytearray(), bytearray()
    for name, data, method, size in members:
        raw = name.encode()
        crc = zlib.crc32(data) if method == 0 else 0  # a bomb is refused before its CRC matters
        local = struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, method, 0, 0x21, crc, len(data), size, len(raw), 0)
        central += (
            struct.pack(
                "<IHHHHHHIIIHHHHHII",
                0x02014B50,
                20,
                20,
                0,
                method,
                0,
                0x21,
                crc,
                len(data),
                size,
                len(raw),
                0,
                0,
                0,
                0,
                0,
                len(out),
            )
            + raw
        )
        out += local + raw + data
    end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(members), len(members), len(central), len(out), 0)
    Path(path).write_bytes(bytes(out + central + end))


GIB3 = 3 << 30


def bomb_members(source):
    """The members of rank file ``source`` with W replaced by a deflated entry declaring 3 GiB."""
    header = np.lib.format.header_data_from_array_1_0(np.zeros(1, np.float32))
    header["shape"] = (GIB3 // 4,)
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, header)
    head = buf.getvalue()
    with zipfile.ZipFile(source) as z:
        members = [(i.filename, z.read(i), 0, i.file_size) for i in z.infolist() if i.filename != W + ".npy"]
    return members + [(W + ".npy", deflated_zeros(head, GIB3), 8, len(head) + GIB3)]


def test_a_compressed_entry_in_a_rank_file_is_refused_from_its_header(run_dir, tmp_path):
    """The fast check behind the bomb tests: a deflated member, refused before it is read."""
    path = ckpt(run_dir) / "rank_00000.npz"
    with zipfile.ZipFile(path) as z:
        members = {i.filename: z.read(i) for i in z.infolist()}
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for name, data in members.items():
            z.writestr(name, data)
    reseal(ckpt(run_dir))
    problems = admit.problems(str(ckpt(run_dir)), Manifest.read(str(ckpt(run_dir))))
    assert len(problems) == 1 and "is compressed and declares" in problems[0] and "nothing was inflated" in problems[0]
    link = L.Linear(4, 3)
    small = tmp_path / "small.npz"
    np.savez(small, W=np.zeros((300, 4), np.float32))
    with pytest.raises(UnsafeFile, match=r"declares shape \(300, 4\).*holds shape \(3, 4\); nothing was allocated"):
        load_npz(small, link, strict=False)


PEAK = """
import resource, sys
sys.path.insert(0, {tests!r})
import test_rel_foreign_checkpoints as t
from pathlib import Path
run_dir = Path({run_dir!r})
mode = {mode!r}
if mode == "resume":
    ext = t.resume(run_dir)
    print("resumed", ext.resumed_from)
elif mode == "weights":
    import chainer.links as L
    from mnframe.commands.trained import load_weights
    print("refused", load_weights({path!r}, L.Linear(4, 3), prefix="updater/model:main/predictor/"))
else:
    import chainer.links as L
    from mnframe._internal.npz_read import load_npz, UnsafeFile
    link = L.Linear(4, 3)
    try:
        load_npz({path!r}, link, path="updater/model:main/predictor/", strict=False)
    except UnsafeFile as exc:
        print("refused", exc)
print("peak", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
"""


def peak(run_dir, mode, path=""):
    code = PEAK.format(tests=str(Path(__file__).parent), run_dir=str(run_dir), mode=mode, path=str(path))
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout + result.stderr, int(result.stdout.rsplit("peak ", 1)[1])


@pytest.mark.slow
def test_a_zip_bomb_in_a_rank_file_is_refused_without_inflating_it(run_dir):
    """The issue's bomb: a deflated entry declaring 3 GiB (3 MiB on disk, within deflate's 1032:1),
    the manifest resealed. Resume refuses it before inflating anything (rank files are written
    uncompressed), moves it aside and resumes iter_00000002; peak memory stays far below 3 GiB."""
    path = ckpt(run_dir) / "rank_00000.npz"
    write_zip(path, bomb_members(path))
    reseal(ckpt(run_dir))
    assert os.path.getsize(path) < 16 << 20
    with zipfile.ZipFile(path) as z:
        assert z.getinfo(W + ".npy").file_size > GIB3
    out, rss = peak(run_dir, "resume")
    assert "resumed iter_00000002" in out and "is compressed and declares" in out, out
    assert rss < 1 << 30, rss  # the bomb would have needed 3 GiB
    assert inspect_cli.main(["verify", str(run_dir), "iter_00000002"]) == 0


@pytest.mark.slow
def test_an_entry_declaring_more_than_the_model_holds_is_refused_before_reading(run_dir, tmp_path):
    """A deflated file (as model files and other archives may be): the declared shape is compared
    with the initialized parameter before the entry is read."""
    path = tmp_path / "model.npz"
    write_zip(path, bomb_members(ckpt(run_dir) / "rank_00000.npz"))
    out, rss = peak(run_dir, "load", path)
    assert "refused" in out and "declares shape (805306368,)" in out and "holds shape (3, 4)" in out, out
    assert rss < 1 << 30, rss
    with pytest.raises(UnsafeFile, match="is compressed"):
        SafeNpz(path, stored_only=True)
    link = L.Linear(4, 3)
    load_npz(ckpt(run_dir, 2) / "rank_00000.npz", link, path="updater/model:main/predictor/", strict=False)
    out, rss = peak(run_dir, "weights", path)  # evaluate's and predict's reader of model files
    assert "parameter W has shape (805306368,) in model.npz" in out and "(3, 4) in the model built" in out, out
    assert rss < 1 << 30, rss


def _replace_entry(path, key, array):
    with zipfile.ZipFile(path) as z:
        members = {i.filename: z.read(i) for i in z.infolist()}
    buf = io.BytesIO()
    np.lib.format.write_array(buf, array)
    members[key + ".npy"] = buf.getvalue()
    with zipfile.ZipFile(path, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)


def test_a_planted_parameter_shape_is_refused_when_an_older_checkpoint_fits(run_dir, capsys):
    _replace_entry(ckpt(run_dir) / "rank_00000.npz", W, np.zeros((5, 4), np.float32))
    reseal(ckpt(run_dir))
    ext = resume(run_dir)
    assert ext.resumed_from == "iter_00000002"
    err = capsys.readouterr().err
    assert "skipped iter_00000003" in err and "has shape (5, 4) but the model being resumed has (3, 4)" in err, err
    assert (run_dir / "checkpoints" / "iter_00000003.damaged").is_dir()


def test_a_model_that_fits_no_checkpoint_is_a_configuration_change_and_nothing_is_moved_aside(run_dir, monkeypatch):
    import mnframe.runtime.errors as errors

    real = L.Linear
    monkeypatch.setattr(L, "Linear", lambda i, o: real(i, o + 2))  # the model's settings changed
    with pytest.raises(errors.ResumeFailed, match="did the model, optimizer or extensions change"):
        resume(run_dir)
    assert sorted(os.listdir(run_dir / "checkpoints")) == [f"iter_0000000{i}" for i in (1, 2, 3)]
