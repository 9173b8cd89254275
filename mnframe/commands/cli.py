"""``python -m mnframe``: compose on rank 0, broadcast, validate everywhere, run.

    python -m mnframe [hydra options] [overrides]      train (default recipe: mnist)
    python -m mnframe recipe=X --check --world-size N  validate + print the rank graph, no MPI
        [--predict nodes=M,link=1gbit]                 + the predicted time per iteration (commands/step_time.py)
    python -m mnframe doctor                           check the MPI/CUDA set-up
    python -m mnframe evaluate RUN_DIR [key=value ...]  evaluate a trained run (mnframe.commands.evaluate)
    python -m mnframe predict RUN_DIR INPUT [...]       run a trained model on new inputs (mnframe.commands.predict)
    python -m mnframe checkpoint list|verify RUN_DIR    a run's checkpoints, checked (no MPI)

Rank 0 runs Hydra's command line (``--help``, ``--info``, ``--cfg job``,
``-m`` multirun, ``--config-dir``); for every job it composes it broadcasts
the resolved YAML and run directory to the other ranks, which wait in a
loop. Every rank then validates the same config and the ranks agree on the
verdict and the config hash before anything else communicates. Everything
runs under ``mnframe.runtime.guard.run_main`` (exit 2 on a config error on
every rank, 1 on any other failure, the whole job aborted). In a sweep
(``-m``) a job that fails with a config error on every rank is reported and
the next job runs; the exit status at the end is 2 (see ``Leader``). Rank 0
holds the run directory's lock for the job's life (``mnframe.runtime.run_lock``:
a second job there exits 2) and writes the run's ``config.yaml`` and ``.hydra/`` once the job is accepted,
or ``FAILED.txt`` in a new run directory when it is not;
before that, a dependency that does not import ends it with status 3
(``check_environment``).
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from mnframe.config.issues import ConfigError
from mnframe.runtime.errors import agreed

log = logging.getLogger("mnframe.commands.cli")

# what rank 0 broadcasts to the followers
JOB, DONE, FAILED = "job", "done", "failed"


# -- own flags (everything else goes to Hydra) -----------------------------------


def parse_own_flags(argv: Sequence[str]) -> Tuple[argparse.Namespace, List[str]]:
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--world-size", type=int, default=None)
    parser.add_argument("--has-cuda", action="store_true")
    parser.add_argument("--graph", default=None)
    parser.add_argument("--predict", default=None)
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


def run_dir_problem(run_dir: Optional[str]) -> Optional[str]:
    """Why rank 0 cannot use ``run_dir`` (None when it can): it cannot write it, or another
    job holds it (``mnframe.runtime.run_lock``; this job holds it from now on)."""
    import tempfile

    from mnframe.config.compose import run_dir_error

    if run_dir is None:
        return None
    try:
        os.makedirs(run_dir, exist_ok=True)
        with tempfile.TemporaryFile(dir=run_dir):
            pass
    except OSError as exc:
        return str(run_dir_error(exc, run_dir))
    from mnframe.runtime import run_lock
    from mnframe.runtime.safe_paths import LinkRefused, refuse_links

    try:  # written by rank 0 alone later: a planted link is refused now, by every rank together
        for name in RUN_DIR_OUTPUTS:
            refuse_links(run_dir, os.path.join(run_dir, name))
    except LinkRefused as exc:
        return str(exc)
    return run_lock.acquire(run_dir)  # one job per run directory, until run_job ends


def validate_lazily(raw, world_size, has_cuda: bool = False):
    """``mnframe.builder.validate.validate``, imported on the first call: the validator
    composition gets for the rest of a refused command line (``--help`` stays cheap)."""
    from mnframe.builder.validate import validate

    return validate(raw, world_size, has_cuda=has_cuda)


def agree_on_config(world, yaml_text: str, has_cuda: bool, run_dir: Optional[str] = None):
    """Validate on this rank (rank 0 also checks that it can write ``run_dir``) and
    share the verdict, then compare the config hashes, so every rank reaches the same
    verdict; returns (RunConfig, plain dict, hash) or raises ConfigError on every rank."""
    from mnframe.builder.validate import validate
    from mnframe.communicators.host_collectives import allgather_obj, share_verdict
    from mnframe.communicators.verdict import first
    from mnframe.config.compose import config_hash, from_yaml, to_yaml

    config = from_yaml(yaml_text)
    digest = config_hash(to_yaml(config))
    cfg, error = None, None
    try:
        cfg = validate(config, world.size, has_cuda=has_cuda)
    except ConfigError as exc:
        error = _with_resumed_layout(exc, config, run_dir, world.size)
    if world.rank == 0:
        error = "\n".join(e for e in (error, run_dir_problem(run_dir)) if e) or None
    share_verdict(world, error, "config", ConfigError, first)  # the same config: one message
    hashes = set(allgather_obj(world, digest, name="config.hash"))
    if len(hashes) > 1:  # the same set on every rank
        raise agreed(
            ConfigError(
                "the ranks hold different configurations (hashes "
                f"{sorted(h[:12] for h in hashes)}); start every rank with the same "
                "mnframe version and files"
            )
        )
    return cfg, config, digest


def _with_resumed_layout(exc: ConfigError, config, run_dir: Optional[str], world_size: int) -> str:
    """``exc``'s message; for a rank graph that does not fit the world size, with the layout of
    the checkpoint the job would resume, so it names the old layout beside the new world size."""
    text = str(exc)
    if not run_dir or not any(i.path.startswith("topology") for i in getattr(exc, "issues", ())):
        return text
    from mnframe.commands.checkpoint_inspect import newest_layout

    try:
        old = newest_layout(run_dir, config)
    except OSError:
        old = None
    if old is None:
        return text
    head, footer, tail = text.rpartition("\nFix the recipe")  # the note goes above the closing advice
    note = (
        f"\n  the run directory {run_dir} would resume from a checkpoint: {old}; "
        f"{world_size} ranks were started (give it a world size both fit)"
    )
    return head + note + footer + tail if footer else text + note


# -- the run directory's record --------------------------------------------------

RECORD_DIR = ".hydra"  # Hydra's usual place for its config.yaml, hydra.yaml, overrides.yaml
FAILED_FILE = "FAILED.txt"
# what rank 0 alone writes into the run directory (never through a link: mnframe.runtime.safe_paths)
RUN_DIR_OUTPUTS = (
    "config.yaml",
    f"{RECORD_DIR}/config.yaml",
    f"{RECORD_DIR}/hydra.yaml",
    f"{RECORD_DIR}/overrides.yaml",
    "tensorboard",
    "profile.json",
)


def record_run(run_dir: str, yaml_text: str, record: Optional[Dict[str, str]]) -> None:
    """Rank 0, once the job is accepted (config valid, checkpoint compatible):
    ``config.yaml`` and ``.hydra/`` describe the run from now on."""
    from mnframe.runtime.safe_paths import write_inside

    path = Path(run_dir)
    write_inside(run_dir, path / "config.yaml", yaml_text.encode())  # never through a planted link
    for name, text in (record or {}).items():
        write_inside(run_dir, path / RECORD_DIR / name, text.encode())
    (path / FAILED_FILE).unlink(missing_ok=True)
    log.info("run directory: %s", run_dir)


def record_failure(run_dir: str, message: str) -> None:
    """Rank 0, after a job failed with a configuration error: a new run directory says why
    in ``FAILED.txt``; one holding an earlier run (a refused resume) is left as it was."""
    from mnframe.runtime import run_lock
    from mnframe.runtime.fs import atomic_write_text

    path = Path(run_dir)
    if not path.is_dir() or (path / "config.yaml").exists() or not run_lock.owns(run_dir):
        return  # a directory another job holds is left alone too
    try:
        atomic_write_text(path / FAILED_FILE, f"configuration error: {message}\n")
    except OSError:
        pass  # an unwritable run directory is what the message is about


def run_job(world, yaml_text: str, run_dir: str, has_cuda: bool, record: Optional[Dict[str, str]] = None):
    """One job on every rank: agree on the config, then the pipeline; rank 0 records
    the configuration once the job is accepted, or why it failed."""
    from mnframe import pipeline
    from mnframe.commands.tune import objective
    from mnframe.runtime import oom

    setup_logging(world.rank, world.size)  # again: Hydra reconfigures logging on rank 0
    try:
        cfg, config, digest = agree_on_config(world, yaml_text, has_cuda, run_dir if world.rank == 0 else None)
        oom.set_config(config)  # an out-of-memory line names this job's keys
        on_start = (lambda: record_run(run_dir, yaml_text, record)) if world.rank == 0 else None
        trainer = pipeline.run(cfg, run_dir, config=config, config_hash=digest, on_start=on_start)
        return objective(cfg, trainer, world)  # a search's trial value (tune.metric), else None
    except ConfigError as exc:
        if world.rank == 0:
            record_failure(run_dir, str(exc))
        raise
    finally:
        if world.rank == 0:
            from mnframe.runtime import run_lock

            run_lock.release(run_dir)


def failed_everywhere(world, exc: ConfigError) -> bool:
    """After a job's ConfigError: did every rank fail it too (as a ConfigError must)?
    A time-limited barrier, as the guard's; False means some rank is stuck elsewhere."""
    from mnframe.runtime.guard import agree_timeout

    req = world.Ibarrier()
    deadline = time.monotonic() + (agree_timeout(exc) or float("inf"))
    while not req.Test():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def job_failed(world, exc: ConfigError) -> None:
    """A sweep goes on after a job that failed on every rank; otherwise the whole job ends."""
    if not failed_everywhere(world, exc):
        from mnframe.runtime import guard

        if guard.installed():
            guard.config_error_exit(exc)  # aborts: the other ranks did not report it
        raise exc


