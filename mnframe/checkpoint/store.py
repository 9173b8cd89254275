"""Atomic, verified checkpoint directories.

Layout under the checkpoint root::

    iter_00000010/            a committed checkpoint
        manifest.json         iteration, world size, config hash, size + SHA-256 of every file
        rank_00000.npz ...    one file per rank
    .tmp-iter_00000015/       being written (ignored by resume, removed by the next save)

``save`` is collective: rank 0 creates the temporary directory, every rank
writes and fsyncs its files, the ranks share their verdicts, rank 0 writes the
manifest last and commits the directory with one atomic rename (then fsyncs
the parent). A job killed at any moment leaves either the old set of
checkpoints or the old set plus one complete new checkpoint. Garbage
collection never deletes the checkpoint just written (the newest verified
one) and only counts usable checkpoints against ``keep``: a damaged, incomplete
or foreign directory is never deleted and is reported once. ``select`` picks
the newest checkpoint whose manifest is present and whose files all verify,
saying which ones it skipped and why. The root must be on a filesystem every
rank sees (the usual shared run directory).
"""

import os
import re
import shutil
import sys
import uuid

from mnframe._internal.npz_write import WriteFailed
from mnframe.checkpoint import admit, signing
from mnframe.checkpoint.manifest import MANIFEST, FileEntry, Manifest, outside_problem, sha256_file
from mnframe.communicators import host_collectives
from mnframe.runtime.errors import CheckpointError, ConfigError, SaveError
from mnframe.runtime.fs import atomic_write_text, fsync_dir
from mnframe.runtime.safe_paths import LinkRefused, refuse_links

_NAME_RE = re.compile(r"^iter_(\d{8,})$")
DAMAGED_SUFFIX = ".damaged"  # iter_N.damaged (.2, .3 ...): moved aside, never deleted, not a checkpoint
_DAMAGED_RE = re.compile(r"^iter_\d{8,}\.damaged(\.\d+)?$")
TMP_PREFIX = ".tmp-"
OLD_PREFIX = ".old-"
_reported = set()  # (root, name) of directories garbage collection already reported


def checkpoint_name(iteration):
    return f"iter_{int(iteration):08d}"


def _say(text):
    sys.stderr.write(f"mnframe checkpoint: {text}\n")
    sys.stderr.flush()


def write_error(rank, directory, exc):
    """(one line, whether it is the disk's) for ``exc`` raised while ``rank`` wrote its file into
    ``directory``: a full disk or another OSError is one line and exit 1 (SaveError), anything
    else is a bug (CheckpointError)."""
    if isinstance(exc, WriteFailed):
        return f"rank {rank} {exc}", True
    if isinstance(exc, OSError):
        return f"rank {rank} could not write into {directory}: {exc}", True
    return f"rank {rank}: {type(exc).__name__}: {exc}", False


