"""Slurm jobs that must not need a person (issue 39), on a simulated 2-node cluster ``ha``.

ChainerMN's MNIST scripts run unchanged under ``srun`` across both nodes through
``python -m mnframe.compat`` (mnframe picks MPICH's OFI netmod, so none hangs in PMI); and
``examples/slurm/train.sbatch``, submitted as it is (a run directory and a training length), loses
a node after its first checkpoint, node2 or node1 (the batch host) (link down, every process
killed, its slurmd too; SlurmdTimeout is 30 s) and, with no command from anyone, is requeued by
Slurm, resumes on the node left at the smaller world size and ends with the final model. The
script tests share one cluster; each node-loss test builds its own (a node loss leaves a node
down). Runs only where asked (``SIMCLUSTER_TESTS=1``) and where it can (root, namespaces, slurm-wlm and munge).
"""

import json
import re
import time
from pathlib import Path

import numpy as np
import pytest

from mnframe.testing.simcluster import SimCluster, slurm_skip_reason

REPO = Path(__file__).resolve().parent.parent
SBATCH = REPO / "examples" / "slurm" / "train.sbatch"
SCRIPTS = REPO / "examples" / "chainermn_scripts"
PYTHON = REPO / ".venv" / "bin" / "python"
STOP = 400  # iterations: the recipes checkpoint every 100, ~3 iterations/s on 4 ranks here


pytestmark = pytest.mark.skipif(slurm_skip_reason() is not None, reason=str(slurm_skip_reason()))


@pytest.fixture(scope="module")
def ha():
    """One cluster ``ha`` at a time: ``ha(whole=True)`` reuses the one up if no node of it was lost,
    ``ha(whole=False)`` (a test that kills a node) always gets a fresh one."""
    held = {"cluster": None, "whole": False}

    def get(whole):
        if held["cluster"] is None or not (whole and held["whole"]):
            if held["cluster"] is not None:
                held["cluster"].down()
            held["cluster"] = SimCluster(name="ha", nodes=2, slurm=True)
            held["cluster"].up()
        held["whole"] = whole
        return held["cluster"]

    yield get
    if held["cluster"] is not None:
        held["cluster"].down()


@pytest.fixture
def cluster(ha):
    """The module's cluster, shared by the tests that leave both nodes up (ChainerMN's scripts)."""
    return ha(whole=True)


@pytest.fixture
def fresh_cluster(ha):
    """A cluster of its own, for a test that loses a node."""
    return ha(whole=False)


# -- ChainerMN's scripts under srun ----------------------------------------------------------------

CHAINERMN = [
    ("train_mnist.py", 2, []),
    ("train_mnist.py", 2, ["--communicator", "flat"]),
    ("train_mnist_model_parallel.py", 2, []),
    ("train_mnist_dual_parallel.py", 4, []),
]


@pytest.mark.parametrize(
    "script,n,args", CHAINERMN, ids=["mnist", "mnist_flat", "mnist_model_parallel", "mnist_dual_parallel"]
)
def test_chainermn_script_under_srun_across_two_nodes(cluster, tmp_path, script, n, args):
    out = tmp_path / "result"
    start = time.time()
    res = cluster.run(
        [
            "srun",
            "-N2",
            f"-n{n}",
            PYTHON,
            "-m",
            "mnframe.compat",
            SCRIPTS / script,
            "--out",
            out,
            "--epoch",
            "3",
            *args,
        ],
        # a hang ends with mnframe's line before the 180 s kill: in a collective (the report naming
        # it), in MPI_Init (Slurm's PMI exchange) or after the exit barrier (runtime/mpi_phase_watch.py)
        env={
            "MPIR_CVAR_CH4_NETMOD": None,
            "PYTHONPATH": str(REPO),
            "MNFRAME_COLLECTIVE_TIMEOUT": "90",
            "MNFRAME_MPI_START_TIMEOUT": "90",
        },
        cwd=str(tmp_path),
        timeout=180,
    )
    print(f"srun -N2 -n{n} {script} {' '.join(args)}: {time.time() - start:.1f} s, status {res.returncode}")
    assert not res.timed_out, f"hung: {res.output[-4000:]}"
    assert res.returncode == 0, res.output[-4000:]
    assert "using MPIR_CVAR_CH4_NETMOD=ofi" in res.stderr
    log = json.loads((out / "log").read_text())
    assert [e["epoch"] for e in log] == [1, 2, 3], log
    assert log[-1]["main/loss"] < 0.8 * log[0]["main/loss"], log


# -- the sbatch example loses a node -----------------------------------------------------------------


