"""``--check --predict nodes=N,link=RATE[,...]``: the predicted time per iteration of the configured job.

``python -m mnframe recipe=mnist --check --world-size 8 --predict nodes=8,link=1gbit`` builds the
configured model on this process (no MPI), measures one rank's compute (forward, backward and the
update on one batch of the per-rank batch size, one BLAS thread, after a warm-up) unless
``compute_ms=`` gives it, counts the gradient bytes, and prints, for every CPU algorithm and wire
dtype, the averaging time and the step time ``training/step_model.py`` predicts, the configured
setting marked, then the configured prediction and the fastest one. Keys of ``--predict``:

    nodes=N          nodes (the world size must be a multiple: ranks per node = world size / N)
    link=RATE        each node's link, tc units: 100mbit, 1gbit, 10gbit, 25gbit
    latency_us=L     one message round between nodes (default: traffic_model's assumption)
    cores=C          cores per node (default: this machine's usable CPUs)
    shared=true      every node runs on the same C cores (the simulated cluster on one machine)
    compute_ms=T     one rank's compute per iteration, instead of measuring it
    grad_mb=M        float32 gradient megabytes, instead of building the model
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from mnframe.communicators.traffic_model import ALGORITHMS, averaging_ms, constant
from mnframe.config.issues import ConfigError
from mnframe.training.step_model import Step, cpu_share, predict_step

KEYS = ("nodes", "link", "latency_us", "cores", "shared", "compute_ms", "grad_mb")
EXAMPLE = "--predict nodes=2,link=1gbit (keys: " + ", ".join(KEYS) + ")"
_UNITS = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}
WARMUP, ITERATIONS = 3, 10
MAX_COPIES = 16  # processes measuring compute at once (shared=true); more ranks scale from there
WIRES = ((False, "float32"), (True, "float16"))


@dataclass(frozen=True)
class Spec:
    nodes: int
    rate_bps: float
    link: str
    latency_us: float
    cores: int
    shared: bool
    compute_ms: Optional[float]
    grad_bytes: Optional[float]


def link_rate(text: str) -> float:
    """Bits per second of a tc-style rate (``1gbit``, ``100mbit``, ``2.5gbit``)."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kmgt]?)bit", text.strip().lower())
    if not m or float(m.group(1)) <= 0:
        raise ValueError(f"link={text!r}: expected a rate like 1gbit, 10gbit, 100mbit")
    return float(m.group(1)) * _UNITS[m.group(2)]


def _positive(key: str, text: str, kind=float):
    try:
        value = kind(text)
    except ValueError:
        value = None
    if value is None or value <= 0:
        raise ValueError(f"{key}={text!r}: expected a positive {'integer' if kind is int else 'number'}")
    return value


def parse_spec(text: str, world_size: int) -> Spec:
    """``--predict``'s value; a ConfigError of one line naming the key when it is wrong."""
    from mnframe.runtime.threads import usable_cpus

    fields: Dict[str, str] = {}
    try:
        for item in filter(None, text.split(",")):
            key, sep, value = item.partition("=")
            key = key.strip()
            if not sep or key not in KEYS:
                raise ValueError(f"{item!r} is not one of key=value with a key of {', '.join(KEYS)}")
            fields[key] = value.strip()
        missing = [k for k in ("nodes", "link") if k not in fields]
        if missing:
            raise ValueError(f"{' and '.join(missing)} missing")
        nodes = _positive("nodes", fields["nodes"], int)
        if world_size % nodes:
            raise ValueError(
                f"--world-size {world_size} is not a multiple of nodes={nodes} (ranks per node = world size / nodes)"
            )
        shared = fields.get("shared", "false").lower()
        if shared not in ("true", "false"):
            raise ValueError(f"shared={fields['shared']!r}: expected true or false")
        return Spec(
            nodes=nodes,
            rate_bps=link_rate(fields["link"]),
            link=fields["link"],
            latency_us=float(_positive("latency_us", fields["latency_us"]))
            if "latency_us" in fields
            else constant("latency_us"),
            cores=_positive("cores", fields["cores"], int) if "cores" in fields else len(usable_cpus()),
            shared=shared == "true",
            compute_ms=_positive("compute_ms", fields["compute_ms"]) if "compute_ms" in fields else None,
            grad_bytes=_positive("grad_mb", fields["grad_mb"]) * 1e6 if "grad_mb" in fields else None,
        )
    except ValueError as exc:
        raise ConfigError(f"--predict: {exc}; e.g. {EXAMPLE}") from None


# -- the model, measured on this process ------------------------------------------


