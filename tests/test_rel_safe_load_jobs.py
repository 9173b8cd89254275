"""Issue 27 as the attacker tried it: ``mpiexec -n 2 python -m mnframe`` resuming from a run directory
whose rank-1 checkpoint file holds a pickled payload in the Python random state entry (and the
manifest resealed). Every rank refuses with status 2 and one line naming the file and entry; the
payload never runs. With a signing key the resealed checkpoint is refused by its signature.
"""

import io
import json
import pickle
import zipfile
from pathlib import Path

import numpy as np

from mnframe.testing import run_mpi

REPO = Path(__file__).resolve().parent.parent
TIMEOUT = 180
SMALL = ["model.n_units=16", "dataset.batch_size=20", "extensions=minimal", "optimizer.lr=0.01"]
KEY = {"MNFRAME_CHECKPOINT_KEY": "a-test-key-of-32-characters-long"}
ENTRY = "extensions/mnframe_checkpoint/mnframe_rng/python"


class Payload:
    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        import os

        return (os.system, (f"touch {self.marker}",))


def mnframe(*args, cwd, env=None):
    result = run_mpi(
        ["-m", "mnframe", *SMALL, "hydra.run.dir=run", *args],
        n=2,
        timeout=TIMEOUT,
        cwd=str(cwd),
        env={"PYTHONPATH": str(REPO), **(env or {})},
    )
    assert not result.timed_out, result.output[-4000:]
    return result


def _rewrite(directory, path, members):
    """Write ``members`` as the rank file ``path`` and reseal the manifest (sizes and hashes), as an attacker would."""
    import hashlib

    with zipfile.ZipFile(path, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    manifest = json.loads((directory / "manifest.json").read_text())
    data = path.read_bytes()
    manifest["files"][path.name].update(size=len(data), sha256=hashlib.sha256(data).hexdigest())
    (directory / "manifest.json").write_text(json.dumps(manifest))


def plant(directory, marker):
    """The issue's steps 1 and 2 on rank 1's file: a pickled payload as the rng entry, hashes recomputed."""

    path = directory / "rank_00001.npz"
    with zipfile.ZipFile(path) as z:
        members = {i.filename: z.read(i) for i in z.infolist() if "mnframe_rng/python_" not in i.filename}
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.frombuffer(pickle.dumps(Payload(marker)), np.uint8))
    members[ENTRY + ".npy"] = buf.getvalue()
    _rewrite(directory, path, members)


def retouch(directory):
    """A change that passes every check of the files (a parameter's values), hashes recomputed:
    only a signature can tell."""

    path = directory / "rank_00001.npz"
    with zipfile.ZipFile(path) as z:
        members = {i.filename: z.read(i) for i in z.infolist()}
    key = next(k for k in members if k.endswith("/W.npy"))
    array = np.load(io.BytesIO(members[key]), allow_pickle=False)
    buf = io.BytesIO()
    np.lib.format.write_array(buf, array + 1)
    members[key] = buf.getvalue()
    _rewrite(directory, path, members)


def test_planted_pickle_is_refused_on_every_rank_and_a_signature_catches_the_reseal(tmp_path):
    """Since issue 38 the refused checkpoint is skipped like a damaged one (moved aside, the previous
    one resumed); a change that passes the file checks is caught by the signature."""
    import shutil

    first = mnframe("trainer.stop=[6,iteration]", "checkpoint.interval=3", cwd=tmp_path, env=KEY)
    assert first.returncode == 0, first.output[-4000:]
    run_dir = tmp_path / "run"
    assert (run_dir / "model.npz").exists() and (run_dir / "model.safetensors").exists()
    newest = run_dir / "checkpoints" / "iter_00000006"
    assert json.loads((newest / "manifest.json").read_text())["signature"].startswith("hmac-sha256:")
    shutil.copytree(run_dir, tmp_path / "signed" / "run")
    marker = tmp_path / "pwned"
    plant(newest, marker)

    resumed = mnframe("trainer.stop=[9,iteration]", "checkpoint.interval=3", cwd=tmp_path)
    out = resumed.output
    assert resumed.returncode == 0, out[-4000:]
    assert "Traceback" not in out and "did not report it" not in out, out[-4000:]
    lines = [line for line in out.splitlines() if line.startswith("mnframe checkpoint: skipped iter_00000006")]
    assert len(lines) == 1, out[-4000:]  # printed once, by rank 0, for every rank
    assert "refusing to load" in lines[0] and str(newest / "rank_00001.npz") in lines[0] and repr(ENTRY) in lines[0]
    assert f"resumed from {run_dir / 'checkpoints' / 'iter_00000003'}" in out
    assert (run_dir / "checkpoints" / "iter_00000006.damaged").is_dir()
    assert not marker.exists()

    retouch(tmp_path / "signed" / "run" / "checkpoints" / "iter_00000006")
    signed = mnframe("trainer.stop=[9,iteration]", "checkpoint.interval=3", cwd=tmp_path / "signed", env=KEY)
    assert signed.returncode == 2, signed.output[-4000:]
    assert "signature that does not verify" in signed.output and "Traceback" not in signed.output
