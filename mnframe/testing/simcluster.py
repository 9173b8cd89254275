"""A simulated cluster for tests and benchmarks: ``scripts/simcluster.sh`` from Python.

Each node is a network namespace with hostname ``nodeI`` on a bridge, optionally with capped
links and a real Slurm (docs/multi_node.md). ``SimCluster`` brings one up and down; ``mpiexec``
runs a command with ranks spread over the nodes under a hard timeout (the same MpiResult as
``run_mpi``). ``unavailable_reason()`` says why no cluster can be built here (not root, no
namespaces, no script), so tests skip with that reason.
"""

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from mnframe.testing.launch import mpiexec_path, run_command

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "simcluster.sh"


def simcluster_skip_reason():
    """Why the simulated-cluster tests skip here (None: they run): they run only where asked
    (``SIMCLUSTER_TESTS=1``, the CI multinode leg) and where a cluster can be built."""
    if os.environ.get("SIMCLUSTER_TESTS") != "1":
        return "multi-node tests build a simulated cluster: set SIMCLUSTER_TESTS=1 (the CI multinode leg does)"
    return unavailable_reason()


def slurm_skip_reason():
    """As ``simcluster_skip_reason``, for the tests that also need Slurm and munge and submit the
    sbatch example (which sources the checkout's ``.venv``)."""
    if simcluster_skip_reason() is not None:
        return simcluster_skip_reason()
    if not (shutil.which("slurmctld") and shutil.which("munged")):
        return "slurm-wlm and munge are not installed (apt-get install -y slurm-wlm munge)"
    if not (SCRIPT.parents[1] / ".venv" / "bin" / "activate").exists():
        return "the sbatch example sources .venv/bin/activate: run scripts/setup.sh"
    return None


def wait_for_checkpoint(run_dir, proc_done, timeout):
    """True once ``run_dir`` holds a complete checkpoint (its manifest), False when the job ended
    first (``proc_done``, an Event) or ``timeout`` seconds passed."""
    end = time.time() + timeout
    while time.time() < end and not proc_done.is_set():
        if list((Path(run_dir) / "checkpoints").glob("iter_*/manifest.json")):
            return True
        time.sleep(0.5)
    return False


def unavailable_reason():
    """None where a cluster can be built here, else one line saying why not."""
    if not SCRIPT.exists():
        return f"{SCRIPT} not found (a source checkout is needed)"
    if os.geteuid() != 0:
        return "not root (network namespaces need root)"
    try:
        proc = subprocess.run(["bash", str(SCRIPT), "check"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"simcluster.sh check failed: {exc}"
    if proc.returncode != 0:
        return (proc.stdout + proc.stderr).strip() or "simcluster.sh check failed"
    return None


def _script(*args, timeout=120):
    proc = subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"simcluster.sh {' '.join(args)} failed: {proc.stdout}{proc.stderr}")
    return proc.stdout


class SimCluster:
    """``nodes`` simulated nodes named ``name`` (1-8 of a-z0-9); ``rate`` like "1gbit" caps each
    node's link; ``slurm=True`` adds slurmctld and one slurmd per node. Use as a context manager
    or call up()/down(); ``up`` removes leftovers of the same name first. ``SIMCLUSTER_NAME_OVERRIDE``
    replaces ``name`` (tests run one cluster at a time: people sharing a machine each keep to theirs)."""

    def __init__(self, name="sc", nodes=2, rate=None, slurm=False):
        # SIMCLUSTER_NAME_OVERRIDE: the one cluster name a person sharing the machine may use
        name = os.environ.get("SIMCLUSTER_NAME_OVERRIDE") or name
        self.name, self.nodes, self.rate, self.slurm = name, nodes, rate, slurm
        self.env = {}

    def up(self):
        args = ["up", "--name", self.name, "--nodes", str(self.nodes)]
        if self.rate:
            args += ["--rate", self.rate]
        if self.slurm:
            args.append("--slurm")
        _script(*args, timeout=120)
        self.env = {}
        for line in _script("env", "--name", self.name).splitlines():
            key, _, value = line.removeprefix("export ").partition("=")
            self.env[key] = value
        return self

    def down(self):
        _script("down", "--name", self.name, timeout=120)

    def __enter__(self):
        return self.up()

    def __exit__(self, *exc):
        self.down()

    @property
    def state(self):
        return Path(self.env["SIMCLUSTER_STATE"])

    def kill_node(self, node):
        """Node ``node`` (1-based) dies: its link goes down, then every process in its namespaces
        (its slurmd too) is killed; only ``down`` brings the cluster back to a clean state."""
        _script("kill", "--name", self.name, f"node{node}", timeout=60)

    def node_cmd(self, node, argv):
        """argv that runs ``argv`` on node ``node`` (1-based): its network and UTS namespace."""
        return ["bash", str(SCRIPT), "exec", "--name", self.name, f"node{node}", *map(str, argv)]

    def mpiexec_argv(self, argv, ppn=1, nodes=None, netmod="ofi", python=True, mpiexec_args=()):
        """The mpiexec argv that starts ``ppn`` ranks on each of the first ``nodes`` nodes."""
        nodes = nodes or self.nodes
        hosts = ",".join(f"node{i}:{ppn}" for i in range(1, nodes + 1))
        net = {"ofi": ["-genv", "MPIR_CVAR_CH4_NETMOD", "ofi", "-genv", "FI_PROVIDER", "tcp"]}.get(
            netmod, ["-genv", "MPIR_CVAR_CH4_NETMOD", "ucx", "-genv", "UCX_TLS", "tcp,self"]
        )
        cmd = [mpiexec_path(), "-launcher", "ssh", "-launcher-exec", self.env["SIMCLUSTER_LAUNCHER"]]
        cmd += ["-localhost", self.env["SIMCLUSTER_BRIDGE_IP"], "-hosts", hosts, "-n", str(nodes * ppn)]
        cmd += [*net, *mpiexec_args]
        if python:
            cmd.append(sys.executable)
        return cmd + [str(a) for a in argv]

    def mpiexec(self, argv, ppn=1, nodes=None, timeout=180, env=None, cwd=None, netmod="ofi", signal_after=None):
        """Run ``mpiexec ... python *argv`` across the nodes; an MpiResult (killed at ``timeout``)."""
        return run_command(
            self.mpiexec_argv(argv, ppn=ppn, nodes=nodes, netmod=netmod),
            _environment(env),
            timeout=timeout,
            cwd=cwd,
            signal_after=signal_after,
        )

    def run(self, argv, timeout=180, env=None, cwd=None):
        """Run ``argv`` on this machine (sbatch, scontrol, ...) with the cluster's SLURM_CONF; an MpiResult."""
        merged = {"SLURM_CONF": self.env.get("SLURM_CONF")} if self.slurm else {}
        merged.update(env or {})
        return run_command([str(a) for a in argv], _environment(merged), timeout=timeout, cwd=cwd)


def _environment(env):
    full = dict(os.environ)
    full.setdefault("PYTHONUNBUFFERED", "1")
    full.setdefault("OMP_NUM_THREADS", "1")
    for key, value in (env or {}).items():  # None removes a variable
        if value is None:
            full.pop(key, None)
        else:
            full[key] = value
    return full