def job_state(cluster, job):
    out = cluster.run(["scontrol", "show", "job", job], timeout=30).stdout
    found = re.search(r"\bJobState=(\S+)", out)
    return found.group(1) if found else "GONE"


def wait_until(predicate, timeout, what):
    end = time.time() + timeout
    while time.time() < end:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def ended(state):
    """``state`` if the job is over (a requeued job passes through PENDING, not one of these)."""
    return state if state in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "GONE") else None


def first_checkpoint(run_dir):
    done = sorted((run_dir / "checkpoints").glob("iter_*/manifest.json"))
    return done[0].parent if done else None


@pytest.mark.parametrize(
    "recipe,lost",
    [(None, 2), ("mnist_dual_parallel", 2), (None, 1), ("mnist_dual_parallel", 1)],
    ids=["data_parallel", "dual_parallel", "batch_host_data_parallel", "batch_host_dual_parallel"],
)
def test_sbatch_example_loses_a_node_and_ends_with_the_final_model(fresh_cluster, tmp_path, recipe, lost):
    """Node ``lost`` dies after the first checkpoint, node2 or node1 (the batch host): Slurm
    requeues the job, which starts again on the node left, removes the MPICH shared memory the
    killed attempt left there and resumes at world size 2."""
    cluster = fresh_cluster
    run_dir = tmp_path / "run"
    output = Path(f"{run_dir}.out")
    overrides = [f"recipe={recipe}"] if recipe else []  # the example's recipe=mnist otherwise
    res = cluster.run(
        ["sbatch", "--parsable", f"--output={output}", SBATCH, *overrides, f"trainer.stop=[{STOP},iteration]"],
        env={"RUN_DIR": str(run_dir)},
        cwd=str(REPO),
        timeout=60,
    )
    assert res.returncode == 0, res.output
    job = res.stdout.strip().split(";")[0]
    try:
        ckpt = wait_until(lambda: first_checkpoint(run_dir), 300, "the first checkpoint")
        before = dict(np.load(ckpt / "rank_00000.npz"))
        killed = time.time()
        cluster.kill_node(lost)
        # no command from anyone from here on: the job must end by itself
        final = wait_until(lambda: ended(job_state(cluster, job)), 720, f"job {job} to end")
        took = time.time() - killed
    finally:
        cluster.run(["scancel", job], timeout=30)
    out = output.read_text()
    print(f"{recipe or 'mnist'}: node{lost} killed after {ckpt.name}; the job ended {took:.0f} s later")
    print(
        "\n".join(
            ln for ln in out.splitlines() if ln.startswith(("train.sbatch:", "mnframe: node")) or "resumed from" in ln
        )
    )
    assert final == "COMPLETED", out[-4000:]
    assert "training on 2 node(s) (node[1-2]) at world size 4" in out, out[-4000:]
    left = 3 - lost
    said = (
        rf"requeued by Slurm \(restart 1\): node\(s\) node{lost} lost; resuming from checkpoint iter_\d+ "
        rf"at world size 2 on 1 node\(s\) \(node{left}\)"
    )
    assert re.search(said, out), out[-4000:]
    assert f"mnframe: node{left}: " in out, out[-4000:]  # the requeued attempt's shared-memory clean-up ran
    assert f"training on 1 node(s) (node{left}) at world size 2" in out, out[-4000:]
    resumed = [ln for ln in out.splitlines() if "mnframe checkpoint: resumed from" in ln]
    assert len(resumed) == 1 and "world size 4 -> 2" in resumed[0], out[-4000:]
    if recipe:
        assert "2 stages x 2 replicas -> model parallel, 2 stages x 1 replica" in resumed[0], resumed
    at = int(re.search(r"\(iteration (\d+)\)", resumed[0]).group(1))
    assert at >= 100 and f"mnframe: done: {STOP} iterations" in out, out[-4000:]
    # training went on after the resume, to the full length, and the final model is a new one
    log = json.loads((run_dir / "log").read_text())
    its = [e["iteration"] for e in log]
    assert its[-1] == STOP and its == sorted(set(its)) and any(i > at for i in its), its
    assert log[-1]["main/loss"] < log[0]["main/loss"], log
    models = sorted(run_dir.glob("model*.npz"))
    assert models, sorted(p.name for p in run_dir.iterdir())
    compared = 0
    with np.load(models[0]) as final:
        for key in final.files:
            old = before.get(f"updater/model:main/predictor/{key}")
            if old is not None and old.shape == final[key].shape:
                assert not np.array_equal(old, final[key]), f"{key} did not change after {ckpt.name}"
                compared += 1
    assert compared or recipe, (final.files, sorted(before))
