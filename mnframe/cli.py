"""``python -m mnframe``: compose on rank 0, broadcast, validate everywhere, run.

    python -m mnframe [hydra options] [overrides]      train (default recipe: mnist)
    python -m mnframe recipe=X --check --world-size N  validate + print the rank graph, no MPI
    python -m mnframe doctor                           check the MPI/CUDA set-up

Rank 0 runs Hydra's command line (``--help``, ``--info``, ``--cfg job``,
``-m`` multirun, ``--config-dir``); for every job it composes it broadcasts
the resolved YAML and run directory to the other ranks, which wait in a
loop. Every rank then validates the same config and the ranks agree on the
verdict and the config hash before anything else communicates. Everything
runs under ``mnframe.runtime.guard.run_main`` (exit 2 on a config error on
every rank, 1 on any other failure, the whole job aborted); before that,
a dependency that does not import ends it with status 3 (``check_environment``).
"""
from __future__ import annotations

import argparse
import logging
import sys
from typing import List, Optional, Sequence, Tuple

from mnframe.config.errors import ConfigError

log = logging.getLogger("mnframe.cli")

# what rank 0 broadcasts to the followers
JOB, DONE, FAILED = "job", "done", "failed"


# -- own flags (everything else goes to Hydra) -----------------------------------

def parse_own_flags(argv: Sequence[str]) -> Tuple[argparse.Namespace, List[str]]:
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--world-size", type=int, default=None)
    parser.add_argument("--has-cuda", action="store_true")
    parser.add_argument("--graph", default=None)
    return parser.parse_known_args(list(argv))


def _hydra_overrides(argv: Sequence[str]) -> List[str]:
    """Overrides only (``--config-dir D`` and other flags removed) for ``--check``."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg in ("--config-dir", "-cd", "--config-name", "-cn", "--config-path", "-cp"):
            skip = True
            continue
        if not arg.startswith("-"):
            out.append(arg)
    return out


# -- helpers ----------------------------------------------------------------------

def cuda_available() -> bool:
    from mnframe.communicators.registry import cuda_problem

    return cuda_problem() is None


def setup_logging(rank: int, size: int) -> None:
    """Every log line carries its rank."""
    fmt = f"[%(asctime)s rank {rank}/{size}] %(levelname)s %(name)s: %(message)s"
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(fmt, "%H:%M:%S"))
    root.addHandler(handler)
    root.setLevel(logging.INFO)


def _bcast(world, message):
    from mnframe.runtime import oplog

    with oplog.op("bcast_obj", peer=0):
        return world.bcast(message, root=0)


def agree_on_config(world, yaml_text: str, has_cuda: bool):
    """Validate on this rank, then allgather (hash, error) so every rank reaches
    the same verdict; returns (RunConfig, plain dict, hash) or raises ConfigError."""
    from mnframe.config.compose import config_hash, from_yaml, to_yaml
    from mnframe.config.validate import validate
    from mnframe.runtime import oplog

    config = from_yaml(yaml_text)
    digest = config_hash(to_yaml(config))
    cfg, error = None, None
    try:
        cfg = validate(config, world.size, has_cuda=has_cuda)
    except ConfigError as exc:
        error = str(exc)
    with oplog.op("allgather_obj"):
        verdicts = world.allgather((digest, error))
    errors = [(r, e) for r, (_, e) in enumerate(verdicts) if e]
    if errors:
        raise ConfigError(errors[0][1])  # the same message on every rank
    hashes = {h for h, _ in verdicts}
    if len(hashes) > 1:
        raise ConfigError("the ranks hold different configurations (hashes "
                          f"{sorted(h[:12] for h in hashes)}); start every rank with the same "
                          "mnframe version and files")
    return cfg, config, digest


def run_job(world, yaml_text: str, run_dir: str, has_cuda: bool):
    """One job on every rank: agree on the config, then the pipeline."""
    from mnframe import pipeline

    setup_logging(world.rank, world.size)  # again: Hydra reconfigures logging on rank 0
    cfg, config, digest = agree_on_config(world, yaml_text, has_cuda)
    if world.rank == 0:
        from pathlib import Path

        Path(run_dir).mkdir(parents=True, exist_ok=True)
        (Path(run_dir) / "config.yaml").write_text(yaml_text)
        log.info("run directory: %s", run_dir)
    return pipeline.run(cfg, run_dir, config=config, config_hash=digest)


# -- the roles ----------------------------------------------------------------------

class Leader:
    """Rank 0: Hydra's command line; announces each job to the followers."""

    def __init__(self, world, has_cuda: bool):
        self.world, self.has_cuda = world, has_cuda
        self.in_job = False  # after the announcement, failures are every rank's own

    def task(self, job):
        _bcast(self.world, (JOB, job.yaml, job.run_dir))
        self.in_job = True
        run_job(self.world, job.yaml, job.run_dir, self.has_cuda)
        self.in_job = False

    def run(self, argv: Sequence[str]) -> None:
        from mnframe.config.compose import run_hydra

        try:
            run_hydra(argv, self.task)
        except ConfigError as exc:
            if not self.in_job:  # compose failed: the followers learn it from us
                _bcast(self.world, (FAILED, str(exc), None))
            raise
        except SystemExit as exc:  # e.g. Hydra's usage error
            if not self.in_job:
                code = exc.code if isinstance(exc.code, int) else 2
                if code:
                    _bcast(self.world, (FAILED, f"hydra exited with status {code}", None))
                else:
                    _bcast(self.world, (DONE, None, None))
            raise
        _bcast(self.world, (DONE, None, None))