# -- the roles ----------------------------------------------------------------------


def _say(text: str) -> None:
    sys.stderr.write(text if text.endswith("\n") else text + "\n")
    sys.stderr.flush()


class Leader:
    """Rank 0: Hydra's command line; announces each job to the followers.

    A job that fails with a ConfigError failed on every rank (the followers wait
    for the next announcement); the error goes back to Hydra, which in a sweep
    (``-m``) records it and runs the next job, and at the end raises the first
    failure: then every rank exits 2 with a summary of the failed jobs, as
    Hydra's exit status in one process would be. Any other failure ends the
    whole MPI job at once (the guard), since the ranks may be out of step.
    """

    def __init__(self, world, has_cuda: bool):
        self.world, self.has_cuda = world, has_cuda
        self.in_job = False  # after the announcement, failures are every rank's own
        self.jobs, self.failures = 0, []  # sweep jobs run, and (label, message) of those that failed

    def task(self, job):
        _bcast(self.world, (JOB, job.yaml, job.run_dir))
        self.in_job, self.jobs = True, self.jobs + 1
        try:
            return run_job(self.world, job.yaml, job.run_dir, self.has_cuda, job.record)  # to the sweeper
        except ConfigError as exc:
            job_failed(self.world, exc)
            if job.job_num is not None:
                label = f"#{job.job_num} ({' '.join(job.overrides)})"
                self.failures.append(label)
                _say(
                    f"mnframe: sweep job {label} failed: configuration error: {exc}\n"
                    f"mnframe: going on with the next job"
                )
            raise
        except Exception as exc:
            from mnframe.runtime import guard

            if guard.installed():  # Hydra would swallow it in a sweep: end the job now
                guard.handle_uncaught(type(exc), exc, exc.__traceback__)
            raise
        finally:
            self.in_job = False

    def run(self, argv: Sequence[str]) -> None:
        from mnframe.config.compose import run_hydra
        from mnframe.runtime import run_lock

        run_lock.new_command()
        try:
            run_hydra(argv, self.task, validate=validate_lazily)
        except Exception as error:
            if not isinstance(error, ConfigError) and not (self.failures and len(self.failures) == self.jobs):
                raise  # (a sweeper that fails once every job failed, e.g. Optuna's "no completed trial", is that)
            exc = error
            if self.failures:  # the end of a sweep: its jobs' errors were shown as they failed
                exc = ConfigError(
                    f"{len(self.failures)} of {self.jobs} sweep jobs failed: "
                    f"{', '.join(self.failures)} (their errors are above)"
                )
            # compose failed, or a job did (the followers then wait for the next message)
            _bcast(self.world, (FAILED, str(exc), None))
            raise agreed(exc) from None
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
            raise agreed(ConfigError(payload))
        try:
            run_job(world, payload, run_dir, has_cuda)
        except ConfigError as exc:  # on every rank: rank 0 says whether the sweep goes on
            job_failed(world, exc)


