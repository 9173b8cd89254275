"""The allreduce benchmark's small mode runs on 2 ranks and its averaged results check out."""

from pathlib import Path

from mnframe.testing import run_mpi

ROOT = Path(__file__).resolve().parents[1]


def test_bench_allreduce_small():
    result = run_mpi([str(ROOT / "bench" / "bench_allreduce.py"), "--small"], n=2, timeout=180, cwd=str(ROOT))
    assert not result.timed_out, result.output[-4000:]
    assert result.returncode == 0, result.output[-4000:]
    assert "correctness: PASS" in result.stdout
    for name in ("naive", "flat", "hierarchical", "two_dimensional", "single_node"):
        assert f"mnframe {name} (resident)" in result.stdout
