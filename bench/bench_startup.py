#!/usr/bin/env python
"""Start-up cost: mpiexec to the first finished iteration, mnframe vs the plain ChainerMN script (issue 8, target 4).

Runs the mnist workload of bench_e2e.py (``python -m mnframe recipe=mnist`` and
bench/peer/train_mnist.py) for two iterations, alternately, ``--repeat`` times,
and reports the medians of the time from just before ``mpiexec`` starts to the
end of the first iteration on rank 0, plus the whole run's wall time. It also
measures what ``import mnframe`` costs (``python -X importtime``) next to a
bare interpreter and ``import chainermn``, and lists the heaviest modules
``import mnframe`` pulls in.

Verdict: PASS when mnframe's first iteration comes at most ``--max-diff``
seconds (default 1.5) after the peer's, and ``import mnframe`` stays under
``--max-import`` seconds (default 0.5).

    python bench/bench_startup.py            # full (5 repetitions on 2 ranks)
    python bench/bench_startup.py --small    # quick correctness mode (CI)
"""

import argparse
import dataclasses
import os
import re
import statistics
import subprocess
import sys
import tempfile

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, REPO)

from bench.bench_e2e import SMALL, mnist_commands, run_side  # noqa: E402

_IMPORTTIME = re.compile(r"import time:\s+(\d+)\s+\|\s+(\d+)\s+\|(\s*)(\S+)")


def import_profile(statement, runs):
    """(median wall seconds of ``python -c statement``, {module: cumulative s} of the last run)."""
    walls, modules = [], {}
    for _ in range(runs):
        proc = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", statement],
            cwd=REPO,
            capture_output=True,
            text=True,
            env=dict(os.environ, PYTHONPATH=REPO),
        )
        if proc.returncode != 0:
            raise RuntimeError(f"python -c {statement!r} failed:\n{proc.stderr[-2000:]}")
        modules = {}
        for match in _IMPORTTIME.finditer(proc.stderr):
            modules[match.group(4)] = int(match.group(2)) / 1e6
        # top-level imports only (indentation 1) add up to the statement's import cost
        top = [int(m.group(2)) for m in _IMPORTTIME.finditer(proc.stderr) if len(m.group(3)) == 1]
        walls.append(sum(top) / 1e6)
    return statistics.median(walls), modules


def _heaviest(modules, baseline, n=6):
    """Modules imported by the statement but not by a bare interpreter, heaviest first."""
    extra = {m: t for m, t in modules.items() if m not in baseline and "." not in m}
    return sorted(extra.items(), key=lambda kv: -kv[1])[:n]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="one repetition, tiny model: checks that both sides run")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=None, help="runs per side (default 5, 1 with --small)")
    parser.add_argument("--max-diff", type=float, default=1.5, help="allowed extra seconds to the first iteration")
    parser.add_argument("--max-import", type=float, default=0.5, help="allowed seconds for `import mnframe`")
    parser.add_argument("--timeout", type=float, default=180)
    args = parser.parse_args(argv)
    repeat = args.repeat or (1 if args.small else 5)

    workload = dataclasses.replace(SMALL["mnist"], iterations=2, warmup=0)
    tmp = tempfile.mkdtemp(prefix="bench_startup_")
    results = {"mnframe": [], "peer": []}
    errors = {}
    for rep in range(repeat):
        mn_argv, peer_argv = mnist_commands(workload, os.path.join(tmp, f"r{rep}"))
        order = (("mnframe", mn_argv), ("peer", peer_argv))
        for side, cmd in order if rep % 2 == 0 else order[::-1]:
            result, error = run_side(cmd, args.ranks, args.timeout)
            if error:
                errors[side] = error
            else:
                results[side].append(result)

    def med(side, key):
        values = [r[key] for r in results[side] if r.get(key) is not None]
        return statistics.median(values) if values else None

    runs = 1 if args.small else 5
    bare, bare_modules = import_profile("pass", runs)
    mn_import, mn_modules = import_profile("import mnframe", runs)
    peer_import, _ = import_profile("import bench.peer.numpy2, chainermn", runs)  # the shim: NumPy 2 only
    mn_import, peer_import = mn_import - bare, peer_import - bare  # what the statement adds

    print("| side | first iteration (s) | whole run (s) | runs |\n|---|---|---|---|")
    for side in ("mnframe", "peer"):
        first, wall = med(side, "first_iteration_s"), med(side, "wall_s")
        print(
            f"| {side} | {'-' if first is None else f'{first:.2f}'} | {'-' if wall is None else f'{wall:.2f}'} "
            f"| {len(results[side])} |"
        )
    first_mn, first_peer = med("mnframe", "first_iteration_s"), med("peer", "first_iteration_s")
    diff = None if first_mn is None or first_peer is None else first_mn - first_peer
    print(
        f"\nmpiexec -n {args.ranks} -> first iteration: mnframe - peer = "
        f"{'n/a' if diff is None else f'{diff:+.2f} s'} (allowed +{args.max_diff:.2f} s)"
    )
    print(
        f"import cost (python -X importtime, top-level imports beyond a bare interpreter's {bare:.3f} s): "
        f"`import mnframe` {mn_import:.3f} s, `import chainermn` (peer) {peer_import:.3f} s"
    )
    heavy = ", ".join(f"{m} {t:.3f}s" for m, t in _heaviest(mn_modules, bare_modules)) or "none"
    print(f"heaviest packages pulled in by `import mnframe`: {heavy}")
    for side, error in errors.items():
        print(f"- {side}: {error}")
    ok = diff is not None and diff <= args.max_diff and mn_import <= args.max_import
    print(f"verdict: {'PASS' if ok else ('n/a' if diff is None else 'FAIL')}")
    if args.small:
        return 1 if errors else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
