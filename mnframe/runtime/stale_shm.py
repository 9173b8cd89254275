"""Remove the MPICH shared memory that an earlier attempt of a requeued Slurm job left on a node.

MPICH (the mpich wheel's 5.0.2; ``MPL_initshm_open`` in its source) names a node's shared-memory
segments ``/dev/shm/mpich_shm_<id>_<node>`` and ``mpich_vci_<id>_<node>``, where ``id`` is the
32-bit FNV-1a hash of the PMI job name; under Slurm's pmi2 that name is ``JOBID.STEPID``
(``PMI_JOBID``). The first rank of a node to start creates the segment, the others open it; a
normal end removes it. Ranks that are killed (a node of the job died, the job was requeued) leave
it behind, and a requeued job keeps its job id and numbers its steps from 0 again: its step opens
the dead attempt's segment, no rank creates a fresh one, and every rank spins in ``MPI_Init``
(still there after 3 minutes: docs/multi_node.md, "A lost node"). ``examples/slurm/train.sbatch``
runs ``python -m mnframe.runtime.stale_shm JOBID`` on each node of a requeued attempt before its
first MPI step; it removes only segments named after that job's steps, so other jobs on a shared
node are untouched.
"""

import os
import re
import socket
import sys

from mnframe.runtime.errors import say

SHM_DIR = "/dev/shm"
MAX_STEPS = 4096  # step ids looked for: far more steps than one attempt of a job runs
_NAME = re.compile(r"^mpich_(shm|vci)_([0-9a-f]+)_(\d+)$")


def world_id(pmi_job: str) -> int:
    """MPICH's id for a PMI job name (HASH_FNV: 32-bit FNV-1a of its bytes)."""
    value = 2166136261
    for byte in pmi_job.encode():
        value = ((value ^ byte) * 16777619) & 0xFFFFFFFF
    return value


def job_segments(job_id: str, names, max_steps: int = MAX_STEPS) -> list:
    """The entries of ``names`` that are MPICH segments of a step of Slurm job ``job_id``."""
    ids = {world_id(f"{job_id}.{step}") for step in range(max_steps)}
    return sorted(n for n in names if (m := _NAME.match(n)) and int(m.group(2), 16) in ids)


def remove(job_id: str, shm_dir: str = SHM_DIR) -> list:
    """Remove job ``job_id``'s segments from ``shm_dir``; the names removed."""
    try:
        names = os.listdir(shm_dir)
    except OSError:
        return []
    gone = []
    for name in job_segments(job_id, names):
        try:
            os.unlink(os.path.join(shm_dir, name))
            gone.append(name)
        except FileNotFoundError:
            pass
    return gone


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or not argv[0].isdigit():
        sys.stderr.write(
            "usage: python -m mnframe.runtime.stale_shm SLURM_JOB_ID (run on each node, no MPI step running)\n"
        )
        return 2
    gone = remove(argv[0])
    host = socket.gethostname()
    if gone:
        names = " ".join(gone)
        say(
            f"mnframe: {host}: removed {len(gone)} MPICH segment(s) an earlier attempt of job {argv[0]} left: {names}",
            sys.stdout,
        )
    else:
        say(f"mnframe: {host}: no MPICH segment of job {argv[0]} left", sys.stdout)  # a line per node: one write
    return 0


if __name__ == "__main__":
    sys.exit(main())
