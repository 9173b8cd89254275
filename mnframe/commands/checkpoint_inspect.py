"""``python -m mnframe checkpoint list|verify RUN_DIR``: look at a run's checkpoints without MPI.

``list`` prints each committed checkpoint's iteration, reason, world size, layout and size
(from its manifest; a missing manifest or a file of the wrong size is marked DAMAGED).
``verify`` runs the checks resume runs before loading (``mnframe.checkpoint.admit``: every
file's SHA-256, safe contents with no pickle, object array or compressed entry, each rank
file's identity: run, iteration, world size, rank) and, when a key is set
(``MNFRAME_CHECKPOINT_KEY(_FILE)``, see signing.py), the manifest's signature, and names
each damaged or refused file: a checkpoint it calls ok is one resume loads. Neither starts
MPI nor changes anything. Exit status: 0 all well,
1 something damaged, 2 bad input (no such directory, not a run directory, bad arguments;
one line, no traceback). RUN_DIR is a run directory (its ``config.yaml`` names
``checkpoint.dir``) or a checkpoint directory itself.
"""

import os
import sys

from mnframe.checkpoint import admit, signing
from mnframe.checkpoint.layout import describe, layout_of
from mnframe.checkpoint.manifest import MANIFEST, Manifest, check_file, outside_problem
from mnframe.checkpoint.store import _DAMAGED_RE, _NAME_RE, TMP_PREFIX
from mnframe.runtime.errors import ConfigError
from mnframe.runtime.safe_paths import refuse_links
from mnframe.runtime.sizes import human_bytes

USAGE = "usage: python -m mnframe checkpoint {list,verify} RUN_DIR [iter_N ...]"
OK, DAMAGED, BAD_INPUT = 0, 1, 2


class BadInput(Exception):
    """A mistake in the command line or the directory named (exit 2, one line)."""


def layout_summary(manifest):
    """One short phrase for the layout a checkpoint was written with (its manifest's layout
    record; for an older manifest, the layout its world size and topology imply)."""
    return describe(layout_of(manifest), graph=False)


def checkpoint_root(run_dir):
    """The checkpoint directory of ``run_dir`` (BadInput when there is none to look at)."""
    if not os.path.isdir(run_dir):
        raise BadInput(f"{run_dir}: no such directory; name a run directory (hydra.run.dir of a run)")
    if _looks_like_root(run_dir):
        return run_dir
    config = os.path.join(run_dir, "config.yaml")
    if os.path.isfile(config):
        root = os.path.join(run_dir, _configured_dir(config))
    elif os.path.isdir(os.path.join(run_dir, "checkpoints")):
        root = os.path.join(run_dir, "checkpoints")
    else:
        root = None
    if root is not None:
        refuse_links(run_dir, root)  # a linked checkpoints/ is never read (LinkRefused: exit 2)
        return root
    raise BadInput(f"{run_dir} is not a run directory: it has no config.yaml and no checkpoints/ directory")


def newest_layout(run_dir, config=None):
    """'iter_N was written by <layout>' for the newest readable checkpoint of ``run_dir`` (its
    ``checkpoint.dir`` read from ``config``, the run's config as a dict), or None (no run
    directory or no checkpoint): what a refused world size is compared with."""
    root = os.path.join(os.fspath(run_dir), checkpoint_dir_of(config)) if run_dir else None
    if not root or not os.path.isdir(root):
        return None
    for name in _entries(root, ())[0]:
        manifest, _ = _read(root, name)
        if manifest is not None:
            return f"its newest checkpoint {name} was written by {layout_summary(manifest)}"
    return None


def _looks_like_root(path):
    return any(_NAME_RE.match(e) or _DAMAGED_RE.match(e) for e in os.listdir(path))


def _configured_dir(config_path):
    import yaml

    try:
        with open(config_path, encoding="utf-8") as f:
            config = yaml.safe_load(f)
    except (OSError, yaml.YAMLError) as exc:
        raise BadInput(f"{config_path} is unreadable ({type(exc).__name__}); is this a run directory?") from None
    return checkpoint_dir_of(config)


def checkpoint_dir_of(config):
    """``checkpoint.dir`` of a run's config (a plain dict), else the default ``checkpoints``."""
    section = config.get("checkpoint") if isinstance(config, dict) else None
    directory = section.get("dir") if isinstance(section, dict) else None
    return directory if isinstance(directory, str) and directory else "checkpoints"


def _entries(root, names):
    """(committed checkpoint names newest first, other entries worth a note)."""
    if not os.path.isdir(root):
        return [], []
    found = sorted(((int(m.group(1)), e) for e in os.listdir(root) if (m := _NAME_RE.match(e))), reverse=True)
    committed = [e for _, e in found]
    if names:
        unknown = [n for n in names if n not in committed]
        if unknown:
            raise BadInput(
                f"{', '.join(unknown)}: no such checkpoint in {root} (it has {', '.join(committed) or 'none'})"
            )
        return [n for n in committed if n in names], []
    notes = []
    for entry in sorted(os.listdir(root)):
        if _DAMAGED_RE.match(entry):
            notes.append(f"{entry}: moved aside earlier as damaged (not a checkpoint; kept for inspection)")
        elif entry.startswith(TMP_PREFIX):
            notes.append(
                f"{entry}: a save in progress or left unfinished (ignored by resume; removed by the next save)"
            )
    return committed, notes


