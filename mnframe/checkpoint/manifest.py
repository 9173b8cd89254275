"""The manifest that makes a checkpoint directory trustworthy.

A checkpoint directory is complete only if it holds ``manifest.json`` (written
last, before the directory is renamed into place) and every file listed there
has the recorded size and SHA-256. Anything else is ignored by resume.

Reading is bounded and stays inside the checkpoint: the manifest is a regular file
of at most ``MAX_MANIFEST_BYTES`` parsed as JSON (data only), its file names are
plain names, and a file that is a symbolic link leading outside the checkpoint
directory (or not a regular file) is never opened (``outside_problem``).
"""

import dataclasses
import hashlib
import json
import os
import time
from typing import Dict, Optional

FORMAT = 1
MANIFEST = "manifest.json"
MAX_MANIFEST_BYTES = 64 << 20


def outside_problem(directory, name, is_dir=False):
    """Why ``directory/name`` must not be read (it leads outside ``directory`` or is not a
    regular file, or directory with ``is_dir``), or None. A missing file is not this function's business."""
    path = os.path.join(directory, name)
    if os.path.basename(name) != name or name in ("", ".", ".."):
        return f"{path}: {name!r} is not a plain file name (refused: it could lead outside the checkpoint)"
    if not os.path.lexists(path):
        return None
    real, base = os.path.realpath(path), os.path.realpath(directory)
    if os.path.commonpath([real, base]) != base:
        return f"{path} is a symbolic link to {real}, outside the checkpoint directory (refused, not read)"
    if not (os.path.isdir(real) if is_dir else os.path.isfile(real)):
        return f"{path} is not a regular {'directory' if is_dir else 'file'} (refused, not read)"
    return None


def sha256_file(path, chunk=1 << 20):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(chunk), b""):
            h.update(block)
    return h.hexdigest()


@dataclasses.dataclass
class FileEntry:
    size: int
    sha256: str
    rank: int  # the rank that wrote it (named in errors)


@dataclasses.dataclass
class Manifest:
    iteration: int
    world_size: int
    config_hash: Optional[str]
    files: Dict[str, FileEntry]
    config: Optional[dict] = None
    created: float = dataclasses.field(default_factory=time.time)
    reason: str = "interval"  # or "preemption"
    format: int = FORMAT
    signature: Optional[str] = None  # HMAC of the rest (mnframe.checkpoint.signing), with a key
    layout: Optional[dict] = None  # what each file holds (mnframe.checkpoint.layout); None before layouts
    run_id: Optional[str] = None  # the run's identity, also inside every rank file (mnframe.checkpoint.admit)

    def to_json(self):
        raw = dataclasses.asdict(self)
        for key in ("layout", "run_id"):  # as written before them: the same JSON, the same signature
            if raw[key] is None:
                del raw[key]
        return json.dumps(raw, indent=1, sort_keys=True, default=str)

    @classmethod
    def from_json(cls, text):
        raw = json.loads(text)
        if raw.get("format") != FORMAT:
            raise ValueError(f"unknown manifest format {raw.get('format')!r} (expected {FORMAT})")
        files = {}
        for name, e in raw["files"].items():
            if os.path.basename(name) != name or name in ("", ".", ".."):
                raise ValueError(f"file name {name!r} is not a plain name in the checkpoint directory")
            files[name] = FileEntry(**e)
            if not isinstance(files[name].size, int) or not isinstance(files[name].sha256, str):
                raise ValueError(f"the entry of {name!r} is malformed")
        raw["files"] = files
        return cls(**raw)

    @classmethod
    def read(cls, directory):
        problem = outside_problem(directory, MANIFEST)
        if problem:
            raise ValueError(problem)
        with open(os.path.join(directory, MANIFEST), encoding="utf-8") as f:
            text = f.read(MAX_MANIFEST_BYTES + 1)
        if len(text) > MAX_MANIFEST_BYTES:
            raise ValueError(f"it is larger than {MAX_MANIFEST_BYTES} bytes")
        return cls.from_json(text)


def layout_of(manifest):
    """The checkpoint's layout record (stage and replica of each rank file, the rank graph; the
    shape is documented in mnframe.checkpoint.layout), derived for a manifest without one."""
    from mnframe.checkpoint.layout import layout_of as _layout_of

    return _layout_of(manifest)


def check_file(directory, name, entry, hashed=True):
    """None if the file matches its entry, else what is wrong with it (its place, its size and, with
    ``hashed``, its SHA-256)."""
    path = os.path.join(directory, name)
    outside = outside_problem(directory, name)
    if outside:
        return outside
    if not os.path.exists(path):
        return f"{path} (written by rank {entry.rank}) is missing"
    size = os.path.getsize(path)
    if size != entry.size:
        return f"{path} (written by rank {entry.rank}) has {size} bytes, the manifest says {entry.size}"
    if not hashed:
        return None
    digest = sha256_file(path)
    if digest != entry.sha256:
        return f"{path} (written by rank {entry.rank}) has a wrong SHA-256 (corrupted)"
    return None
