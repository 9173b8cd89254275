"""Runner scripts with a fault injected, for the tests of how a run ends."""

# ``python -m mnframe`` whose rank 1 finds the disk full from its second checkpoint file on:
# ENOSPC raised where every checkpoint file is written, synchronous or in the background
# (trainer_io.write_rank_arrays; no file system is filled).
FULL_DISK_RUNNER = r"""
import errno, sys
import mnframe.checkpoint.trainer_io as writer

real, calls = writer.write_npz, []


def full_disk(f, arrays, compression=True):
    from mpi4py import MPI

    calls.append(1)
    if MPI.COMM_WORLD.rank == 1 and len(calls) >= 2:
        f.write(b"x" * 100)
        raise OSError(errno.ENOSPC, "No space left on device")
    return real(f, arrays, compression)


writer.write_npz = full_disk
from mnframe.commands.cli import main

main(sys.argv[1:])
"""
