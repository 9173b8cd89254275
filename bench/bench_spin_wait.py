#!/usr/bin/env python
"""What ranks that wait in MPI cost a rank that works, on shared cores (issue 39 item 4).

Run (in a source checkout, under the quiet lock):
    flock -x /tmp/mnframe-quiet.lock .venv/bin/python bench/bench_spin_wait.py [--ranks 2,4,8]

For P ranks on this machine, rank 0 runs a fixed piece of work (one thread: a NumPy matrix
product loop) while ranks 1..P-1 wait for it in ``MPI_Recv``; rank 0 then sends to each. Printed:
rank 0's work alone (P = 1) and with P-1 waiting ranks, and the CPU a waiting rank uses (its
user + system time over the wait, as a share of one core), with MPICH's default waits (they poll
in a loop) and with ``MPIR_CVAR_CH4_PROGRESS_THROTTLE=1`` (after a run of polls that find
nothing, a wait calls usleep(1)). The ratio is the factor waiting ranks stretch a working rank by.
"""

import argparse
import json
import os
import subprocess
import sys

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
MPIEXEC = os.path.join(REPO, ".venv", "bin", "mpiexec")
THROTTLE = "MPIR_CVAR_CH4_PROGRESS_THROTTLE"

INNER = r"""
import json, os, resource, time
import numpy as np
from mpi4py import MPI
comm = MPI.COMM_WORLD
a = np.random.default_rng(0).standard_normal((256, 256)).astype(np.float32)
def work(n):
    t = time.perf_counter()
    for _ in range(n):
        a @ a
    return time.perf_counter() - t
work(20)
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
times, busy = [], []
flag = np.zeros(1)
for rep in range(int(os.environ["SPIN_REPEAT"])):
    comm.Barrier()
    if comm.rank == 0:
        times.append(work(int(os.environ["SPIN_WORK"])))
        for q in range(1, comm.size):
            comm.Send(flag, dest=q)
    else:
        c, t = cpu(), time.perf_counter()
        comm.Recv(flag, source=0)
        busy.append((cpu() - c) / (time.perf_counter() - t))
busy = comm.gather(sum(busy) / len(busy) if busy else None)
if comm.rank == 0:
    times.sort()
    waiting = [b for b in busy if b is not None]
    print(json.dumps({"ms": 1e3 * times[len(times) // 2], "waiter_cpu": sum(waiting) / len(waiting) if waiting else 0}))
"""


def run(ranks, throttle, work, repeat):
    env = dict(
        os.environ,
        OMP_NUM_THREADS="1",
        OPENBLAS_NUM_THREADS="1",
        SPIN_WORK=str(work),
        SPIN_REPEAT=str(repeat),
        MPIR_CVAR_CH3_NOLOCAL="0",
    )
    env.pop(THROTTLE, None)
    if throttle:
        env[THROTTLE] = "1"
    proc = subprocess.run(
        [MPIEXEC, "-n", str(ranks), sys.executable, "-c", INNER],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if not line:
        raise SystemExit(f"exit {proc.returncode}: {(proc.stdout + proc.stderr)[-400:]}")
    out = json.loads(line[-1])
    return out["ms"], out["waiter_cpu"]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", default="2,4,8")
    parser.add_argument("--work", type=int, default=200, help="matrix products per piece of work")
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args(argv)
    alone, _ = run(1, False, args.work, args.repeat)
    print(f"cores {len(os.sched_getaffinity(0))}; load {os.getloadavg()[0]:.1f}; rank 0's work alone: {alone:.1f} ms")
    print("ranks | default waits: work, x alone, a waiting rank's CPU | throttled: work, x alone, waiting rank's CPU")
    for p in (int(v) for v in args.ranks.split(",")):
        (spin, spin_cpu), (calm, calm_cpu) = run(p, False, args.work, args.repeat), run(p, True, args.work, args.repeat)
        print(
            f"{p:5d} | {spin:8.1f} ms {spin / alone:5.2f}x {spin_cpu:5.0%} of a core | {calm:8.1f} ms "
            f"{calm / alone:5.2f}x {calm_cpu:5.0%} of a core",
            flush=True,
        )


if __name__ == "__main__":
    main()
