"""Slurm as a user meets it, on a simulated 2-node cluster with a real Slurm (issue 28).

``examples/slurm/train.sbatch`` trains across the nodes; ``scontrol requeue`` in the middle makes
every rank checkpoint and the requeued job finishes with the same parameters as an uninterrupted
run; a bare ``srun python -m mnframe`` trains (mnframe picks MPICH's OFI netmod under srun), and
srun's tasks that are not one MPI job end at once with one line. Runs only where asked
(``SIMCLUSTER_TESTS=1``, the CI ``multinode`` leg) and where it can (root, network namespaces,
slurm-wlm and munge installed); elsewhere every test skips with the reason.
"""

import json
import time
from pathlib import Path

import numpy as np
import pytest

from mnframe.testing.simcluster import SimCluster, slurm_skip_reason

REPO = Path(__file__).resolve().parent.parent
SBATCH = REPO / "examples" / "slurm" / "train.sbatch"
OVERRIDES = [
    "model.n_units=16",
    "dataset.batch_size=20",
    "extensions=minimal",
    "extensions.log_report.interval=1",
    "extensions.log_report.unit=iteration",
]


pytestmark = pytest.mark.skipif(slurm_skip_reason() is not None, reason=str(slurm_skip_reason()))


@pytest.fixture(scope="module")
def cluster():
    c = SimCluster(name="mns", nodes=2, rate="1gbit", slurm=True)
    c.up()
    yield c
    c.down()


def job_state(cluster, job):
    out = cluster.run(["scontrol", "show", "job", job], timeout=30).stdout
    for field in out.split():
        if field.startswith("JobState="):
            return field.split("=", 1)[1]
    return "GONE"


def wait_until(predicate, timeout, what):
    end = time.time() + timeout
    while time.time() < end:
        if predicate():
            return
        time.sleep(1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def submit(cluster, run_dir, *overrides):
    res = cluster.run(
        ["sbatch", "--parsable", "--nodes=2", "--ntasks-per-node=1", "--cpus-per-task=1",
         f"--output={run_dir}.out", str(SBATCH), *OVERRIDES, *overrides],
        env={"RUN_DIR": str(run_dir)},
        cwd=str(REPO),
        timeout=60,
    )  # fmt: skip
    assert res.returncode == 0, res.output
    return res.stdout.strip().split(";")[0]


def finished(cluster, job, run_dir, timeout=360):
    try:
        wait_until(lambda: job_state(cluster, job) in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "GONE"),
                   timeout, f"job {job}")  # fmt: skip
    finally:
        cluster.run(["scancel", job], timeout=30)
    out = Path(f"{run_dir}.out").read_text()
    assert job_state(cluster, job) in ("COMPLETED", "GONE"), out[-4000:]
    return out


def params(run_dir):
    with np.load(Path(run_dir) / "model.npz") as z:
        return {k: z[k] for k in z.files}


def test_sbatch_example_requeue_resumes_to_the_uninterrupted_result(cluster, tmp_path):
    # long enough that the requeue (after the first checkpoint) lands mid-run: the job runs alone
    # on its nodes (train.sbatch asks for --exclusive), 150 iterations took under a second
    stop = ["trainer.stop=[1500,iteration]", "checkpoint.interval=100"]
    plain, requeued = tmp_path / "plain", tmp_path / "requeued"
    job_a = submit(cluster, plain, *stop)
    job_b = submit(cluster, requeued, *stop)
    # requeue job b once its first checkpoint is complete
    wait_until(lambda: list(requeued.glob("checkpoints/iter_*/manifest.json")), 300, "the first checkpoint")
    assert cluster.run(["scontrol", "requeue", job_b], timeout=30).returncode == 0
    wait_until(lambda: "PENDING" == job_state(cluster, job_b), 120, "the requeued job to be pending")
    # Slurm holds a requeued job for about 2 minutes (its EligibleTime); release it now
    cluster.run(["scontrol", "update", f"JobId={job_b}", "StartTime=now"], timeout=30)
    out_a = finished(cluster, job_a, plain)
    out_b = finished(cluster, job_b, requeued)
    assert "all checks passed" in out_a, out_a[-3000:]  # the doctor step across both nodes
    assert "2 host(s): node1: ranks [0]; node2: ranks [1]" in out_a, out_a[-3000:]
    # every rank got SIGTERM and checkpointed; the requeued job resumed from that checkpoint
    assert out_b.count("mnframe: received SIGTERM") == 2, out_b[-4000:]
    assert "mnframe: preempted; checkpoint iter_" in out_b, out_b[-4000:]
    log = json.loads((requeued / "log").read_text())
    assert [e["iteration"] for e in log][-1] == 1500
    a, b = params(plain), params(requeued)
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)


def test_bare_srun_trains_across_nodes(cluster, tmp_path):
    res = cluster.run(
        ["srun", "-N2", "-n2", str(REPO / ".venv" / "bin" / "python"), "-m", "mnframe", *OVERRIDES,
         "trainer.stop=[10,iteration]", f"hydra.run.dir={tmp_path}"],
        env={"MPIR_CVAR_CH4_NETMOD": None, "PYTHONPATH": str(REPO)},
        cwd=str(REPO),
        timeout=240,
    )  # fmt: skip
    assert not res.timed_out and res.returncode == 0, res.output[-4000:]
    assert "using MPIR_CVAR_CH4_NETMOD=ofi" in res.stderr
    assert [e["iteration"] for e in json.loads((tmp_path / "log").read_text())][-1] == 10


def test_srun_without_pmi_ends_at_once_with_one_line(cluster, tmp_path):
    res = cluster.run(
        ["srun", "--mpi=none", "-N2", "-n2", str(REPO / ".venv" / "bin" / "python"), "-m", "mnframe",
         *OVERRIDES, f"hydra.run.dir={tmp_path}"],
        env={"PYTHONPATH": str(REPO)},
        cwd=str(REPO),
        timeout=180,
    )  # fmt: skip
    assert not res.timed_out, res.output[-4000:]
    assert res.returncode == 3, res.output[-4000:]
    lines = [line for line in res.stderr.splitlines() if line.startswith("mnframe: environment problem")]
    assert len(lines) == 1 and "srun started 2 tasks but MPI sees 1 rank" in lines[0], res.output[-4000:]
    assert "Traceback" not in res.output
    assert not (tmp_path / "log").exists()
