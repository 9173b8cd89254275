"""``python -m mnframe predict RUN_DIR INPUT [--out FILE] [--checkpoint NAME] [--batch-size N] [--trust-config]
[key=value ...]``

Runs a trained run's model (rebuilt as ``mnframe.commands.trained`` does) on new inputs:

* ``.npz``: the array ``x`` (or the only array), optional ``ids``;
* ``.csv``: one example per row, numbers; an optional header row, where a column
  named ``id`` gives the ids;
* a folder of images (``.png``, ``.jpg``, ...; Pillow, the ``recipes`` extra), for the
  image recipes: each image is resized to the recipe's input size and scaled to [0, 1]
  (ids: the file names, sorted).

Rows are reshaped to the shape of the recipe's own examples when their size matches
(a flat CSV row of 3072 values for cifar's 3x32x32). Ids default to the row numbers.
Each data-parallel rank runs a contiguous shard (in model parallelism every rank of a
model group runs the same shard, receive-only ranks on empty inputs, and the ranks
whose last stage ends the chain hold the outputs). Rank 0 gathers the outputs in input
order and writes ``--out`` (default ``RUN_DIR/predict/<input name>.npz``): ``.npz`` with
``ids``, ``y`` (the model's outputs) and, for a classifier's scores, ``label`` (the
argmax); ``.csv`` with the columns ``id``, ``label``, ``y_0``, ``y_1``, ...
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import sys
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

from mnframe.commands.evaluate import _Parser
from mnframe.runtime.errors import ConfigError
from mnframe.runtime.safe_paths import write_inside

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff")
OUT_SUFFIXES = (".npz", ".csv")


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = _Parser(prog="mnframe predict", add_help=False, allow_abbrev=False)
    parser.add_argument("run_dir")
    parser.add_argument("input")
    parser.add_argument("overrides", nargs="*", metavar="key=value")
    parser.add_argument("--out", default=None, metavar="FILE.npz|FILE.csv")
    parser.add_argument("--checkpoint", default=None, metavar="NAME|last")
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--trust-config", action="store_true")  # import what config.yaml names (config/trust.py)
    args = parser.parse_intermixed_args(list(argv))
    if args.batch_size is not None and args.batch_size < 1:
        raise ConfigError(f"--batch-size: must be a positive number of examples (got {args.batch_size})")
    if args.out is not None and not args.out.endswith(OUT_SUFFIXES):
        raise ConfigError(f"--out {args.out}: name a .npz or .csv file")
    return args


# -- inputs ------------------------------------------------------------------------


def read_npz(path: str) -> Tuple[Optional[np.ndarray], np.ndarray]:
    from mnframe._internal.npz_read import load_arrays

    arrays = load_arrays(path, what=".npz of inputs: an array x (and optionally ids)")
    data = [k for k in arrays if k != "ids"]
    key = "x" if "x" in arrays else (data[0] if len(data) == 1 else None)
    if key is None:
        raise ConfigError(
            f"{path} holds {', '.join(sorted(arrays)) or 'nothing'}: put the inputs in an array named x "
            f"(and optionally their ids in ids)"
        )
    return arrays.get("ids"), arrays[key]


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def read_csv(path: str) -> Tuple[Optional[np.ndarray], np.ndarray]:
    with open(path, newline="") as f:
        rows = [r for r in csv.reader(f) if r]
    if not rows:
        raise ConfigError(f"{path} is empty: expected one example per row")
    header = None if all(_is_number(c) for c in rows[0]) else [c.strip() for c in rows[0]]
    body = rows[1:] if header else rows
    id_col = header.index("id") if header and "id" in header else None
    ids = np.array([r[id_col] for r in body]) if id_col is not None else None
    try:
        x = np.array([[float(c) for i, c in enumerate(r) if i != id_col] for r in body], dtype=np.float32)
    except ValueError as exc:
        raise ConfigError(f"{path}: every value but the id column must be a number ({exc})") from None
    return ids, x


def read_images(path: str, example_shape: Tuple[int, ...]) -> Tuple[np.ndarray, np.ndarray]:
    from mnframe.dependencies import require

    require(["PIL.Image"])  # DependencyError: exit 3, "fix: pip install Pillow"
    from PIL import Image

    names = sorted(n for n in os.listdir(path) if n.lower().endswith(IMAGE_SUFFIXES))
    if not names:
        raise ConfigError(f"{path} holds no images ({', '.join(IMAGE_SUFFIXES)})")
    if len(example_shape) != 3 or example_shape[0] not in (1, 3):
        raise ConfigError(
            f"{path} is an image folder, but this recipe's examples have shape {example_shape}, not "
            f"(channels, height, width): give an .npz or .csv"
        )
    channels, height, width = example_shape
    images = []
    for name in names:
        try:
            with Image.open(os.path.join(path, name)) as image:
                image = image.convert("RGB" if channels == 3 else "L").resize((width, height))
                array = np.asarray(image, dtype=np.float32) / 255.0
        except Exception as exc:
            raise ConfigError(f"{os.path.join(path, name)} cannot be read as an image ({exc})") from None
        images.append(array.transpose(2, 0, 1) if channels == 3 else array[None])
    return np.array(names), np.stack(images)


def read_inputs(path: str, example: Any) -> Tuple[np.ndarray, np.ndarray]:
    """(ids, x) of ``path``; ``example`` is one input of the recipe's own data (its shape and dtype)."""
    shape = tuple(np.shape(example))
    if os.path.isdir(path):
        ids, x = read_images(path, shape)
    elif not os.path.isfile(path):
        raise ConfigError(f"input {path} does not exist: give an .npz, a .csv or a folder of images")
    elif path.endswith(".npz"):
        ids, x = read_npz(path)
    elif path.endswith(".csv"):
        ids, x = read_csv(path)
    else:
        raise ConfigError(f"input {path}: give an .npz, a .csv or a folder of images")
    if x.ndim == 0 or len(x) == 0:
        raise ConfigError(f"input {path} holds no examples")
    if x.shape[1:] != shape and int(np.prod(x.shape[1:])) == int(np.prod(shape)):
        x = x.reshape((len(x),) + shape)
    if x.shape[1:] != shape:
        raise ConfigError(
            f"input {path}: each example has shape {x.shape[1:]}, but the model takes {shape} "
            f"(the shape of the recipe's own examples)"
        )
    x = x.astype(np.asarray(example).dtype, copy=False)
    if ids is None:
        ids = np.arange(len(x))
    if len(ids) != len(x):
        raise ConfigError(f"input {path}: {len(ids)} ids for {len(x)} examples")
    return ids, x


