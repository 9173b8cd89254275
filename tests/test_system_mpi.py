"""Both system MPIs, built and launched (issue 42, item 5): Debian's Open MPI, then Debian's MPICH.

``MNFRAME_SYSTEM_MPI=1 bash scripts/setup.sh`` builds a venv for each, Open MPI first, each with its
``mpicc`` and ``mpiexec`` first on PATH (a folder of links to the vendor's own names), in the same
run: a cached mpi4py wheel (issue 42: pip's cache handed the Open MPI build to the MPICH venv) would
show as the MPICH venv linking Open MPI. Then each venv trains the main job under its own
``mpiexec -n 2``, and the mismatched launches, both ways, for the runner and a ChainerMN script,
end with status 3 and one line naming the mismatch, before any run directory.

Slow (two set-ups with an mpi4py source build each, built with ``CFLAGS=-O0 -g0`` here to be quicker,
``MNFRAME_SYSTEM_MPI_TEST_CFLAGS`` to change it): skipped unless
``MNFRAME_SYSTEM_MPI_TESTS=1``. Needs ``apt-get install libopenmpi-dev openmpi-bin libmpich-dev mpich``
(Debian 12: Open MPI 4.1.4, MPICH 4.0.2). Run it with
``MNFRAME_SYSTEM_MPI_TESTS=1 .venv/bin/python -m pytest -q tests/test_system_mpi.py``.
"""

import json
import os
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

from mnframe.runtime import mpi_library
from mnframe.testing.launch import run_command

REPO = Path(__file__).resolve().parents[1]
VENDOR_TOOLS = {"openmpi": mpi_library.OPEN_MPI, "mpich": mpi_library.MPICH}  # Debian's suffixes
MISSING = [f"/usr/bin/{tool}.{mpi}" for mpi in VENDOR_TOOLS for tool in ("mpicc", "mpiexec")]
MISSING = [path for path in MISSING if not os.path.exists(path)]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        os.environ.get("MNFRAME_SYSTEM_MPI_TESTS") != "1",
        reason="builds mpi4py against Debian's Open MPI and MPICH (~8 min): set MNFRAME_SYSTEM_MPI_TESTS=1",
    ),
    pytest.mark.skipif(
        bool(MISSING),
        reason=f"needs {', '.join(MISSING)}: apt-get install libopenmpi-dev openmpi-bin libmpich-dev mpich",
    ),
    pytest.mark.timeout(2400),
]
STOP = 10
RUN = [
    "model.n_units=16",
    "extensions=minimal",
    "extensions.log_report.interval=1",
    "extensions.log_report.unit=iteration",
]
# The source build's optimisation: the test needs which MPI mpi4py links, not its speed, and -O0
# compiles MPI.c several times faster than pip's default -O3 -g on 2 shared cores.
CFLAGS = os.environ.get("MNFRAME_SYSTEM_MPI_TEST_CFLAGS", "-O0 -g0")
SCRIPT = """
import chainermn
comm = chainermn.create_communicator("naive")
open("trained-%d" % comm.rank, "w").write(str(comm.size))
"""


def _env(bin_dir):
    drop = ("OMPI_", "PMI", "PMIX_", "MPI_LOCAL", "SLURM_", "MPIR_CVAR", "MV2_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1")
    env.update(PYTHONUNBUFFERED="1", OMPI_MCA_rmaps_base_oversubscribe="1")
    return env


