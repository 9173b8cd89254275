"""The manifest that makes a checkpoint directory trustworthy.

A checkpoint directory is complete only if it holds ``manifest.json`` (written
last, before the directory is renamed into place) and every file listed there
has the recorded size and SHA-256. Anything else is ignored by resume.
"""

import dataclasses
import hashlib
import json
import os
import time
from typing import Dict, Optional

FORMAT = 1
MANIFEST = "manifest.json"


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

    def to_json(self):
        return json.dumps(dataclasses.asdict(self), indent=1, sort_keys=True, default=str)

    @classmethod
    def from_json(cls, text):
        raw = json.loads(text)
        if raw.get("format") != FORMAT:
            raise ValueError(f"unknown manifest format {raw.get('format')!r} (expected {FORMAT})")
        raw["files"] = {name: FileEntry(**e) for name, e in raw["files"].items()}
        return cls(**raw)

    @classmethod
    def read(cls, directory):
        with open(os.path.join(directory, MANIFEST), encoding="utf-8") as f:
            return cls.from_json(f.read())


def check_file(directory, name, entry):
    """None if the file matches its entry, else what is wrong with it."""
    path = os.path.join(directory, name)
    if not os.path.exists(path):
        return f"{path} (written by rank {entry.rank}) is missing"
    size = os.path.getsize(path)
    if size != entry.size:
        return f"{path} (written by rank {entry.rank}) has {size} bytes, the manifest says {entry.size}"
    digest = sha256_file(path)
    if digest != entry.sha256:
        return f"{path} (written by rank {entry.rank}) has a wrong SHA-256 (corrupted)"
    return None