def train(argv: Sequence[str]) -> None:
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    has_cuda = cuda_available()  # logging is set up per job (run_job): Hydra owns it until then
    if world.rank == 0:
        Leader(world, has_cuda).run(argv)
    else:
        follow(world, has_cuda)


def check(
    argv: Sequence[str],
    world_size: int,
    has_cuda: bool = False,
    graph_png: Optional[str] = None,
    predict: Optional[str] = None,
) -> str:
    """``--check``: compose and validate for ``world_size`` ranks without MPI;
    return the report (the rank graph for model parallelism; with ``predict``, the
    predicted time per iteration: ``commands/step_time.py``)."""
    from mnframe.builder.validate import validate
    from mnframe.config import topology
    from mnframe.config.compose import compose, config_dirs_from_argv
    from mnframe.config.schema import ModelParallelTopology

    spec = None
    if predict is not None:
        from mnframe.commands import step_time

        spec = step_time.parse_spec(predict, world_size)  # a bad value: one line before composing
    config = compose(_hydra_overrides(argv), config_dirs_from_argv(argv), validate=validate)
    cfg = validate(config, world_size, has_cuda=has_cuda)
    lines = [
        f"config OK for {world_size} rank(s): recipe {cfg.name!r}, "
        f"communicator {cfg.communicator.name}, topology {cfg.topology.kind}"
    ]
    if isinstance(cfg.topology, ModelParallelTopology):
        from mnframe.builder.shapes import shape_issues
        from mnframe.config.issues import raise_issues

        issues, note = shape_issues(cfg)  # a dry forward pass of one batch through every stage
        raise_issues(issues)
        lines.append(topology.describe(cfg.topology, world_size, dataset=cfg.dataset))
        lines.append(note)
        if graph_png:
            lines.append(f"graph drawn to {topology.render_png(cfg.topology, graph_png, world_size)}")
    if spec is not None:
        lines.append(step_time.report(cfg, spec, world_size))
    return "\n".join(lines)


