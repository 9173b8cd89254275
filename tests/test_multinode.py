"""mnframe across simulated nodes (issue 28): real namespaces, hostnames and links, not a fake node size.

A cluster of 3 nodes (``scripts/simcluster.sh``, links capped at 1 Gbit/s) is built once for the
module and torn down after it. The ranks are started by the mpich wheel's ``mpiexec`` through the
cluster's launcher, so traffic between nodes crosses the capped veth links (OFI netmod, tcp).
Runs only where asked (``SIMCLUSTER_TESTS=1``, the CI ``multinode`` leg) and where it can (root,
network namespaces); elsewhere every test skips with the reason.
"""

import json
import os
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from mnframe.testing.simcluster import SimCluster, simcluster_skip_reason, wait_for_checkpoint

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = REPO / "tests" / "multinode"
TIMEOUT = 240
DEADLINE = 20  # MNFRAME_COLLECTIVE_TIMEOUT of the failure tests (s)
LOG_EVERY_ITERATION = ["extensions=minimal", "extensions.log_report.interval=1", "extensions.log_report.unit=iteration"]
SMALL = ["model.n_units=16", "dataset.batch_size=20", *LOG_EVERY_ITERATION]


pytestmark = pytest.mark.skipif(simcluster_skip_reason() is not None, reason=str(simcluster_skip_reason()))


@pytest.fixture(scope="module")
def cluster():
    c = SimCluster(name="mnt", nodes=3, rate="1gbit")
    c.up()
    yield c
    c.down()


def mnframe_job(cluster, run_dir, *overrides, nodes=2, ppn=1, env=None, timeout=TIMEOUT):
    args = ["-m", "mnframe", *overrides, f"hydra.run.dir={run_dir}"]
    full_env = {"PYTHONPATH": str(REPO)}
    full_env.update(env or {})
    return cluster.mpiexec(args, nodes=nodes, ppn=ppn, timeout=timeout, env=full_env, cwd=str(REPO))


def log_iterations(run_dir):
    return [e["iteration"] for e in json.loads((Path(run_dir) / "log").read_text())]


def trained(run_dir, iterations):
    log = json.loads((Path(run_dir) / "log").read_text())
    assert [e["iteration"] for e in log] == list(range(1, iterations + 1))
    losses = [e["main/loss"] for e in log]
    assert np.mean(losses[-3:]) < np.mean(losses[:3]), losses
    return log


# -- communicators, node detection, scatter_dataset ----------------------------------------------


@pytest.mark.parametrize("nodes,ppn", [(3, 1), (2, 2)], ids=["3x1", "2x2"])
def test_every_cpu_communicator_gives_the_exact_mean_across_nodes(cluster, nodes, ppn):
    res = cluster.mpiexec([SCRIPTS / "comm_check.py"], nodes=nodes, ppn=ppn, timeout=TIMEOUT, cwd=str(REPO))
    assert not res.timed_out and res.returncode == 0, res.output[-4000:]
    hosts = [f"node{i}" for i in range(1, nodes + 1) for _ in range(ppn)]
    assert f"COMM_CHECK OK nodes={nodes} size={nodes * ppn} hosts={hosts}" in res.stdout, res.output[-4000:]
    assert "two_dimensional" in res.stdout and "hierarchical" in res.stdout


# -- the runner's jobs ------------------------------------------------------------------------------


@pytest.mark.parametrize("ppn", [1, 2])
def test_default_job_trains_across_two_nodes(cluster, tmp_path, ppn):
    res = mnframe_job(cluster, tmp_path, *SMALL, "trainer.stop=[12,iteration]", ppn=ppn)
    assert not res.timed_out and res.returncode == 0, res.output[-4000:]
    trained(tmp_path, 12)
    assert (tmp_path / "model.npz").exists()


