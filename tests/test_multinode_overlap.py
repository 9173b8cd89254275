"""overlap=True across simulated nodes: bitwise the result of averaging after backward (issue 23).

Real namespaces and 1 Gbit/s links (``scripts/simcluster.sh``, cluster ``mno``), not a fake node
size: two_dimensional (the default) and hierarchical, and two_dimensional with float16 on the wire,
2 nodes x 2 ranks and 3 nodes x 1 rank, the buckets averaged by the pipelined exchange between
nodes while backward runs.
Runs only where asked (``SIMCLUSTER_TESTS=1``) and where it can (root, network namespaces).
"""

from pathlib import Path

import pytest

from mnframe.testing.simcluster import SimCluster, simcluster_skip_reason

REPO = Path(__file__).resolve().parent.parent
TIMEOUT = 180


pytestmark = pytest.mark.skipif(simcluster_skip_reason() is not None, reason=str(simcluster_skip_reason()))


@pytest.fixture(scope="module")
def cluster():
    c = SimCluster(name="mno", nodes=3, rate="1gbit")
    c.up()
    yield c
    c.down()


@pytest.mark.parametrize("nodes,ppn", [(2, 2), (3, 1)], ids=["2x2", "3x1"])
def test_overlap_is_bitwise_averaging_after_backward_across_nodes(cluster, nodes, ppn):
    script = REPO / "tests" / "multinode" / "overlap_check.py"
    res = cluster.mpiexec([script], nodes=nodes, ppn=ppn, timeout=TIMEOUT, cwd=str(REPO))
    assert not res.timed_out and res.returncode == 0, res.output[-4000:]
    assert f"OVERLAP_CHECK OK nodes={nodes} size={nodes * ppn}" in res.stdout, res.output[-4000:]
    assert "two_dimensional float16" in res.stdout