def _model_and_batch(cfg, world_size: int):
    """The data-parallel model (Classifier-wrapped as the builder does), its optimizer and one batch."""
    from chainer.dataset import concat_examples

    from mnframe._internal.targets import declared_parameters
    from mnframe.builder.data import per_rank_batch_size
    from mnframe.builder.instantiate import instantiate
    from mnframe.builder.model import COMMUNICATOR_PARAMETERS, _classifier
    from mnframe.builder.optimizer import HOOKS, OPTIMIZERS, import_target, optimizer_kwargs
    from mnframe.config.schema import Component

    if not isinstance(cfg.model, Component):
        raise ConfigError("--predict: this recipe has several models; give compute_ms= and grad_mb=")
    if declared_parameters(cfg.model.target, COMMUNICATOR_PARAMETERS):
        raise ConfigError("--predict: the model takes a communicator (needs MPI); give compute_ms= and grad_mb=")
    model = _classifier(instantiate(cfg.model, path="model"), cfg.topology.classifier)
    train, _ = instantiate(cfg.dataset.source, path="dataset.source")
    size = per_rank_batch_size(cfg.dataset, world_size)
    import chainer

    iterator = chainer.iterators.SerialIterator(train, size, repeat=True, shuffle=True)
    batch = _as_tuple(concat_examples(iterator.next()))
    oc = cfg.optimizer
    optimizer = import_target(oc.target or OPTIMIZERS[oc.name])(**optimizer_kwargs(oc))
    model(*batch)  # parameters with inferred sizes get them
    optimizer.setup(model)
    for field, make_hook in HOOKS.items():
        if getattr(oc, field) is not None:
            optimizer.add_hook(make_hook(getattr(oc, field)))
    return model, optimizer, iterator, size


def _as_tuple(batch):
    return batch if isinstance(batch, tuple) else (batch,)


