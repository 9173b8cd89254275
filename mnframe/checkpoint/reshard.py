"""Resume on any world size the topology fits: which old file each rank loads, checked first.

Before anything is loaded (every rank decides the same from the same manifest):

* the rank graph must be the one the checkpoint was written with (``layout.graph_digest``),
  unless ``checkpoint.allow_unsafe_config_change`` is set;
* the world size must hold the checkpoint's stages (a multiple of them, at least as many);
* at another world size, each rank loads the file of a rank of its own stage (``layout.sources``),
  so the replicas of one stage must hold the same state: the parameters and optimizer state
  of every old file of a stage with several replicas are hashed (each stage's files shared over
  the new ranks of that stage; running statistics such as BatchNormalization's are not compared,
  data-parallel replicas compute their own) and a stage whose replicas differ is refused
  on every rank (``ResumeFailed``, status 1; resuming at the old world size still works).

A refused layout or graph is a ConfigError (status 2): one line naming the old and new layouts.
"""

import hashlib
import os

from mnframe._internal.npz_read import SafeNpz, UnsafeFile
from mnframe.checkpoint import layout as layouts
from mnframe.checkpoint.manifest import outside_problem
from mnframe.checkpoint.trainer_io import is_per_rank
from mnframe.communicators import host_collectives
from mnframe.runtime.errors import ConfigError, ResumeFailed

MODEL_PREFIX, OPTIMIZER_PREFIX = "updater/model:", "updater/optimizer:"


def param_keys(trainer):
    """The archive keys of the trainer's parameters (``updater/model:<name><path>``), or None when
    its updater has no optimizers to ask. Persistent values (BatchNormalization's running
    statistics) are left out: each data-parallel replica computes its own."""
    try:
        optimizers = trainer.updater.get_all_optimizers()
    except Exception:
        return None
    return {
        f"{MODEL_PREFIX}{name}{path}"
        for name, opt in optimizers.items()
        if getattr(opt, "target", None) is not None
        for path, _ in opt.target.namedparams()
    }


def state_digest(path, params=None):
    """SHA-256 over the names, dtypes, shapes and bytes of ``path``'s optimizer arrays (not the
    per-rank ones: ``trainer_io.PER_RANK_KEYS``) and its
    parameter arrays (``params``: their keys; None, or none of them in the file: every
    ``updater/model:`` array)."""
    h = hashlib.sha256()
    with SafeNpz(path) as npz:
        model = [k for k in npz.files if k.startswith(MODEL_PREFIX)]
        chosen = [k for k in model if params is None or k in params] or model  # none named: compare all
        keys = chosen + [k for k in npz.files if k.startswith(OPTIMIZER_PREFIX) and not is_per_rank(k)]
        for key in sorted(keys):
            value = npz[key]
            h.update(f"{key}|{value.dtype.str}|{value.shape}\n".encode())
            h.update(value.tobytes())
    return h.hexdigest()


def _mine(comm, old, new):
    """{old stage: its files} of the stages with several replicas, and the files this rank hashes:
    a stage's files are shared over the new ranks of that stage (which know its parameters)."""
    stages = {}
    for fname, where in sorted(old["files"].items()):
        stages.setdefault(where["stage"], []).append(fname)
    stages = {s: files for s, files in stages.items() if len(files) > 1}
    ranks = sorted(w["rank"] for w in new["files"].values())
    mine = []
    for stage, files in stages.items():
        takers = [w["rank"] for w in new["files"].values() if w["stage"] == stage] or ranks
        takers = sorted(takers)
        if comm.rank in takers:
            mine += files[takers.index(comm.rank) :: len(takers)]
    return stages, mine


def check_replicas(comm, directory, name, manifest, new, params=None):
    """Refuse (on every rank) a checkpoint whose replicas of one stage hold different state.
    ``params``: this rank's parameter keys (``param_keys``); None: all model arrays."""
    old = layouts.layout_of(manifest)
    stages, mine = _mine(comm, old, new)
    digests, err, unsafe = {}, None, None
    for fname in mine:
        try:
            problem = outside_problem(directory, fname)
            if problem:
                unsafe = problem
                break
            digests[fname] = state_digest(os.path.join(directory, fname), params)
        except UnsafeFile as exc:
            unsafe = str(exc)
            break
        except Exception as exc:
            err = f"could not read {os.path.join(directory, fname)}: {type(exc).__name__}: {exc}"
            break
    parts = host_collectives.allgather_obj(comm, (digests, err, unsafe), name="checkpoint.replicas")
    refused = list(dict.fromkeys(u for _, _, u in parts if u))
    if refused:
        raise UnsafeFile("; ".join(refused))
    host_collectives.share_verdict(comm, err, f"checking the replicas of checkpoint {name}", ResumeFailed)
    found = {}
    for part, _, _ in parts:
        found.update(part)
    for stage, files in sorted(stages.items()):
        distinct = sorted({found[f] for f in files if f in found})
        if len(distinct) > 1:
            a = sorted(f for f in files if found.get(f) == distinct[0])
            b = sorted(f for f in files if found.get(f) != distinct[0])
            raise ResumeFailed(
                f"checkpoint {directory}: the replicas of stage {stage} hold different parameters or "
                f"optimizer state ({', '.join(a)} differ from {', '.join(b)}), so it cannot be resumed "
                f"on another world size (which replica would be right?); resume it on "
                f"{len(old['files'])} ranks, where every rank loads its own file"
            )


def plan(comm, directory, name, manifest, new, allow_unsafe=False, params=None, check=True):
    """The file this rank loads from checkpoint ``name`` and the resize note ('' at the same
    world size); raises the same error on every rank when the layouts do not fit. ``check``:
    at another world size, also run ``check_replicas`` (reads files; ``params`` as there)."""
    old, size = layouts.layout_of(manifest), len(new["files"])  # size: this run's world size
    then, now = layouts.describe(old), layouts.describe(new)
    same_graph = old.get("graph_digest") == new.get("graph_digest")
    if not same_graph and not allow_unsafe:
        raise ConfigError(
            f"checkpoint {name} was written by {then}, this run is {now}: the rank graph (topology) "
            f"changed. Restore the topology, start a new run directory, or set "
            f"checkpoint.allow_unsafe_config_change=true"
        )
    stages = old["stages"] if same_graph else new["stages"]
    problem = layouts.fit_problem(stages, size)
    if problem:
        raise ConfigError(
            f"checkpoint {name} ({then}, {manifest.world_size} ranks) cannot be resumed on {size} "
            f"ranks: {problem}; run it on a multiple of {stages} ranks (e.g. mpiexec -n {manifest.world_size})"
        )
    sources = layouts.sources(old, new)
    missing = sorted(r for r, f in sources.items() if f is None or f not in manifest.files)
    if missing:  # only after an allowed graph change
        raise ResumeFailed(
            f"checkpoint {name} ({then}) has no file for the stage of rank(s) {missing} of this run ({now})"
        )
    if manifest.world_size == size:
        return sources[comm.rank], ""
    if check:
        check_replicas(comm, directory, name, manifest, new, params)
    note = (
        f"world size {manifest.world_size} -> {size}: data re-sharded, iterators restart their epoch "
        f"(the epoch count goes on), "
        f"per-rank random states not restored"
    )
    if old["kind"] == "model_parallel" or new["kind"] == "model_parallel":
        short = f"{layouts.describe(old, graph=False)} -> {layouts.describe(new, graph=False)}"
        note += f"; {short}: each rank loaded its stage's state from a rank of that stage"
    if len(old["files"]) > old["stages"]:
        note += " (the old replicas of each stage held equal parameters)"
    return sources[comm.rank], note
