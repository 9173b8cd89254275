"""The end-to-end and start-up benchmarks run in their quick ``--small`` modes (correctness, not timing).

Both sides (``python -m mnframe`` and the plain ChainerMN peer script) must
finish and report a measurement; the numbers themselves are not checked.
"""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _run(script, *args, timeout=300):
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / script), "--small", *args],
        cwd=str(REPO),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, (
        f"{script} --small exited {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    )
    return proc.stdout


def test_bench_e2e_small_runs_both_sides():
    out = _run("bench_e2e.py", "--workloads", "mnist", "imagenet", "--ranks", "2")
    rows = [line for line in out.splitlines() if line.startswith(("| mnist", "| imagenet"))]
    assert len(rows) == 2, out
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        mnframe_rate, peer_rate = cells[2], cells[3]
        assert mnframe_rate != "-" and peer_rate != "-", out  # both sides measured


def test_bench_startup_small_runs_both_sides():
    out = _run("bench_startup.py", "--ranks", "2")
    assert "import mnframe" in out and "verdict:" in out, out
    assert "| mnframe | -" not in out and "| peer | -" not in out, out
