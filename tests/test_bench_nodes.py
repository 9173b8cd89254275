"""bench_nodes: the bound it prints, and its worker's small mode (on fake nodes, without a cluster)."""

import importlib.util
from pathlib import Path

import pytest

from mnframe.testing import run_mpi

ROOT = Path(__file__).resolve().parents[1]


def _module():
    spec = importlib.util.spec_from_file_location("bench_nodes", ROOT / "bench" / "bench_nodes.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_bound_is_what_one_node_sends_over_its_link():
    mod = _module()
    assert mod.rate_bytes("1gbit") == 125e6 and mod.rate_bytes("100mbit") == 12.5e6
    assert mod.bound_seconds(102.2e6, 2, "1gbit") == pytest.approx(0.8176)  # issue 23: 818 ms
    assert mod.bound_seconds(102.2e6, 3, "1gbit") == pytest.approx(4 / 3 * 0.8176)
    assert mod.bound_seconds(1e6, 1, "1gbit") == 0.0


def test_worker_small_on_fake_nodes():
    argv = [str(ROOT / "bench" / "bench_nodes.py"), "--worker", "--small", "--repeat", "1", "--warmup", "0"]
    result = run_mpi(argv, n=2, timeout=180, cwd=str(ROOT), env={"MNFRAME_FAKE_NODE_SIZE": "1"})
    assert not result.timed_out, result.output[-4000:]
    assert result.returncode == 0, result.output[-4000:]
    assert '"nodes": 2' in result.stdout and "mnframe two_dimensional float16" in result.stdout
    assert "mnframe two_dimensional auto" in result.stdout and '"wire": "float' in result.stdout  # it chose