def _loop_ms(model, optimizer, iterator, threads: int) -> float:
    """Median ms of forward, backward and update over ``ITERATIONS`` after ``WARMUP``."""
    from chainer.dataset import concat_examples

    from mnframe.runtime.threads import apply

    apply(threads)
    times = []
    for i in range(WARMUP + ITERATIONS):
        start = time.perf_counter()
        loss = model(*_as_tuple(concat_examples(iterator.next())))
        model.cleargrads()
        loss.backward()
        optimizer.update()
        if i >= WARMUP:
            times.append(time.perf_counter() - start)
    times.sort()
    return 1e3 * times[len(times) // 2]


def _concurrent_ms(model, optimizer, iterator, threads: int, copies: int) -> float:
    """``copies`` forked processes run the loop at once (ranks that share cores); their median."""
    import os

    pipes = []
    for _ in range(copies):
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: measure, report, leave without the parent's exit handlers
            code = 1
            try:
                os.close(read)
                os.write(write, repr(_loop_ms(model, optimizer, iterator, threads)).encode())
                code = 0
            finally:
                os._exit(code)
        os.close(write)
        pipes.append((pid, read))
    results = []
    for pid, read in pipes:
        with os.fdopen(read) as f:
            text = f.read()
        os.waitpid(pid, 0)
        if text:
            results.append(float(text))
    if not results:
        raise ConfigError("--predict: the compute measurement failed in every process; give compute_ms=")
    results.sort()
    return results[len(results) // 2]


def runner_threads(cfg, ppn: int, cores: int) -> int:
    """BLAS threads per rank as ``trainer.threads`` gives them (``runtime/threads.py``): a number as
    set, ``auto`` the cores over the ``ppn`` ranks that share them (a node's; with ``shared=true``
    every rank, all on one machine); 1 where the user's environment decides."""
    import os

    from mnframe.runtime import threads

    cpus = frozenset(range(cores))  # every rank of the node may run on every core
    planned = threads.plan(cfg.trainer.threads, True, cpus, [cpus] * ppn, dict(os.environ))
    if planned is not None:
        return planned
    chosen = threads.user_chose(dict(os.environ))  # the pools are left to the user's variable
    if chosen:
        try:
            return max(1, int(os.environ[chosen]))
        except ValueError:
            return 1
    return 1  # trainer.threads=keep


def measure(cfg, world_size: int, need_compute: bool, threads: int = 1, copies: int = 1):
    """(gradient bytes as float32, parameter arrays, compute ms per iteration or None, per-rank batch):
    ``copies`` ranks computing at once on this machine with ``threads`` BLAS threads each."""
    model, optimizer, iterator, size = _model_and_batch(cfg, world_size)
    params = [p for p in model.params() if p.array is not None]
    grad_bytes = float(sum(p.array.size for p in params) * 4)
    if not need_compute:
        return grad_bytes, len(params), None, size
    if copies <= 1:
        return grad_bytes, len(params), _loop_ms(model, optimizer, iterator, threads), size
    return grad_bytes, len(params), _concurrent_ms(model, optimizer, iterator, threads, copies), size


# -- the report ---------------------------------------------------------------------


def overlap_on(oc, spare_core: bool) -> bool:
    """Whether the job averages during backward: ``optimizer.overlap`` as set; ``auto`` is the
    trial's pick with ``optimizer.autotune`` (on where a spare core lets it hide something, in
    this model; without one the trial does not try it, and with ``autotune=all`` the two tie and
    it keeps the old default, off) and off without it (config/schema.py)."""
    if oc.overlap == "auto":
        return bool(oc.autotune) and spare_core
    return bool(oc.overlap)


def report(cfg, spec: Spec, world_size: int) -> str:
    from mnframe.config.schema import DataParallelTopology

    if not isinstance(cfg.topology, DataParallelTopology):
        raise ConfigError(
            "--predict models data-parallel jobs (gradients averaged over every rank); this recipe's "
            f"topology is {cfg.topology.kind}"
        )
    from mnframe.runtime.threads import has_spare_core, usable_cpus

    ppn = world_size // spec.nodes
    need_compute = spec.compute_ms is None
    on_cores = world_size if spec.shared else ppn
    share = cpu_share(on_cores, spec.cores)
    # the simulated cluster on this machine: measure the ranks' compute as they share its cores
    copies = min(on_cores, MAX_COPIES) if spec.shared and spec.cores == len(usable_cpus()) else 1
    threads = runner_threads(cfg, on_cores, spec.cores) if copies > 1 else 1
    arrays = 1
    if spec.grad_bytes is None or need_compute:
        grad_bytes, arrays, measured, batch = measure(cfg, world_size, need_compute, threads, copies)
        grad_bytes = spec.grad_bytes or grad_bytes
    else:
        from mnframe.builder.data import per_rank_batch_size

        grad_bytes, measured, batch = spec.grad_bytes, None, per_rank_batch_size(cfg.dataset, world_size)
    compute = spec.compute_ms if spec.compute_ms is not None else measured
    compute_share = on_cores / copies if need_compute and copies > 1 else share
    spare = has_spare_core(spec.cores, on_cores)  # as the runner's trial judges (runtime/threads.py)
    overlap = overlap_on(cfg.optimizer, spare)
    dtype = cfg.communicator.allreduce_grad_dtype
    name = cfg.communicator.name
    configured_half = {"float16": True, "auto": None}.get(dtype or "float32", False)
    where = f"{spec.cores} cores per node" + (", every node on the same cores (shared=true)" if spec.shared else "")
    if not need_compute:
        source = "given"
    elif copies > 1:
        source = f"measured: {copies} processes at once on this machine's cores, {threads} thread(s) each"
    else:
        source = f"measured: median of {ITERATIONS} iterations, 1 thread"
    lines = [
        f"predicted step time: recipe {cfg.name!r}, {spec.nodes} node(s) x {ppn} rank(s), link {spec.link}, "
        f"latency {spec.latency_us:g} us, {where}",
        f"  compute per rank: {compute:.1f} ms ({source}; batch {batch}) x {compute_share:.2f} "
        f"({on_cores} rank(s) on {spec.cores} cores) = {compute * compute_share:.1f} ms",
        f"  gradients: {grad_bytes / 1e6:.2f} MB float32 in {arrays} array(s); overlap "
        f"{'on' if overlap else 'off'}; communicator {name}, wire {dtype or 'float32'}",
        f"  {'algorithm':17s} {'wire':7s} {'link MB':>8s} {'msgs':>5s} {'wire ms':>8s} {'cpu ms':>7s} "
        f"{'avg ms':>7s} {'hidden':>7s} {'step ms':>8s} {'ex/s':>8s}",
    ]
    rows: List[Tuple[str, str, Step]] = []
    for algorithm in ALGORITHMS:
        for half, wire in WIRES:
            avg = averaging_ms(
                algorithm,
                grad_bytes,
                spec.nodes,
                ppn,
                spec.rate_bps,
                spec.latency_us,
                half,
                share,
                arrays,
                machine_cores=spec.cores if spec.shared else None,
            )
            step = predict_step(compute * compute_share, avg, overlap=overlap, spare_core=spare)
            mine = algorithm == name and configured_half in (half, None)
            rows.append((algorithm, wire, step))
            a = step.averaging
            lines.append(
                f"  {algorithm + (' *' if mine else ''):17s} {wire:7s} {a.traffic.link_bytes / 1e6:8.2f} "
                f"{a.traffic.messages:5d} {a.wire_ms:8.1f} {a.cpu_ms:7.1f} {a.total_ms:7.1f} {step.hidden_ms:7.1f} "
                f"{step.step_ms:8.1f} {step.examples_per_s(batch * world_size):8.0f}"
            )
    mine = [r for r in rows if r[0] == name and configured_half in (r[1] == "float16", None)]
    fastest = min(rows, key=lambda r: r[2].step_ms)
    if mine:
        algorithm, wire, step = min(mine, key=lambda r: r[2].step_ms)  # auto: the wire it would pick
        lines.append(
            f"predicted: {step.step_ms:.1f} ms/iteration, {step.examples_per_s(batch * world_size):.0f} examples/s "
            f"({algorithm}, {wire} wire, overlap {'on' if overlap else 'off'})"
        )
    else:
        lines.append(f"predicted: communicator {name} is not modelled (the rows are the CPU algorithms)")
    lines.append(
        f"fastest: {fastest[0]}, {fastest[1]} wire: {fastest[2].step_ms:.1f} ms/iteration "
        f"(communicator={fastest[0]} communicator.allreduce_grad_dtype={fastest[1]})"
    )
    return "\n".join(lines)
