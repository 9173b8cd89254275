"""Which MPI: vendor and version read from what MPIs print, and the one command that rebuilds mpi4py.

``identify(text)`` reads the vendor (Open MPI, MPICH, Intel MPI, MVAPICH, or Slurm for ``srun``)
and version from any of the strings an MPI prints about itself: mpi4py's
``MPI.Get_library_version()``, ``mpiexec --version`` (Open MPI's OpenRTE, MPICH's Hydra, Intel
MPI, MVAPICH), ``srun --version`` and ``mpicc`` version banners. ``same_mpi`` compares two of them,
``same_family`` says whether a launcher can start a library's processes at all (Hydra and
Slurm's PMI serve the MPICH family; Open MPI needs its own launcher or PMIx).
``mpicc_library(mpicc)`` compiles and runs a 5-line C program with ``mpicc`` that prints
``MPI_Get_library_version`` (allowed before ``MPI_Init``), i.e. the MPI a build with that
``mpicc`` links. ``python -m mnframe.runtime.mpi_library --check-build MPICC`` is set-up's final
check (scripts/setup.sh): mpi4py must link the MPI of ``MPICC``, else one line saying what to run.

``rebuild_command()`` is the one place the rebuild is spelt: ``--no-cache-dir`` because pip's
cache of locally built wheels hands back an mpi4py built against another MPI, even with
``--no-binary`` and ``--force-reinstall`` (issue 42).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from typing import Optional

OPEN_MPI, MPICH, INTEL, MVAPICH, SLURM, UNKNOWN = "Open MPI", "MPICH", "Intel MPI", "MVAPICH", "Slurm", "unknown"
# vendors whose processes find each other through the PMI wire protocol (Hydra, srun --mpi=pmi2)
PMI_FAMILY = (MPICH, INTEL, MVAPICH)

# (vendor, what names it, its version) in the order tried: MVAPICH and Intel MPI before MPICH
# (their texts may mention MPICH or Hydra), Slurm's "slurm 22.05.8" only as a whole first line.
_VERSION = r"v?(\d+(?:\.\d+)+(?:[a-z]+\d*)?)"
_PATTERNS = (
    (MVAPICH, re.compile(r"mvapich", re.I), re.compile(r"mvapich\d?\s*(?:version\s*)?:?\s*" + _VERSION, re.I)),
    (INTEL, re.compile(r"intel\(r\) mpi|intel mpi", re.I), re.compile(r"intel.*?mpi library.*?" + _VERSION, re.I)),
    (
        OPEN_MPI,
        re.compile(r"open ?mpi|openrte", re.I),
        re.compile(r"(?:open mpi|\(openrte\)|\(open mpi\))\s*" + _VERSION, re.I),
    ),
    (
        MPICH,
        re.compile(r"mpich|hydra", re.I),
        re.compile(r"(?:mpich(?:\s+version)?|^\s*version)\s*:?\s*" + _VERSION, re.I | re.M),
    ),
    (SLURM, re.compile(r"^\s*slurm(?:-wlm)?\s+\d", re.I), re.compile(r"^\s*slurm(?:-wlm)?\s+" + _VERSION, re.I)),
)
LAUNCHER_NAMES = {
    OPEN_MPI: "Open MPI's mpiexec (OpenRTE/PRRTE)",
    MPICH: "MPICH's mpiexec (Hydra)",
    INTEL: "Intel MPI's mpiexec (Hydra)",
    MVAPICH: "MVAPICH's launcher",
    SLURM: "Slurm's srun",
}


@dataclass(frozen=True)
class MPIName:
    vendor: str  # one of the constants above
    version: Optional[str]  # "4.1.4", None when the text has none

    def __str__(self):
        return f"{self.vendor} {self.version}" if self.version else self.vendor


def identify(text: str) -> MPIName:
    """The MPI (or Slurm) a version text names; ``MPIName(UNKNOWN, None)`` when none."""
    for vendor, names, version in _PATTERNS:
        if names.search(text):
            found = version.search(text)
            return MPIName(vendor, found.group(1) if found else None)
    return MPIName(UNKNOWN, None)


def launcher_name(version_text: str) -> str:
    """``mpiexec --version`` (or ``srun --version``) output -> which launcher it is, in words."""
    name = identify(version_text)
    if name.vendor == UNKNOWN:
        first = version_text.strip().splitlines()[0] if version_text.strip() else "no output"
        return f"an unknown launcher ({first[:80]})"
    return f"{LAUNCHER_NAMES[name.vendor]} {name.version or ''}".rstrip()


def same_mpi(a: MPIName, b: MPIName) -> bool:
    """Same vendor and, where both say, the same version."""
    return a.vendor == b.vendor and (a.version is None or b.version is None or a.version == b.version)


def same_family(launcher: MPIName, library: MPIName) -> Optional[bool]:
    """Can ``launcher`` start ``library``'s processes as one job? None: cannot tell (unknown, srun)."""
    if UNKNOWN in (launcher.vendor, library.vendor) or launcher.vendor == SLURM:
        return None
    if launcher.vendor == library.vendor:
        return True
    return launcher.vendor in PMI_FAMILY and library.vendor in PMI_FAMILY