def _read(root, name):
    """(Manifest, None) or (None, why it cannot be read)."""
    outside = outside_problem(root, name, is_dir=True)
    if outside:
        return None, outside
    try:
        return Manifest.read(os.path.join(root, name)), None
    except FileNotFoundError:
        return None, f"no {MANIFEST} (an incomplete save, or not written by mnframe)"
    except Exception as exc:
        return None, f"{MANIFEST} is unreadable: {exc}"


def _size_problems(directory, manifest):
    problems = []
    for fname, entry in sorted(manifest.files.items()):
        problem = check_file(directory, fname, entry, hashed=False)
        if problem:
            problems.append(problem)
    return problems


def list_checkpoints(root, names=(), out=None):
    """Print the table; return the exit status."""
    out = out or sys.stdout
    committed, notes = _entries(root, names)
    if not committed:
        print(f"no checkpoints in {root}", file=out)
        for note in notes:
            print(f"  {note}", file=out)
        return OK
    rows, damaged = [], 0
    for name in committed:
        manifest, why = _read(root, name)
        problems = [why] if why else _size_problems(os.path.join(root, name), manifest)
        if manifest is None:
            rows.append((name, "?", "?", "?", "?", "?", "DAMAGED: " + why))
        else:
            size = human_bytes(sum(e.size for e in manifest.files.values()))
            status = "DAMAGED: " + "; ".join(problems) if problems else "ok"
            rows.append(
                (
                    name,
                    str(manifest.iteration),
                    manifest.reason,
                    str(manifest.world_size),
                    layout_summary(manifest),
                    size,
                    status,
                )
            )
        damaged += bool(problems)
    header = ("checkpoint", "iteration", "reason", "world size", "layout", "size", "status")
    widths = [max(len(r[i]) for r in rows + [header]) for i in range(len(header) - 1)]
    print(f"checkpoints in {root} (newest first):", file=out)
    for row in [header] + rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)) + "  " + row[-1], file=out)
    for note in notes:
        print(f"note: {note}", file=out)
    if damaged:
        print(f"{damaged} of {len(rows)} checkpoint(s) damaged; run 'checkpoint verify' to check hashes", file=out)
    return DAMAGED if damaged else OK


def verify_checkpoints(root, names=(), out=None):
    """Check every file's size and SHA-256 (and the signature with a key); return the exit status."""
    out = out or sys.stdout
    secret = signing.key()  # ConfigError (both variables set) -> exit 2
    committed, notes = _entries(root, names)
    if not committed:
        print(f"no checkpoints in {root}: nothing to verify", file=out)
        return OK
    damaged = 0
    for name in committed:
        directory = os.path.join(root, name)
        manifest, why = _read(root, name)
        if manifest is None:
            problems = [f"{directory}: {why}"]
        else:
            problems = admit.problems(directory, manifest)  # the checks resume runs before loading

            if secret is not None and (bad := signing.problem(manifest, secret, directory)):
                problems.append(bad)
        if problems:
            damaged += 1
            print(f"{name}: DAMAGED", file=out)
            for problem in problems:
                print(f"  {problem}", file=out)
        else:
            files = manifest.files.values()
            signed = ", signature verified" if secret is not None else ""
            size = human_bytes(sum(e.size for e in files))
            print(
                f"{name}: ok ({len(files)} file(s), {size}, hashes match, contents safe, rank files its own{signed})",
                file=out,
            )
    for note in notes:
        print(f"note: {note}", file=out)
    verdict = (
        f"{damaged} of {len(committed)} checkpoint(s) damaged"
        if damaged
        else f"all {len(committed)} checkpoint(s) verified"
    )
    print(verdict, file=out)
    return DAMAGED if damaged else OK


ACTIONS = {"list": list_checkpoints, "verify": verify_checkpoints}


def main(argv):
    """``checkpoint ACTION RUN_DIR [NAME ...]``; returns the exit status."""
    argv = list(argv)
    try:
        if argv[:1] in (["-h"], ["--help"]):
            print(USAGE + "\n" + __doc__.split("\n\n", 1)[1].strip())
            return OK
        if not argv:
            raise BadInput(f"which command? {USAGE}")
        action = ACTIONS.get(argv[0])
        if action is None:
            raise BadInput(f"unknown checkpoint command {argv[0]!r}; {USAGE}")
        if len(argv) < 2 or argv[1].startswith("-"):
            raise BadInput(f"checkpoint {argv[0]} needs a run directory; {USAGE}")
        return action(checkpoint_root(argv[1]), argv[2:])
    except (BadInput, ConfigError) as exc:
        print(f"mnframe checkpoint: {exc}", file=sys.stderr)
        return BAD_INPUT
    except OSError as exc:  # the directory itself cannot be read
        print(f"mnframe checkpoint: {exc}", file=sys.stderr)
        return BAD_INPUT
    except BrokenPipeError:  # `| head`: no "Exception ignored" at exit either
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return OK