def check_environment(argv: Sequence[str]) -> None:
    """Import what the runner needs before MPI starts; a failure is an environment
    problem: one line (which package, why, what to install), exit 3, no traceback.
    ``--check`` runs without MPI, so mpi4py is not required there."""
    from mnframe.commands import tune
    from mnframe.dependencies import RUNNER_MODULES, require
    from mnframe.runtime.errors import DependencyError, ExitStatus, say

    checking = parse_own_flags(argv)[0].check
    modules = [m for m in RUNNER_MODULES if not (checking and m.startswith("mpi4py"))]
    try:
        require(modules)
        tune.require(argv)  # tune=optuna: the Optuna sweeper plugin
    except DependencyError as exc:
        say(f"mnframe: {exc.label}: {exc}")  # on every rank: one write each
        sys.exit(int(ExitStatus.ENVIRONMENT))


def command_list() -> str:
    """Every command, one line each: the header of ``--help`` (``hydra.help.header`` of
    conf/config.yaml, the one place the list lives)."""
    from omegaconf import OmegaConf

    from mnframe.config.compose import CONF_DIR

    return OmegaConf.load(CONF_DIR / "config.yaml").hydra.help.header


def unknown_command(argv: Sequence[str]) -> Optional[str]:
    """The first word, when it reads as a command (no ``=``, not a flag) and is none of them."""
    word = argv[0] if argv else ""
    known = ("checkpoint", "doctor", *SUBCOMMANDS)
    if not re.fullmatch(r"[A-Za-z][\w-]*", word) or word in known:
        return None
    return word


MULTIRUN_FLAGS = ("-m", "--multirun", "hydra.mode=MULTIRUN")