# -- running ----------------------------------------------------------------------


def holds_outputs(plan) -> bool:
    """Whether this rank's model call returns the model's output (always, for data parallelism)."""
    return plan is None or plan.stages[-1].rank_out is None


def forward(predictor, x: Optional[np.ndarray], n: int, batch_size: int, device, output: bool) -> Optional[np.ndarray]:
    """``predictor`` over ``n`` examples in batches (``x`` None: a receive-only rank)."""
    import chainer

    outputs: List[np.ndarray] = []
    cpu = chainer.backend.CpuDevice()
    with chainer.using_config("train", False), chainer.no_backprop_mode():
        for begin in range(0, n, batch_size):
            if x is None:
                y = predictor()
            else:
                y = predictor(device.send(x[begin : begin + batch_size]))
            if output:
                outputs.append(np.asarray(cpu.send(y.array)))
    if not output:
        return None
    return np.concatenate(outputs) if outputs else None


def write(path: str, ids: np.ndarray, y: np.ndarray, base: Optional[str] = None) -> None:
    """Publish the outputs as ``path`` (atomically: an interruption never leaves half a file),
    never through a link inside ``base`` (the run directory; ``mnframe.runtime.fs.write_inside``)."""
    label = y.argmax(axis=1) if y.ndim == 2 and y.shape[1] > 1 and y.dtype.kind == "f" else None
    path = os.path.abspath(path)
    write_inside(base or os.path.dirname(path), path, _table(path.endswith(".csv"), ids, y, label))


def _table(as_csv, ids, y, label) -> bytes:
    if as_csv:
        flat = y.reshape(len(y), -1)
        f = io.StringIO(newline="")
        writer = csv.writer(f)
        writer.writerow(["id"] + (["label"] if label is not None else []) + [f"y_{i}" for i in range(flat.shape[1])])
        for i in range(len(y)):
            writer.writerow(
                [ids[i]] + ([int(label[i])] if label is not None else []) + [repr(float(v)) for v in flat[i]]
            )
        return f.getvalue().encode()
    arrays = {"ids": ids, "y": y}
    if label is not None:
        arrays["label"] = label
    f = io.BytesIO()
    np.savez(f, **arrays)
    return f.getvalue()


def predict(world, args: argparse.Namespace, has_cuda: bool) -> Optional[str]:
    """Predict on every rank; rank 0 writes the file and returns its path."""
    from mnframe.commands.evaluate import check_output, split_of
    from mnframe.commands.trained import open_run, shard_bounds
    from mnframe.communicators.host_collectives import allgather_obj, share_verdict
    from mnframe.communicators.verdict import first

    run_dir = os.path.abspath(args.run_dir)
    stem = os.path.splitext(os.path.basename(os.path.normpath(args.input)))[0]
    out = os.path.abspath(args.out or os.path.join(run_dir, "predict", f"{stem}.npz"))
    check_output(world, run_dir, out)  # a linked predict/ or output file: refused before any work
    trained = open_run(world, args, has_cuda, "predict")
    cfg, comms = trained.cfg, trained.comms
    example = split_of(cfg, comms.world, "test")[0]
    example = example[0] if isinstance(example, tuple) else example
    ids = x = error = None
    try:
        ids, x = read_inputs(os.path.abspath(args.input), example)
    except ConfigError as exc:
        error = str(exc)
    share_verdict(comms.world, error, "predict.inputs", ConfigError, first)  # the first rank's error, one line
    begin, end = shard_bounds(len(x), comms.data)
    receive_only = trained.plan is not None and trained.plan.dataset == "empty"
    batch = args.batch_size or cfg.dataset.test_batch_size or cfg.dataset.batch_size
    output = holds_outputs(trained.plan)
    y = forward(
        trained.user["main"], None if receive_only else x[begin:end], end - begin, batch, trained.device, output
    )
    parts = allgather_obj(comms.world, (begin, y) if output else None, name="predict.allgather_obj")
    if comms.world.rank != 0:
        return None
    shards = {b: part for b, part in (p for p in parts if p is not None) if part is not None}
    y = np.concatenate([shards[b] for b in sorted(shards)])
    if len(y) != len(x):  # cannot happen: every example is in exactly one shard
        raise RuntimeError(f"predict gathered {len(y)} outputs for {len(x)} inputs")
    write(out, ids, y, base=run_dir)
    print(f"predicted {len(y)} example(s) of {args.input} with {run_dir} ({trained.source}): written to {out}")
    sys.stdout.flush()
    return out