def follow(world, has_cuda: bool) -> None:
    """Ranks > 0: run each job rank 0 announces, until it says done."""
    while True:
        kind, payload, run_dir = _bcast(world, None)
        if kind == DONE:
            return
        if kind == FAILED:
            raise ConfigError(payload)
        run_job(world, payload, run_dir, has_cuda)


def train(argv: Sequence[str]) -> None:
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    has_cuda = cuda_available()  # logging is set up per job (run_job): Hydra owns it until then
    if world.rank == 0:
        Leader(world, has_cuda).run(argv)
    else:
        follow(world, has_cuda)


def check(argv: Sequence[str], world_size: int, has_cuda: bool = False,
          graph_png: Optional[str] = None) -> str:
    """``--check``: compose and validate for ``world_size`` ranks without MPI;
    return the report (the rank graph for model parallelism)."""
    from mnframe.config import topology
    from mnframe.config.compose import compose, config_dirs_from_argv
    from mnframe.config.schema import ModelParallelTopology
    from mnframe.config.validate import validate

    config = compose(_hydra_overrides(argv), config_dirs_from_argv(argv))
    cfg = validate(config, world_size, has_cuda=has_cuda)
    lines = [f"config OK for {world_size} rank(s): recipe {cfg.name!r}, "
             f"communicator {cfg.communicator.name}, topology {cfg.topology.kind}"]
    if isinstance(cfg.topology, ModelParallelTopology):
        lines.append(topology.describe(cfg.topology, world_size))
        if graph_png:
            lines.append(f"graph drawn to {topology.render_png(cfg.topology, graph_png)}")
    return "\n".join(lines)


def check_environment(argv: Sequence[str]) -> None:
    """Import what the runner needs before MPI starts; a failure is an environment
    problem: one line (which package, why, what to install), exit 3, no traceback.
    ``--check`` runs without MPI, so mpi4py is not required there."""
    from mnframe.dependencies import RUNNER_MODULES, require
    from mnframe.runtime.errors import DependencyError, ExitStatus

    checking = parse_own_flags(argv)[0].check
    modules = [m for m in RUNNER_MODULES if not (checking and m.startswith("mpi4py"))]
    try:
        require(modules)
    except DependencyError as exc:
        print(f"mnframe: {exc.label}: {exc}", file=sys.stderr)
        sys.exit(int(ExitStatus.ENVIRONMENT))


def _main(argv: Sequence[str]) -> None:
    opts, rest = parse_own_flags(argv)
    if opts.check:
        print(check(rest, opts.world_size or 1, opts.has_cuda or cuda_available(), opts.graph))
        return
    train(rest)


def main(argv: Optional[Sequence[str]] = None) -> None:
    """Entry point of ``python -m mnframe`` and the ``mnframe`` script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["doctor"]:
        from mnframe.doctor import main as doctor_main

        sys.exit(doctor_main(argv[1:]))
    check_environment(argv)
    try:
        from mnframe.runtime.guard import run_main
    except ImportError:  # pragma: no cover - the runtime area not there yet
        _main(argv)
        return
    sys.exit(run_main(_main, argv))
