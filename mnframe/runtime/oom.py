"""Out of memory as one line: what was being allocated, its size, and the keys that shrink it.

A ``MemoryError`` (NumPy's "Unable to allocate 373. GiB ...", CuPy's out-of-memory) would
end a rank with a long traceback that names no setting. ``describe`` reads the traceback to
tell what was being allocated (``WHAT``: the first rule whose code is on the stack) and
names the configuration keys that shrink it, with their values in this job (``set_config``,
called by the runner once the ranks agreed on the configuration). The guard prints that
line on every rank that ran out of memory and ends the job with status 1.
"""

import os
from typing import Any, Dict, List, Optional

# (code on the stack, what it allocates, the keys that shrink it); the first match wins.
# {model} stands for the model's numeric keys in this job (model.n_units=1000, ...).
WHAT = (
    (
        os.path.join("mnframe", "communicators", ""),
        "a communication buffer",
        "communicator.allreduce_grad_dtype=float16 (half the buffer), communicator.batched_copy=false, {model}",
    ),
    (os.path.join("chainer", "optimizer"), "the optimizer's state", "optimizer.name (sgd keeps no state), {model}"),
    (os.path.join("mnframe", "builder", "model.py"), "the model's parameters", "{model}"),
    (os.path.join("mnframe", "builder", "data.py"), "the dataset", "the dataset's keys (dataset.source.*)"),
    (os.path.join("chainer", "training", ""), "a batch (activations and gradients)", "dataset.batch_size, {model}"),
)

_job: Dict[str, Any] = {"config": None}


def set_config(config: Optional[Dict[str, Any]]) -> None:
    """The job's configuration (plain dict), for the keys the line names."""
    _job["config"] = config


def model_keys(config: Optional[Dict[str, Any]] = None) -> str:
    """'model.n_units=1000, model.width=0.25': the numeric keys under ``model`` (or 'the model.* keys')."""
    section = (config or _job["config"] or {}).get("model")
    found: List[str] = []

    def walk(node, prefix):
        if isinstance(node, dict):
            for key, value in node.items():
                if not str(key).startswith("_"):
                    walk(value, f"{prefix}.{key}")
        elif isinstance(node, (int, float)) and not isinstance(node, bool):
            found.append(f"{prefix}={node}")

    walk(section, "model")
    return ", ".join(found) if found else "the model's size keys (model.*)"


def size_of(exc: BaseException) -> str:
    """'373.0 GiB (shape (100000000000,), float32)' from NumPy's error, or 'size unknown'."""
    from mnframe.runtime.sizes import human_bytes

    total = getattr(exc, "_total_size", None)  # numpy's _ArrayMemoryError
    if total is None:
        return "size unknown"
    shape, dtype = getattr(exc, "shape", None), getattr(exc, "dtype", None)
    detail = f" (shape {tuple(shape)}, {dtype})" if shape is not None and dtype is not None else ""
    return f"{human_bytes(total)}{detail}"


def what_of(tb) -> tuple:
    """(what was being allocated, the keys that shrink it) from the traceback ``tb``."""
    files = []
    while tb is not None:
        files.append(tb.tb_frame.f_code.co_filename)
        tb = tb.tb_next
    for part, what, keys in WHAT:
        if any(part in f for f in files):
            return what, keys.format(model=model_keys())
    return "memory", f"dataset.batch_size, {model_keys()}"


def describe(exc: BaseException, tb, where: str) -> str:
    """The one line for a MemoryError on this rank (``where``: 'rank R/N on host H (pid P)')."""
    what, keys = what_of(tb)
    return (
        f"mnframe: out of memory on {where} allocating {what}: {size_of(exc)}; "
        f"to need less memory per rank, lower {keys} (or run fewer ranks per node)"
    )