class Build:
    def __init__(self, mpi, root):
        self.mpi, self.vendor = mpi, VENDOR_TOOLS[mpi]
        self.bin = root / f"bin-{mpi}"
        self.bin.mkdir()
        for tool in ("mpicc", "mpiexec", "mpirun"):
            (self.bin / tool).symlink_to(f"/usr/bin/{tool}.{mpi}")
        if mpi == "mpich":  # Hydra looks for its proxy beside the mpiexec it was started as
            (self.bin / "hydra_pmi_proxy").symlink_to("/usr/bin/hydra_pmi_proxy")
        self.venv = root / f"venv-{mpi}"
        self.python = self.venv / "bin" / "python"
        self.env = _env(self.bin)

    def setup(self):
        env = {**self.env, "MNFRAME_SYSTEM_MPI": "1", "MNFRAME_VENV": str(self.venv), "CFLAGS": CFLAGS}
        return subprocess.run(
            ["bash", "scripts/setup.sh"], cwd=REPO, env=env, capture_output=True, text=True, timeout=1200
        )

    def launch(self, by, args, cwd, n=2, timeout=300):
        """``mpiexec -n n`` of the build ``by`` (self's own MPI, or the other one) starts self's python."""
        return run_command(
            [str(by.bin / "mpiexec"), "-n", str(n), str(self.python), *args], by.env, timeout=timeout, cwd=cwd
        )


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    """Open MPI's venv, then MPICH's, in this order (see the module docstring); each set-up's output."""
    root = tmp_path_factory.mktemp("system-mpi")
    out = {}
    for mpi in ("openmpi", "mpich"):
        build = Build(mpi, root)
        build.result = build.setup()
        out[mpi] = build
    yield out
    shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize("mpi", ["openmpi", "mpich"])
def test_each_setup_links_its_own_mpi(builds, mpi):
    build = builds[mpi]
    assert build.result.returncode == 0, build.result.stdout[-3000:] + build.result.stderr[-3000:]
    lines = build.result.stdout.strip().splitlines()
    assert f"mpi4py links {build.vendor} " in lines[-1], lines[-1]  # set-up's own final check
    linked = subprocess.run(
        [str(build.python), "-c", "import mpi4py; mpi4py.rc.initialize = False\n"
         "from mpi4py import MPI; print(MPI.Get_library_version())"],
        env=build.env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    probe = mpi_library.mpicc_library(str(build.bin / "mpicc"))
    assert mpi_library.identify(linked.stdout) == mpi_library.identify(probe), (linked.stdout, probe)
    assert mpi_library.identify(linked.stdout).vendor == build.vendor


@pytest.mark.parametrize("mpi", ["openmpi", "mpich"])
def test_main_job_trains_under_its_own_mpiexec(builds, mpi, tmp_path):
    build = builds[mpi]
    assert build.result.returncode == 0, "set-up failed (see test_each_setup_links_its_own_mpi)"
    args = ["-m", "mnframe", *RUN, f"trainer.stop=[{STOP},iteration]", f"hydra.run.dir={tmp_path}"]
    res = build.launch(build, args, REPO)
    assert not res.timed_out and res.returncode == 0, res.output[-4000:]
    log = json.loads((tmp_path / "log").read_text())
    assert log[-1]["iteration"] == STOP and "environment problem" not in res.output
    # both ranks are one job: the same command with a script prints the world each rank sees
    (tmp_path / "train.py").write_text(textwrap.dedent(SCRIPT))
    res = build.launch(build, ["-m", "mnframe.compat", "train.py"], tmp_path)
    assert res.returncode == 0, res.output[-4000:]
    assert [(tmp_path / f"trained-{r}").read_text() for r in (0, 1)] == ["2", "2"]


@pytest.mark.parametrize("mpi, other", [("openmpi", "mpich"), ("mpich", "openmpi")])
def test_mismatched_launch_stops_with_one_line(builds, mpi, other, tmp_path):
    """A venv built for ``mpi`` started by ``other``'s mpiexec -n 2: runner and ChainerMN script."""
    build, launcher = builds[mpi], builds[other]
    assert build.result.returncode == 0, "set-up failed (see test_each_setup_links_its_own_mpi)"
    run_dir = tmp_path / "run"
    (tmp_path / "train.py").write_text(textwrap.dedent(SCRIPT))
    for args in (["-m", "mnframe", *RUN, f"hydra.run.dir={run_dir}"], ["-m", "mnframe.compat", "train.py"]):
        res = build.launch(launcher, args, tmp_path, timeout=180)
        assert not res.timed_out and res.returncode != 0, res.output[-4000:]
        lines = [line for line in res.output.splitlines() if line.startswith("mnframe: environment problem")]
        assert len(lines) == 1, res.output[-4000:]
        assert f"mpi4py links {build.vendor} " in lines[0] and "but MPI sees 1 rank in each" in lines[0], lines
        assert "--no-cache-dir --no-binary=mpi4py" in lines[0]
        assert "Traceback" not in res.output
    assert not run_dir.exists() and not list(tmp_path.glob("trained-*"))  # nothing trained, no run directory