def test_model_parallel_recipe_across_two_nodes(cluster, tmp_path):
    """Rank 0 (head, tail) on node1, rank 1 (middle) on node2: every step crosses the link twice."""
    res = mnframe_job(
        cluster, tmp_path, "recipe=mnist_model_parallel", *LOG_EVERY_ITERATION, "trainer.stop=[8,iteration]", ppn=1
    )
    assert not res.timed_out and res.returncode == 0, res.output[-4000:]
    assert log_iterations(tmp_path)[-1] == 8


def test_dual_parallel_recipe_stage_replicas_on_different_nodes(cluster, tmp_path):
    """2 nodes x 2 ranks: model groups {0,1} on node1 and {2,3} on node2, so each stage's replicas
    (ranks 0 and 2, ranks 1 and 3) average their gradients across the nodes."""
    res = mnframe_job(
        cluster, tmp_path, "recipe=mnist_dual_parallel", *LOG_EVERY_ITERATION, "trainer.stop=[8,iteration]", ppn=2
    )
    assert not res.timed_out and res.returncode == 0, res.output[-4000:]
    assert log_iterations(tmp_path)[-1] == 8


# -- a node lost: killed ranks, a cut link ----------------------------------------------------------


def _node_python_pids(cluster, node):
    out = subprocess.run(["ip", "netns", "pids", f"{cluster.name}-node{node}"], capture_output=True, text=True).stdout
    pids = []
    for pid in out.split():
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"mnframe" in cmd and b"python" in cmd[0]:  # python -m mnframe: the rank, not its sentinel
            pids.append(int(pid))
    return pids


def _lose_node(cluster, tmp_path, how, overrides=SMALL, ppn=1):
    """Train on 2 nodes x ``ppn`` ranks; at the first checkpoint lose node 2 (``how``); the MpiResult
    and the time from the loss to the end of the job."""
    done = threading.Event()
    event = {}
    result = {}

    def run():
        result["res"] = mnframe_job(
            cluster,
            tmp_path,
            *overrides,
            "trainer.stop=[400,iteration]",
            "checkpoint.interval=5",
            ppn=ppn,
            env={"MNFRAME_COLLECTIVE_TIMEOUT": str(DEADLINE)},
            timeout=TIMEOUT,
        )
        result["end"] = time.time()
        done.set()

    thread = threading.Thread(target=run)
    thread.start()
    try:
        assert wait_for_checkpoint(tmp_path, done, timeout=150), "no checkpoint before the job ended"
        time.sleep(1.0)
        event["t"] = time.time()
        if how == "kill":
            pids = _node_python_pids(cluster, 2)
            assert pids, "no rank found on node2"
            for pid in pids:
                os.kill(pid, signal.SIGKILL)
        else:
            subprocess.run(
                ["ip", "netns", "exec", f"{cluster.name}-node2", "ip", "link", "set", "eth0", "down"], check=True
            )
        thread.join(TIMEOUT + 30)
    finally:
        if how == "cut":
            subprocess.run(["ip", "netns", "exec", f"{cluster.name}-node2", "ip", "link", "set", "eth0", "up"])
    return result["res"], result["end"] - event["t"]


def _resume_on_node1(cluster, tmp_path, overrides=SMALL, ppn=1):
    """Resume the run on the remaining node (``ppn`` ranks) and check it went on from its checkpoint."""
    saved = sorted(p.parent.name for p in (tmp_path / "checkpoints").glob("iter_*/manifest.json"))
    assert saved, "no complete checkpoint left"
    last = int(saved[-1].split("_")[1])
    stop = last + 20  # how far the lost job got depends on the machine's speed: go on 20 past its checkpoint
    res = mnframe_job(
        cluster, tmp_path, *overrides, f"trainer.stop=[{stop},iteration]", "checkpoint.interval=5", nodes=1, ppn=ppn
    )
    assert not res.timed_out and res.returncode == 0, res.output[-4000:]
    assert f"{saved[-1]} (iteration {last})" in res.output, res.output[
        -4000:
    ]  # "resumed from .../iter_N (iteration N)"
    assert log_iterations(tmp_path)[-1] == stop
    assert list(tmp_path.glob("model*.npz"))
    return last, res


