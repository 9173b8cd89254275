"""bench/bench_scatter.py --small runs and both sides produce the same shards (correctness only)."""

from pathlib import Path

from mnframe.testing import run_mpi

ROOT = Path(__file__).resolve().parents[1]


def test_bench_scatter_small():
    result = run_mpi([str(ROOT / "bench" / "bench_scatter.py"), "--small"], n=2, timeout=180, cwd=str(ROOT))
    assert not result.timed_out, result.output[-3000:]
    assert result.returncode == 0, result.output[-3000:]
    assert "shards identical on both sides: True" in result.stdout
    assert "correctness: PASS" in result.stdout
