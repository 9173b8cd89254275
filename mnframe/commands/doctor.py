"""``python -m mnframe doctor``: the spec's step-by-step MPI/CUDA troubleshooting, automated.

Run it the way you run training (``mpiexec -n 2 python -m mnframe doctor``,
``srun ... python -m mnframe doctor``, or plainly). Each step prints PASS,
FAIL (with the fix), INFO or SKIP; rank 0 prints, the exit status is 1 when
any step failed. Steps, in the order of the spec's checklist:

1. the MPI library mpi4py is linked to, the launcher that started this process (from its
   environment, runtime/launcher_env.py), and the ``mpiexec`` a user would run (beside this
   Python, else on PATH), named from ``mpiexec --version`` (Open MPI/OpenRTE, MPICH/Hydra,
   Intel MPI, MVAPICH, Slurm's srun: runtime/mpi_library.py) and compared with the library,
   so that one process already says when ``mpiexec -n 2`` would start 2 lone jobs;
2. the launcher says N ranks but MPI sees 1 ("every rank prints 0"):
   mpi4py built against another MPI than the launcher's (the runner and the drop-in path
   stop on it with exit 3; doctor reports it as a step);
3. ranks and hosts;
4. CuPy, CUDA, NCCL and cuDNN presence and versions (fixes name the packages for the
   CUDA of the CuPy installed; CuPy 14 has no cuDNN: which CuPy line keeps it);
5. whether MPI is CUDA-aware (Open MPI reports it; others: a hint);
6. a short allreduce bandwidth check;
7. the transport between nodes and the bandwidth between and within nodes (mnframe.commands.doctor_nodes).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence

from mnframe.commands import doctor_nodes
from mnframe.runtime import launcher_env, mpi_library

# launcher environment variables -> what they say about the world size (runtime/launcher_env.py)
LAUNCHER_SIZE_VARS = launcher_env.SIZE_VARS


@dataclass
class Result:
    status: str  # PASS | FAIL | INFO | SKIP
    step: str
    detail: str
    fix: Optional[str] = None

    def render(self) -> str:
        text = f"[{self.status}] {self.step}: {self.detail}"
        if self.fix:
            text += f"\n       fix: {self.fix}"
        return text


def _run(cmd: Sequence[str], timeout: float = 10) -> str:
    try:
        out = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout)
        return (out.stdout + out.stderr).strip()
    except Exception as exc:  # missing binary, timeout
        return f"<{type(exc).__name__}: {exc}>"


def _launcher() -> Optional[str]:
    """The ``mpiexec`` a user would run: the one beside this Python (the mpich wheel's), else PATH's."""
    beside = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return beside if os.path.exists(beside) else shutil.which("mpiexec")


def compare_launcher(launcher: str, version_text: str, library_text: str) -> Result:
    """``mpiexec --version`` of ``launcher`` against mpi4py's library: one step's result."""
    lib = mpi_library.identify(library_text)
    exe = mpi_library.identify(version_text)
    step = "mpiexec matches mpi4py's MPI"
    detail = f"{launcher} is {mpi_library.launcher_name(version_text)}; mpi4py links {lib}"
    fix = (
        f"launch with the mpiexec of {lib} (put it first on PATH), or rebuild mpi4py against "
        f"{exe.vendor if exe.vendor != mpi_library.UNKNOWN else 'the launcher'}'s MPI: "
        f"{mpi_library.rebuild_command()} (docs/cluster_mpi.md)"
    )
    family = mpi_library.same_family(exe, lib)
    if exe.vendor == mpi_library.SLURM:
        return Result(
            "INFO",
            step,
            f"{detail}: srun starts any MPI through its PMI plugin",
            fix="srun --mpi=pmi2 for the MPICH family, --mpi=pmix for Open MPI (srun --mpi=list)",
        )
    if family is None:
        return Result("INFO", step, f"{detail}: cannot tell whether they match", fix=fix)
    if family is False or (
        exe.vendor == mpi_library.OPEN_MPI and (exe.version or "").split(".")[0] != (lib.version or "").split(".")[0]
    ):
        return Result(
            "FAIL",
            step,
            f"{detail}: they differ, so `mpiexec -n 2` would start 2 lone 1-rank jobs "
            "(the classic 'every rank prints 0')",
            fix=fix,
        )
    if mpi_library.same_mpi(exe, lib):
        return Result("PASS", step, detail)
    return Result(
        "INFO",
        step,
        f"{detail}: same family, other vendor or version (they speak the same PMI, so it usually works)",
        fix=f"prefer the mpiexec of {lib}",
    )


def check_mpi_library(mpi) -> List[Result]:
    lib = mpi.Get_library_version().strip()
    out = [
        Result(
            "INFO",
            "mpi4py",
            f"mpi4py {__import__('mpi4py').__version__}, MPI {'.'.join(map(str, mpi.Get_version()))}: "
            f"{lib.splitlines()[0] if lib else '?'}",
        )
    ]
    launch = launcher_env.read(os.environ)
    if launch is not None:
        out.append(Result("INFO", "launcher", f"started by {launch.launcher} ({launch.evidence or 'no size given'})"))
    launcher = _launcher()
    if launcher is None:
        out.append(Result("INFO", "mpiexec", "no mpiexec on PATH (fine under srun or one process)"))
        return out
    out.append(compare_launcher(launcher, _run([launcher, "--version"]), lib))
    return out


def check_world(mpi) -> List[Result]:
    size = mpi.COMM_WORLD.Get_size()
    launch = launcher_env.read(os.environ)
    found = launcher_env.problem(size, os.environ, mpi_library.identify(mpi.Get_library_version()))
    if found is not None:
        return [Result("FAIL", "world size", f"{found[0]} (the classic 'every rank prints 0')", fix=found[1])]
    if launch is None and size == 1:
        return [
            Result(
                "INFO",
                "world size",
                "1 process, no launcher: run it under `mpiexec -n 2 python -m mnframe doctor` to check communication",
            )
        ]
    return [Result("PASS", "world size", f"{size} rank(s)")]


def check_hosts(mpi) -> List[Result]:
    comm = mpi.COMM_WORLD
    hosts = comm.allgather(socket.gethostname())
    per_host = {}
    for rank, host in enumerate(hosts):
        per_host.setdefault(host, []).append(rank)
    text = "; ".join(f"{h}: ranks {r}" for h, r in per_host.items())
    return [Result("INFO", "ranks and hosts", f"{len(per_host)} host(s): {text}")]


def check_cuda() -> List[Result]:
    """CuPy, CUDA, NCCL and cuDNN from the one CUDA probe (``mnframe.cuda_env``); every fix
    names the package for the CUDA major version of the CuPy installed (cu12 or cu13)."""
    from mnframe import cuda_env

    info = cuda_env.probe()
    if info.cupy_version is None and info.problem is not None and "not installed" in info.problem:
        return [
            Result(
                "SKIP",
                "CuPy",
                "not installed (only the CPU communicators can be used)",
                fix=f"for GPUs: {cuda_env.CUPY_HINT}",
            )
        ]
    where = f"CuPy {info.cupy_version or '?'} ({info.cupy_package or 'source build'}, CUDA {info.cuda_major or '?'})"
    if info.problem is not None:
        return [
            Result(
                "FAIL",
                "CUDA",
                f"{where}: {info.problem}",
                fix="check the driver (nvidia-smi) and CUDA_VISIBLE_DEVICES, and that the CuPy "
                "wheel matches the driver's CUDA (cupy-cuda12x / cupy-cuda13x)",
            )
        ]
    out = [Result("PASS", "CUDA", f"{where}, {info.device_count} device(s)")]
    if info.nccl_problem is None:
        out.append(Result("PASS", "NCCL", f"version {cuda_env.nccl_version_text(info.nccl_version)}"))
    else:
        out.append(
            Result(
                "FAIL",
                "NCCL",
                info.nccl_problem,
                fix=f"{cuda_env.nccl_hint()} (pure_nccl, hierarchical and two_dimensional on GPUs "
                f"need NCCL; non_cuda_aware does not)",
            )
        )
    note = cuda_env.cudnn_note(info)
    out.append(Result("INFO", "cuDNN", note) if note else Result("PASS", "cuDNN", "cupy.cudnn is available"))
    return out


def check_cuda_aware_mpi(mpi) -> List[Result]:
    """What mnframe's GPU strategies will assume (``communicators.cuda_aware``), and,
    when the MPI says it is CUDA-aware and a GPU is there, a device-buffer round trip."""
    from mnframe.communicators import cuda_aware

    try:
        aware, how = cuda_aware.detect()
    except ValueError as exc:
        return [Result("FAIL", "CUDA-aware MPI", str(exc), fix=f"set {cuda_aware.ENV}=1 or 0, or unset it")]
    staged = "GPU data crosses MPI through host memory (flat, naive, between nodes); NCCL inside nodes"
    if not aware:
        return [
            Result(
                "INFO",
                "CUDA-aware MPI",
                f"no ({how}): {staged}",
                fix=f"if your MPI is CUDA-aware but cannot say so, set {cuda_aware.ENV}=1",
            )
        ]
    return [Result(*_device_round_trip(mpi, how))]


def _device_round_trip(mpi, how):
    """(status, name, detail): send a CuPy array to this rank itself through MPI and compare."""
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() < 1:
            return "INFO", "CUDA-aware MPI", f"yes ({how}); no GPU here to try it"
        src = cupy.arange(1024, dtype=cupy.float32)
        dst = cupy.zeros_like(src)
        cupy.cuda.get_current_stream().synchronize()
        comm = mpi.COMM_SELF
        comm.Sendrecv([src, mpi.FLOAT], dest=0, recvbuf=[dst, mpi.FLOAT], source=0)
        ok = bool((dst == src).all())
    except ImportError:
        return "INFO", "CUDA-aware MPI", f"yes ({how}); CuPy is not installed to try it"
    except Exception as exc:
        return "FAIL", "CUDA-aware MPI", f"reported ({how}) but a device-buffer send failed: {exc}"
    return (
        "PASS" if ok else "FAIL",
        "CUDA-aware MPI",
        f"yes ({how}); a device-buffer send {'arrived intact' if ok else 'arrived corrupted'}",
    )


def check_bandwidth(mpi, nbytes: int = 8 << 20, repeat: int = 5) -> List[Result]:
    import numpy as np

    from mnframe.runtime import oplog

    comm = mpi.COMM_WORLD
    if comm.Get_size() == 1:
        return [Result("SKIP", "allreduce bandwidth", "one rank")]
    buf = np.ones(nbytes // 4, dtype=np.float32)
    out = np.empty_like(buf)
    with oplog.op("allreduce", array=buf):
        comm.Allreduce(buf, out)  # warm-up
    comm.Barrier()
    start = time.perf_counter()
    for _ in range(repeat):
        with oplog.op("allreduce", array=buf):
            comm.Allreduce(buf, out)
    seconds = (time.perf_counter() - start) / repeat
    ok = bool(np.all(out == comm.Get_size()))
    gbps = nbytes / seconds / 1e9
    return [
        Result(
            "PASS" if ok else "FAIL",
            "allreduce bandwidth",
            f"{nbytes >> 20} MiB float32 in {seconds * 1e3:.1f} ms ({gbps:.2f} GB/s "
            f"algorithm bandwidth); result {'correct' if ok else 'WRONG'}",
            fix=None if ok else "MPI returned wrong sums: check the interconnect settings of your MPI",
        )
    ]


def _rows(step: Callable) -> Callable:
    """A ``doctor_nodes`` step (rows as tuples) as a step that returns ``Result``s."""

    def run(mpi) -> List[Result]:
        return [Result(*row) for row in step(mpi)]

    run.__name__ = step.__name__
    return run


STEPS: List[Callable] = [
    check_mpi_library,
    check_world,
    check_hosts,
    lambda _mpi: check_cuda(),
    check_cuda_aware_mpi,
    check_bandwidth,
    _rows(doctor_nodes.check_transport),
    _rows(doctor_nodes.check_node_bandwidth),
]


def main() -> int:
    """Run every step; rank 0 prints; 1 if any step failed (on any rank)."""
    try:
        from mpi4py import MPI
    except Exception as exc:  # not installed, or installed without an MPI library to load
        from mnframe.dependencies import MPI_FIX, mpi_load_failure

        print(Result("FAIL", "mpi4py", f"cannot import mpi4py.MPI ({mpi_load_failure(exc)})", fix=MPI_FIX).render())
        return 1
    results: List[Result] = []
    for step in STEPS:
        try:
            results += step(MPI)
        except Exception as exc:  # a broken step is a failed step, not a crash
            results.append(Result("FAIL", getattr(step, "__name__", "step"), repr(exc)))
    failed = any(r.status == "FAIL" for r in results)
    any_failed = MPI.COMM_WORLD.allreduce(int(failed), op=MPI.MAX)
    if MPI.COMM_WORLD.Get_rank() == 0:
        print("mnframe doctor")
        for r in results:
            print(r.render())
        print("all checks passed" if not any_failed else "some checks failed (see fix:)")
    sys.stdout.flush()
    return 1 if any_failed else 0