def test_node_killed_ends_the_job_fast_and_resumes_on_the_other_node(cluster, tmp_path):
    res, took = _lose_node(cluster, tmp_path, "kill")
    print(f"node killed: the job ended {took:.1f} s later, status {res.returncode}")
    assert not res.timed_out, res.output[-4000:]
    assert res.returncode != 0
    assert took < DEADLINE + 15, f"job ended {took:.1f} s after the kill\n{res.output[-3000:]}"
    # mpiexec names the killed process by pid and host (not by rank) and the signal
    assert "RUNNING AT node2" in res.output and "EXIT CODE: 9" in res.output, res.output[-3000:]
    _resume_on_node1(cluster, tmp_path)


def test_link_cut_ends_the_job_within_the_deadline_and_resumes_on_the_other_node(cluster, tmp_path):
    res, took = _lose_node(cluster, tmp_path, "cut")
    print(f"link cut: the job ended {took:.1f} s later, status {res.returncode}\n{res.stderr[-3000:]}")
    assert not res.timed_out, res.output[-4000:]
    assert res.returncode != 0
    assert took < DEADLINE + 20, f"job ended {took:.1f} s after the cut\n{res.output[-3000:]}"
    assert "collective timeout" in res.output and "rank 1" in res.output, res.output[-3000:]
    _resume_on_node1(cluster, tmp_path)


DUAL = ["recipe=mnist_dual_parallel", *LOG_EVERY_ITERATION]


def test_dual_parallel_loses_a_node_and_resumes_on_the_two_ranks_left(cluster, tmp_path):
    """2 nodes x 2 ranks of the dual-parallel recipe (a replica of both stages per node); node 2 is
    killed; the run resumes on node 1's 2 ranks: 2 stages x 2 replicas -> 2 stages x 1 replica."""
    res, took = _lose_node(cluster, tmp_path, "kill", overrides=DUAL, ppn=2)
    print(f"dual parallel, node killed: the job ended {took:.1f} s later, status {res.returncode}")
    assert not res.timed_out and res.returncode != 0, res.output[-4000:]
    saved = sorted((tmp_path / "checkpoints").glob("iter_*/manifest.json"))
    layout = json.loads(saved[-1].read_text())["layout"]
    assert layout["stages"] == 2 and layout["replicas"] == 2, layout
    _, res = _resume_on_node1(cluster, tmp_path, overrides=DUAL, ppn=2)
    lines = [ln for ln in res.output.splitlines() if "resumed from" in ln]
    assert len(lines) == 1 and "world size 4 -> 2: data re-sharded" in lines[0], res.output[-4000:]
    assert "2 stages x 2 replicas -> model parallel, 2 stages x 1 replica" in lines[0]
    assert "(the old replicas of each stage held equal parameters)" in lines[0]


# -- doctor ------------------------------------------------------------------------------------------


def test_doctor_names_hosts_transport_and_measures_the_capped_link(cluster):
    res = cluster.mpiexec(["-m", "mnframe", "doctor"], nodes=2, ppn=2, timeout=TIMEOUT, cwd=str(REPO))
    assert not res.timed_out and res.returncode == 0, res.output[-4000:]
    out = res.stdout
    assert "2 host(s): node1: ranks [0, 1]; node2: ranks [2, 3]" in out, out
    assert "transport: between nodes: MPICH ch4 netmod ofi" in out and "node2: eth0" in out, out
    between = re.search(r"bandwidth between nodes: rank 0 \(node1\) <-> rank 2 \(node2\): .*\(([\d.]+) Gbit/s", out)
    within = re.search(r"bandwidth within a node: rank 0 \(node1\) <-> rank 1 \(node1\): .*\(([\d.]+) Gbit/s", out)
    assert between and within, out
    print(f"doctor: between nodes {between.group(1)} Gbit/s (link capped at 1 Gbit/s), within {within.group(1)}")
    assert 0.05 < float(between.group(1)) <= 1.1, out  # the tbf cap holds