def rebuild_command(mpicc: str = "$(which mpicc)", python: Optional[str] = None) -> str:
    """The command that rebuilds mpi4py against ``mpicc``'s MPI, bypassing pip's wheel cache."""
    python = python or sys.executable
    return (
        f"MPICC={mpicc} {shlex.quote(python)} -m pip install --no-cache-dir --no-binary=mpi4py "
        f"--force-reinstall --no-deps mpi4py"
    )


_PROBE = r"""#include <mpi.h>
#include <stdio.h>
int main(void) {
    char v[MPI_MAX_LIBRARY_VERSION_STRING]; int n = 0;
    MPI_Get_library_version(v, &n);
    puts(v); return 0; }
"""


def mpicc_library(mpicc: str, timeout: float = 120) -> str:
    """The library version string of the MPI ``mpicc`` builds against (compiles and runs a probe).

    Raises RuntimeError with a one-line reason when ``mpicc`` cannot build or run it."""
    with tempfile.TemporaryDirectory(prefix="mnframe-mpicc-") as tmp:
        source, program = os.path.join(tmp, "probe.c"), os.path.join(tmp, "probe")
        with open(source, "w") as f:
            f.write(_PROBE)
        for cmd, what in (([mpicc, source, "-o", program], "compile"), ([program], "run")):
            try:
                done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise RuntimeError(f"cannot {what} an MPI program with {mpicc}: {exc}") from None
            if done.returncode != 0:
                why = (done.stderr or done.stdout).strip().splitlines()
                raise RuntimeError(f"cannot {what} an MPI program with {mpicc}: {why[0] if why else done.returncode}")
        return done.stdout.strip()


def mpi4py_library() -> str:
    """mpi4py's ``MPI.Get_library_version()``, without initialising MPI when it is not yet."""
    import mpi4py

    if "mpi4py.MPI" not in sys.modules:
        mpi4py.rc.initialize = False
    from mpi4py import MPI

    return MPI.Get_library_version().strip()


def abi_dispatching() -> bool:
    """Whether mpi4py's ``MPI`` module is one of the per-ABI modules of PyPI's wheels
    (``MPI.mpich.cpython-311-...so``, ``MPI.openmpi...``), which load whichever MPI library they
    find at run time, rather than the one module a build against one MPI makes (``MPI.cpython-...so``)."""
    import importlib.machinery

    name = os.path.basename(sys.modules["mpi4py.MPI"].__file__)
    return not any(name == "MPI" + suffix for suffix in importlib.machinery.EXTENSION_SUFFIXES)


def check_build(mpicc: str) -> Optional[str]:
    """None when mpi4py links the MPI ``mpicc`` builds against; else one line saying what to run."""
    try:
        linked = identify(mpi4py_library())
    except Exception as exc:  # not installed, or no MPI library it can load
        return f"mpi4py does not import ({exc}); build it: {rebuild_command(mpicc)}"
    if abi_dispatching():
        return (
            f"mpi4py is a binary wheel (it loads {linked} now, whichever MPI library it finds at run time); "
            f"build it against {mpicc}: {rebuild_command(mpicc)}"
        )
    try:
        wanted = identify(mpicc_library(mpicc))
    except RuntimeError as exc:
        return (
            f"{exc}; install the MPI's development package (Debian/Ubuntu: libopenmpi-dev or "
            f"libmpich-dev) or load it (module load ...)"
        )
    if same_mpi(linked, wanted) and UNKNOWN not in (linked.vendor, wanted.vendor):
        return None
    return (
        f"mpi4py links {linked} but {mpicc} builds against {wanted} (pip's wheel cache can hand back an "
        f"mpi4py built for another MPI); rebuild it: {rebuild_command(mpicc)}"
    )


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if len(argv) != 2 or argv[0] != "--check-build":
        print("usage: python -m mnframe.runtime.mpi_library --check-build MPICC", file=sys.stderr)
        return 2
    problem = check_build(argv[1])
    if problem is not None:
        print(problem, file=sys.stderr)
        return 1
    print(f"mpi4py links {identify(mpi4py_library())}, the MPI of {argv[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
