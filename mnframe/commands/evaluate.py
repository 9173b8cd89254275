"""``python -m mnframe evaluate RUN_DIR [--checkpoint NAME] [--split test|train] [--out DIR] [--trust-config]
[key=value ...]``

Evaluates a finished or interrupted run on its validation data (or on the data the
``key=value`` overrides of its ``config.yaml`` name, e.g. ``dataset.source.path=...``).
The model is rebuilt from the run's config with its ``model*.npz`` (or the checkpoint
named, ``last`` for the newest; the newest is also used when the run exported no
model). Data parallel: each data-parallel rank takes a contiguous shard of the split
(every example exactly once, no padding), runs the model with ``train=False``, and sums
each reported metric times its batch size; the sums and counts are gathered, so the
metrics are example-weighted means over the whole split, whatever the number of ranks.
Model-parallel recipes run as in training (receive-only ranks on an empty dataset).
Rank 0 writes ``eval/metrics.json`` in the run directory (never through a link) and prints a table.
A config naming ``_target_``s outside mnframe and its recipes is refused unless
``--trust-config`` (``mnframe.config.trust``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Dict, List, Optional, Sequence, Tuple

from mnframe.runtime.errors import ConfigError
from mnframe.runtime.safe_paths import LinkRefused, open_dir, refuse_links, write_inside

SPLITS = ("test", "train")
PREFIX = "validation/"  # the metric names of training's evaluator (validation/main/accuracy, ...)


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2 on every rank (no usage dump from each rank)
        raise ConfigError(f"{self.prog}: {message}; usage: {self.format_usage().strip()[7:]}")


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = _Parser(prog="mnframe evaluate", add_help=False, allow_abbrev=False)
    parser.add_argument("run_dir")
    parser.add_argument("overrides", nargs="*", metavar="key=value")
    parser.add_argument("--checkpoint", default=None, metavar="NAME|last")
    parser.add_argument("--split", default="test", choices=SPLITS)
    parser.add_argument("--out", default=None, metavar="DIR")
    parser.add_argument("--trust-config", action="store_true")  # import what config.yaml names (config/trust.py)
    return parser.parse_intermixed_args(list(argv))


def check_output(world, run_dir: str, out: str) -> None:
    """Before any work: rank 0 makes sure ``out`` can be written without following a link
    (its directory inside ``run_dir`` created component by component, ``out`` itself not a
    link); every rank raises the same ``LinkRefused`` (status 2) otherwise."""
    from mnframe.communicators.host_collectives import share_verdict
    from mnframe.communicators.verdict import first

    error = None
    if world.rank == 0:
        try:
            refuse_links(run_dir, out)
            os.close(open_dir(run_dir, os.path.dirname(out), create=True))
        except LinkRefused as exc:
            error = str(exc)
        except OSError as exc:
            error = f"cannot write {out}: {exc}"
    share_verdict(world, error, "output", LinkRefused, first)


def split_of(cfg, world, split: str):
    """The dataset of ``split`` as the run's ``dataset.source`` returns it (every rank loads it)."""
    from mnframe.builder.data import _load

    train, test = _load(cfg.dataset, world)
    data = test if split == "test" else train
    if data is None or len(data) == 0:
        raise ConfigError(f"--split {split}: dataset.source returns no {split} data for this run; try the other split")
    return data


def run_batches(model, dataset, batch_size: int, device) -> Tuple[Dict[str, float], Dict[str, int]]:
    """Sum of every reported value times its batch size, and the examples behind each sum."""
    import chainer
    from chainer.dataset import concat_examples

    reporter = chainer.Reporter()
    reporter.add_observer("main", model)
    reporter.add_observers("main", model.namedlinks(skipself=True))
    sums: Dict[str, float] = {}
    counts: Dict[str, int] = {}
    with reporter, chainer.using_config("train", False), chainer.no_backprop_mode():
        for begin in range(0, len(dataset), batch_size):
            batch = [dataset[i] for i in range(begin, min(begin + batch_size, len(dataset)))]
            arrays = concat_examples(batch, device)
            observation: Dict[str, float] = {}
            with reporter.scope(observation):
                if isinstance(arrays, tuple):
                    model(*arrays)
                elif isinstance(arrays, dict):
                    model(**arrays)
                else:
                    model(arrays)
            for key, value in observation.items():
                value = float(chainer.backend.CpuDevice().send(getattr(value, "array", value)))
                sums[key] = sums.get(key, 0.0) + value * len(batch)
                counts[key] = counts.get(key, 0) + len(batch)
    return sums, counts


def weighted_means(parts: List[Tuple[Dict[str, float], Dict[str, int]]]) -> Dict[str, float]:
    """Example-weighted means of every rank's (sums, counts)."""
    sums: Dict[str, float] = {}
    counts: Dict[str, int] = {}
    for part_sums, part_counts in parts:
        for key, value in part_sums.items():
            sums[key] = sums.get(key, 0.0) + value
            counts[key] = counts.get(key, 0) + part_counts[key]
    return {PREFIX + key: sums[key] / counts[key] for key in sorted(sums) if counts[key]}


def table(metrics: Dict[str, float]) -> str:
    width = max([len("metric")] + [len(k) for k in metrics])
    rows = [f"{'metric':<{width}}  value"] + [f"{k:<{width}}  {v:.6g}" for k, v in metrics.items()]
    return "\n".join(rows)


def evaluate(world, args: argparse.Namespace, has_cuda: bool) -> Optional[Dict]:
    """Evaluate on every rank; rank 0 returns the record it wrote (None elsewhere)."""
    import chainer

    from mnframe.builder.data import per_rank_batch_size
    from mnframe.commands.trained import open_run, shard_bounds
    from mnframe.communicators.host_collectives import allgather_obj
    from mnframe.datasets.empty import create_empty_dataset

    run_dir = os.path.abspath(args.run_dir)
    out = os.path.join(os.path.abspath(args.out or os.path.join(run_dir, "eval")), "metrics.json")
    check_output(world, run_dir, out)
    trained = open_run(world, args, has_cuda, "evaluate")
    cfg, comms = trained.cfg, trained.comms
    data = split_of(cfg, comms.world, args.split)
    begin, end = shard_bounds(len(data), comms.data)
    shard = chainer.datasets.SubDataset(data, begin, end)
    if trained.plan is not None and trained.plan.dataset == "empty":
        shard = create_empty_dataset(shard)
    batch = cfg.dataset.test_batch_size or per_rank_batch_size(cfg.dataset, comms.data.size)
    part = run_batches(trained.models["main"], shard, batch, trained.device)
    parts = allgather_obj(comms.world, part, name="evaluate.allgather_obj")
    if comms.world.rank != 0:
        return None
    metrics = weighted_means(parts)
    record = {
        "run_dir": run_dir,
        "split": args.split,
        "examples": len(data),
        "ranks": comms.world.size,
        "weights": trained.source,
        "overrides": list(args.overrides),
        "metrics": metrics,
    }
    write_inside(run_dir, out, (json.dumps(record, indent=2) + "\n").encode())  # never through a link
    print(
        f"evaluated {run_dir} ({trained.source}) on {len(data)} {args.split} examples, "
        f"{comms.world.size} rank(s):\n{table(metrics)}\nwritten to {out}"
    )
    sys.stdout.flush()
    return record