class CheckpointStore:
    """The checkpoints of one run, shared by all ranks of ``comm``."""

    def __init__(self, root, comm, base=None):
        self.root = os.path.abspath(os.fspath(root))
        # the run directory: no component between it and root may be a link (default: root itself)
        self.base = os.path.abspath(os.fspath(base)) if base is not None else os.path.dirname(self.root)
        self.comm = comm  # a mnframe or mpi4py communicator (both have rank and size)
        self.unusable = {}  # checkpoint name -> why resume skipped it (kept, never collected)
        self.layout = None  # recorded in each manifest (mnframe.checkpoint.layout; set by attach)
        self.run_id = None  # the run's identity: adopted from the checkpoint resumed, else new (ensure_run_id)

    def path(self, name):
        return os.path.join(self.root, name)

    def link_problem(self):
        """Why the checkpoint directory must not be used (it, or a directory between the run
        directory and it, is a symbolic link: resume would read and save would write outside), or None."""
        try:
            refuse_links(self.base, self.root)
        except LinkRefused as exc:
            return f"checkpoint.dir: {exc}; to keep checkpoints elsewhere set checkpoint.dir to that absolute path"
        return None

    def check_root(self):
        """``LinkRefused`` on every rank when ``link_problem`` finds one on rank 0 (collective)."""
        link = self.link_problem() if self.comm.rank == 0 else None
        link = host_collectives.bcast_obj(self.comm, link, name="checkpoint.bcast_obj")
        if link:
            raise LinkRefused(link)

    def ensure_run_id(self):
        """Give a run that did not resume one an identity (collective: rank 0 draws it)."""
        if self.run_id is None:
            drawn = uuid.uuid4().hex if self.comm.rank == 0 else None
            self.run_id = host_collectives.bcast_obj(self.comm, drawn, name="checkpoint.bcast_obj")
        return self.run_id

    def identity(self, iteration):
        """The entries this rank's file of checkpoint ``iteration`` carries to say whose it is
        (none before ``ensure_run_id``)."""
        if self.run_id is None:
            return {}
        return admit.identity_arrays(self.run_id, iteration, self.comm.size, self.comm.rank)

    # -- writing --------------------------------------------------------------
    def save(self, iteration, write_files, config_hash=None, config=None, reason="interval", keep=None):
        """Write checkpoint ``iteration`` (collective); return its name.

        ``write_files(tmpdir)`` writes this rank's files into ``tmpdir`` and
        returns their names (or {name: (size, sha256)} when it measured them).
        Raises CheckpointError on every rank if any rank
        failed (naming the ranks and their errors); nothing is committed then.
        """
        rank = self.comm.rank
        name = checkpoint_name(iteration)
        tmp = self.path(TMP_PREFIX + name)
        secret = signing.key()
        err = link = None
        if rank == 0:
            link = self.link_problem()
            try:
                if link is None:
                    os.makedirs(self.root, exist_ok=True)
                    if os.path.islink(tmp):  # planted: never write through it
                        os.unlink(tmp)
                    shutil.rmtree(tmp, ignore_errors=True)
                    os.makedirs(tmp)
            except OSError as exc:
                err = f"cannot create {tmp}: {exc}"
        err, link = host_collectives.bcast_obj(self.comm, (err, link), name="checkpoint.bcast_obj")
        if link:
            raise LinkRefused(f"checkpoint {name} not written: {link}")
        if err:
            raise SaveError(f"checkpoint {name} not written: {err}{self._kept()}")

        entries, err, disk = self._write_own(tmp, write_files)
        results = host_collectives.allgather_obj(self.comm, (entries, err, disk), name="checkpoint.allgather_obj")
        errors = [e for _, e, _ in results if e]
        if errors:
            if rank == 0:
                shutil.rmtree(tmp, ignore_errors=True)
            error_type = SaveError if all(d for _, e, d in results if e) else CheckpointError
            raise error_type(f"checkpoint {name} not written: " + "; ".join(errors) + self._kept())

        err = None
        if rank == 0:
            files = {}
            for part, _, _ in results:
                files.update(part)
            err, disk = self._write_manifest_and_commit(
                tmp,
                name,
                Manifest(
                    iteration=int(iteration),
                    world_size=self.comm.size,
                    config_hash=config_hash,
                    files=files,
                    config=config,
                    reason=reason,
                    layout=self.layout,
                    run_id=self.run_id,
                ),
                secret,
                keep,
            )
        err, disk = host_collectives.bcast_obj(self.comm, (err, disk), name="checkpoint.bcast_obj")
        if err:
            raise (SaveError if disk else CheckpointError)(err + self._kept())
        return name

    def _write_own(self, tmp, write_files):
        """This rank's files into ``tmp``: (entries, error or None, whether the error is the disk's:
        an OSError is one line and exit 1, anything else a bug)."""
        rank, entries = self.comm.rank, {}
        try:
            written = write_files(tmp)  # names, or {name: (size, sha256)} already measured (async_save)
            for fname in written:
                path = os.path.join(tmp, fname)
                size, digest = written[fname] if isinstance(written, dict) else (os.path.getsize(path), None)
                entries[fname] = FileEntry(size=size, sha256=digest or sha256_file(path), rank=rank)
        except Exception as exc:  # shared by the caller: every rank raises the same error
            return (entries, *write_error(rank, tmp, exc))
        return entries, None, True

    def _write_manifest_and_commit(self, tmp, name, manifest, secret, keep):
        """Rank 0: sign and write the manifest, commit ``tmp`` as ``name``, collect garbage.
        Returns (error or None, whether the error is the disk's)."""
        try:
            if secret is not None:
                manifest.signature = signing.sign(manifest, secret)
            atomic_write_text(os.path.join(tmp, MANIFEST), manifest.to_json())
            fsync_dir(tmp)
            self._commit(tmp, self.path(name))
            if keep:
                self._collect_garbage(keep, newest=name)
        except Exception as exc:
            return f"rank 0 could not commit {self.path(name)}: {type(exc).__name__}: {exc}", isinstance(exc, OSError)
        return None, True

    def _kept(self):
        """'; the previous checkpoint P is kept' for a failed save's message (this rank's view)."""
        try:
            newest = self.committed()
        except OSError:
            return ""
        return f"; the previous checkpoint {self.path(newest[0])} is kept" if newest else ""

    def _commit(self, tmp, final):
        old, name = None, os.path.basename(final)
        problem = os.path.exists(final) and (self.unusable.get(name) or self._quick_problem(name))
        if problem:  # a damaged checkpoint is never overwritten
            self._move_aside(name, problem)
        if os.path.exists(final):  # re-saving the same iteration (e.g. preemption right after an interval save)
            old = os.path.join(self.root, OLD_PREFIX + os.path.basename(final))
            shutil.rmtree(old, ignore_errors=True)
            os.rename(final, old)
        os.rename(tmp, final)
        fsync_dir(self.root)
        if old:
            shutil.rmtree(old, ignore_errors=True)

    def _move_aside(self, name, why):
        """Rank 0: rename the damaged checkpoint ``name`` to ``iter_N.damaged`` (``.damaged.2`` ...
        when taken) and say where it went; it is never deleted and not counted in ``keep``."""
        target, n = self.path(name + DAMAGED_SUFFIX), 2
        while os.path.exists(target):
            target, n = self.path(f"{name}{DAMAGED_SUFFIX}.{n}"), n + 1
        try:
            os.rename(self.path(name), target)
        except OSError as exc:
            _say(f"{self.path(name)} is damaged ({why}) and could not be moved aside ({exc}); it is kept")
            return None
        fsync_dir(self.root)
        self.unusable.pop(name, None)
        _say(f"{self.path(name)} is damaged ({why}); moved aside to {target} (kept, not counted against keep)")
        return target

    def _collect_garbage(self, keep, newest):
        """Keep ``newest`` (just written and verified) plus the next ``keep - 1`` usable checkpoints.

        A directory resume found damaged, one without a readable manifest or whose
        files are missing or have the wrong size, and any foreign directory count
        against nothing and are never deleted: they are reported (once) instead.
        Leftovers of killed saves (``.tmp-``/``.old-``) are removed.
        """
        usable = []
        for name in self.committed():
            if name == newest:
                continue
            problem = self.unusable.get(name) or self._quick_problem(name)
            if problem:
                self._report_once(name, f"not collected and not counted against keep={keep}: {problem}")
            else:
                usable.append(name)
        for name in usable[max(keep - 1, 0) :]:
            shutil.rmtree(self.path(name), ignore_errors=True)
        for entry in os.listdir(self.root):
            if entry.startswith((TMP_PREFIX, OLD_PREFIX)):
                shutil.rmtree(self.path(entry), ignore_errors=True)
            elif not _NAME_RE.match(entry) and not _DAMAGED_RE.match(entry):
                self._report_once(entry, "is not a checkpoint (foreign entry); left alone")

    def _quick_problem(self, name):
        """Why checkpoint ``name`` is unusable, from its manifest and file sizes (no hashing), or None."""
        try:
            manifest = Manifest.read(self.path(name))
        except FileNotFoundError:
            return f"no {MANIFEST} (incomplete or not written by mnframe)"
        except Exception as exc:
            return f"{MANIFEST} is unreadable: {exc}"
        for fname, entry in manifest.files.items():
            path = os.path.join(self.path(name), fname)
            try:
                size = os.path.getsize(path)
            except OSError:
                return f"{fname} is missing"
            if size != entry.size:
                return f"{fname} has {size} bytes, the manifest says {entry.size}"
        return None

    def _report_once(self, name, text):
        if (self.root, name) not in _reported:
            _reported.add((self.root, name))
            _say(f"{self.path(name)} {text}")

    # -- reading --------------------------------------------------------------
    def committed(self):
        """Names of the committed checkpoint directories, newest first (this rank's view)."""
        if not os.path.isdir(self.root):
            return []
        found = [
            (int(m.group(1)), entry)
            for entry in os.listdir(self.root)
            if (m := _NAME_RE.match(entry)) and os.path.isdir(self.path(entry))
        ]
        return [name for _, name in sorted(found, reverse=True)]

    def scan(self):
        """[(name, Manifest or the reason it is unusable)], newest first, identical on all ranks."""
        listing = link = None
        if self.comm.rank == 0:
            listing, link = [], self.link_problem()
            for name in [] if link else self.committed():
                outside = outside_problem(self.root, name, is_dir=True)
                if outside:
                    listing.append((name, outside))
                    continue
                try:
                    listing.append((name, Manifest.read(self.path(name))))
                except FileNotFoundError:
                    listing.append((name, f"{self.path(name)} has no {MANIFEST} (incomplete)"))
                except Exception as exc:
                    listing.append((name, f"{self.path(name)}/{MANIFEST} is unreadable: {exc}"))
        listing, link = host_collectives.bcast_obj(self.comm, (listing, link), name="checkpoint.bcast_obj")
        if link:  # the same one line on every rank, status 2
            raise LinkRefused(link)
        return listing

    def verify(self, name, manifest, hashed=True):
        """Every problem with checkpoint ``name``'s files: ``admit.problems``, the checks
        ``checkpoint verify`` runs (hashes unless not ``hashed``, safe contents, each rank file's
        identity). Collective: the ranks share the files and then the verdict, so every rank
        decides the same before any collective that depends on the files."""
        names = sorted(manifest.files)
        mine = [names[i] for i in range(self.comm.rank, len(names), self.comm.size)]
        problems = admit.problems(self.path(name), manifest, mine, hashed=hashed)
        parts = host_collectives.allgather_obj(self.comm, problems, name="checkpoint.allgather_obj")
        return sorted(p for part in parts for p in part)

    def select(self, resume="auto", load=None, verify=True, fits=None):
        """The checkpoint to resume from as (name, Manifest), or None (collective).

        ``load`` names one checkpoint exactly: it is used or we fail naming the
        damaged file and its rank. Otherwise the newest good one is used,
        reporting every newer one that was skipped; ``resume='must'`` fails
        when there is none, ``'never'`` always starts fresh. ``fits(directory,
        manifest)``: why this rank's file does not fit the model being resumed, or
        None; a newer checkpoint that does not fit while an older one does is refused
        like a damaged one (a planted shape); when none fits, the newest is returned
        (the configuration changed: the configuration check and the load say so).
        """
        if load is None and resume == "never":
            self.check_root()  # a linked checkpoint directory is refused before training, not at the first save
            return None
        listing = self.scan()
        if load is not None:
            return self._select_exact(load, listing, verify)
        skipped, misfits = [], []
        for name, manifest in listing:
            if isinstance(manifest, str):
                skipped.append(f"skipped {name}: {manifest}")
                self.unusable[name] = manifest
                continue
            problems = self.verify(name, manifest, hashed=verify)
            if problems:  # damaged or refused (foreign, unsafe): moved aside, the previous one is tried
                skipped.append(f"skipped {name}: " + "; ".join(problems))
                self.unusable[name] = "resume found it damaged or refused it: " + "; ".join(problems)
                continue
            misfit = self._misfit(fits, name, manifest)
            if misfit:
                misfits.append((name, manifest, misfit))
                continue
            for newer, _, why in misfits:  # it fits while they do not: their shapes were planted
                skipped.append(f"skipped {newer}: {why}")
                self.unusable[newer] = "resume refused it: " + why
            return self._chosen(name, manifest, skipped)
        if misfits:  # none fits the model: its configuration changed, said by the checks that follow
            return self._chosen(misfits[0][0], misfits[0][1], skipped)
        detail = ("\n  " + "\n  ".join(skipped)) if skipped else ""
        if resume == "must":
            raise ConfigError(
                f"resume=must but there is no complete checkpoint in "
                f"{self.root}{detail}\nStart with resume=auto or never, or point "
                f"the run directory at the run you want to continue."
            )
        if skipped and self.comm.rank == 0:
            _say(f"no usable checkpoint, starting from scratch:{detail}")
            self._move_damaged_aside()
        return None

    def _chosen(self, name, manifest, skipped):
        self.run_id = manifest.run_id or self.run_id  # the run goes on: the same identity
        if skipped and self.comm.rank == 0:
            _say("\n  ".join(skipped + [f"falling back to the previous good checkpoint {name}"]))
            self._move_damaged_aside()
        return name, manifest

    def _misfit(self, fits, name, manifest):
        """Why checkpoint ``name`` does not fit the model being resumed on some rank, or None (collective)."""
        if fits is None:
            return None
        try:
            problem = fits(self.path(name), manifest)
        except Exception as exc:  # an unreadable file was refused by verify already; be safe
            problem = f"{self.path(name)}: {type(exc).__name__}: {exc}"
        parts = host_collectives.allgather_obj(self.comm, problem, name="checkpoint.allgather_obj")
        return next((p for p in parts if p), None)

    def _move_damaged_aside(self):
        """Rank 0, after resume skipped damaged checkpoints: move each aside, so that the run
        reaching that iteration again writes a new one beside it instead of over it."""
        for name, why in list(self.unusable.items()):
            self._move_aside(name, why)

    def _select_exact(self, load, listing, verify):
        found = dict(listing)
        if load not in found:  # the same listing on every rank: the same verdict
            available = ", ".join(found) or "none"
            raise ConfigError(
                f"checkpoint.load: checkpoint {load!r} is not in {self.root}; "
                f"available: {available}. Set checkpoint.load to one of them (or "
                f"null for the newest), or point hydra.run.dir at the run that has it."
            )
        manifest = found[load]
        if isinstance(manifest, str):
            raise CheckpointError(f"checkpoint {load!r} cannot be loaded: {manifest}")
        problems = self.verify(load, manifest, hashed=verify)
        if problems:
            raise CheckpointError(f"checkpoint {load!r} cannot be loaded: " + "; ".join(problems))
        self.run_id = manifest.run_id or self.run_id
        return load, manifest
