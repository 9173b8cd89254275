"""Start a command under ``mpiexec -n N`` with a hard timeout.

A hang is a failure, not a stuck CI: the whole process group is killed when the
timeout passes and the result says so. Used by the test-suite and by bench/.
"""

import dataclasses
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path


@dataclasses.dataclass
class MpiResult:
    returncode: int
    stdout: str
    stderr: str
    elapsed: float
    timed_out: bool

    @property
    def output(self):
        return self.stdout + self.stderr


def mpiexec_path():
    """The mpiexec beside this Python (the mpich wheel's), else the one on PATH."""
    local = Path(sys.executable).parent / "mpiexec"
    if local.exists():
        return str(local)
    found = shutil.which("mpiexec")
    if found is None:
        raise FileNotFoundError("mpiexec not found: run scripts/setup.sh or put your MPI's bin on PATH")
    return found


def run_pytest_module(path, n, timeout, env=None, cwd=None):
    """Run the test module ``path`` under ``mpiexec -n n`` (its own root, no config, stop at the
    first failure); the MpiResult (the GPU suite, ``tests/gpu/test_gpu_mpi.py``)."""
    path = Path(path)
    argv = ["-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-p", "no:randomly"]
    argv += ["--rootdir", str(path.parent), "-c", "/dev/null", str(path)]
    return run_mpi(argv, n=n, timeout=timeout, env=env, cwd=cwd)


def run_mpi(args, n, timeout=120, env=None, cwd=None, python=True, signal_after=None):
    """Run ``mpiexec -n n [python] *args`` and return an MpiResult.

    ``env`` entries override the environment (a value of None removes the
    variable). ``signal_after=(seconds, signum)`` sends a signal to mpiexec after a delay
    (preemption tests). The process group is always killed at the end, so no
    rank outlives the call.
    """
    cmd = [mpiexec_path(), "-n", str(n)]
    if python:
        cmd.append(sys.executable)
    cmd += [str(a) for a in args]
    full_env = dict(os.environ)
    full_env.setdefault("PYTHONUNBUFFERED", "1")
    # Oversubscribed runs on small machines: don't let ranks spin on the CPU.
    full_env.setdefault("MPIR_CVAR_CH3_NOLOCAL", "0")
    full_env.setdefault("OMP_NUM_THREADS", "1")
    for key, value in (env or {}).items():  # None removes a variable
        if value is None:
            full_env.pop(key, None)
        else:
            full_env[key] = value
    return run_command(cmd, full_env, timeout=timeout, cwd=cwd, signal_after=signal_after)


def run_command(cmd, env, timeout=120, cwd=None, signal_after=None):
    """Run ``cmd`` (a launcher's argv) in a session of its own with environment ``env``; the
    MpiResult. The process group is killed at the end (simulated-cluster runs use it too)."""
    full_env = env
    start = time.monotonic()
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=full_env, cwd=cwd, start_new_session=True
    )
    timed_out = False
    try:
        if signal_after is not None:
            delay, signum = signal_after
            try:
                proc.wait(timeout=delay)
            except subprocess.TimeoutExpired:
                proc.send_signal(signum)
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(proc)
        out, err = proc.communicate()
    finally:
        _kill_group(proc)
    return MpiResult(proc.returncode, out, err, time.monotonic() - start, timed_out)


def _kill_group(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