def flags_problem(opts: argparse.Namespace, rest: Sequence[str]) -> Optional[str]:
    """Why these flags would be ignored or misreported (None when they are fine): the
    ``--check``-only flags without ``--check``, a world size below 1, ``tune=optuna`` without ``-m``,
    ``hydra/sweeper=optuna`` without ``tune=optuna`` (issue 38)."""
    if opts.world_size is not None and opts.world_size < 1:
        return f"--world-size must be a positive number of ranks (got {opts.world_size}), e.g. --world-size 4"
    if not opts.check:
        given = [
            flag
            for flag, value in (
                ("--world-size", opts.world_size),
                ("--has-cuda", opts.has_cuda),
                ("--graph", opts.graph),
                ("--predict", opts.predict),
            )
            if value
        ]
        if given:
            verb = "applies" if len(given) == 1 else "apply"
            return (
                f"{' and '.join(given)} {verb} only to --check (validate for N ranks without MPI); add --check, "
                f"or start the ranks with mpiexec -n N python -m mnframe ... to train on N ranks"
            )
    from mnframe.commands import tune

    if "hydra/sweeper=optuna" in rest and "tune=optuna" not in rest:
        return tune.WITHOUT_TUNE  # its trials would return no objective
    if not opts.check and tune.requested(rest) and not any(a in MULTIRUN_FLAGS for a in rest):
        return (
            "tune=optuna runs a search of several trials, which needs Hydra's multirun: "
            "add -m (python -m mnframe -m tune=optuna ...)"
        )
    return None


def _main(argv: Sequence[str]) -> None:
    word = unknown_command(argv)
    if word is not None:  # on every rank: one message, from rank 0, exit 2
        import difflib

        close = difflib.get_close_matches(word, ["checkpoint", "doctor", *SUBCOMMANDS], n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigError(f"unknown command {word!r}{hint}; the commands are:\n\n{command_list().rstrip()}")
    opts, rest = parse_own_flags(argv)
    problem = flags_problem(opts, rest)
    if problem:
        raise agreed(ConfigError(problem))  # the same argv on every rank: the same line
    if opts.check:
        print(check(rest, opts.world_size or 1, opts.has_cuda or cuda_available(), opts.graph, opts.predict))
        return
    train(rest)


# ``python -m mnframe <name> ...``: the module whose ``run(argv)`` runs it, under the guard
SUBCOMMANDS = {
    "evaluate": ("mnframe.commands.evaluate", "evaluate"),
    "predict": ("mnframe.commands.predict", "predict"),
}


def _subcommand(target, argv: Sequence[str]) -> None:
    """A command on a trained run (``target``: module and function), under the guard: a bad input
    exits 2 with one line on every rank."""
    import importlib

    from mpi4py import MPI

    module, name = target
    command = importlib.import_module(module)
    world = MPI.COMM_WORLD
    setup_logging(world.rank, world.size)
    getattr(command, name)(world, command.parse_args(argv), cuda_available())


def main(argv: Optional[Sequence[str]] = None) -> None:
    """Entry point of ``python -m mnframe`` and the ``mnframe`` script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["checkpoint"]:  # list/verify a run's checkpoints: no MPI
        from mnframe.commands.checkpoint_inspect import main as checkpoint_main

        sys.exit(checkpoint_main(argv[1:]))
    from mnframe.runtime import mpi_start  # ``import mnframe`` set the launcher defaults (runtime/slurm.py)

    if argv[:1] == ["doctor"]:
        from mnframe.commands.doctor import main as doctor_main

        mpi_start.report_only()  # doctor reports a launcher/MPI mismatch as a step of its own
        sys.exit(doctor_main())
    check_environment(argv)
    mpi_start.verify()  # a launcher/MPI mismatch (N lone trainings): exit 3, one line (runtime/launcher_env.py)
    from mnframe.runtime.guard import exit_quietly, run_main

    if argv[:1] and argv[0] in SUBCOMMANDS:
        exit_quietly(run_main(_subcommand, SUBCOMMANDS[argv[0]], argv[1:]))
    exit_quietly(run_main(_interrupt_is_one_line, argv))  # done: a Ctrl-C while the ranks exit is ignored


def _interrupt_is_one_line(argv: Sequence[str]) -> None:
    """A Ctrl-C outside the training loop (which turns it into a checkpoint and status 130
    itself) ends the job with status 130 and one line, not a traceback per rank."""
    try:
        _main(argv)
    except KeyboardInterrupt:
        from mnframe.runtime.errors import Interrupted

        raise Interrupted("interrupted (Ctrl-C) outside the training loop; no checkpoint was written") from None
