"""bench/bench_gpu.py (issue 6): skips cleanly without CUDA, imports lazily, its helpers and its harness work.

No GPU is needed: the script is run with CUDA hidden (it must print its skip
line and exit 0), and once with ``--cpu``, which drives the same harness with
NumPy arrays and a CPU stand-in for the GPU on 2 ranks.
"""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mnframe.testing import run_mpi

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "bench" / "bench_gpu.py"


def _load():
    spec = importlib.util.spec_from_file_location("bench_gpu_under_test", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bench_gpu = _load()


def test_skips_without_cuda():
    # CUDA_VISIBLE_DEVICES="" hides any GPU, so this holds on GPU machines too
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    proc = subprocess.run(
        [sys.executable, str(SCRIPT)], cwd=str(REPO), env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("bench_gpu: skipped: no CUDA device ("), proc.stdout
    if importlib.util.find_spec("cupy") is None:
        assert lines[0].startswith("bench_gpu: skipped: no CUDA device (CuPy is not installed")


def test_import_is_lazy():
    code = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('m', {str(SCRIPT)!r})\n"
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        "print(sorted(n for n in ('cupy', 'chainer', 'mpi4py') if n in sys.modules))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=str(REPO), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_parse_variant():
    assert bench_gpu.parse_variant("pure_nccl") == ("pure_nccl", {})
    assert bench_gpu.parse_variant("pure_nccl+fp16") == ("pure_nccl", {"allreduce_grad_dtype": "float16"})
    assert bench_gpu.parse_variant(" pure_nccl + batched_copy + float16 ") == (
        "pure_nccl",
        {"batched_copy": True, "allreduce_grad_dtype": "float16"},
    )
    for bad in ("pure_nccl+fp17", "+fp16", ""):
        with pytest.raises(ValueError):
            bench_gpu.parse_variant(bad)
    for spec in bench_gpu.DEFAULT_VARIANTS:  # every default variant parses
        bench_gpu.parse_variant(spec)


def test_default_variants_are_the_issue_list():
    names = {bench_gpu.parse_variant(v)[0] for v in bench_gpu.DEFAULT_VARIANTS}
    assert names == {"pure_nccl", "hierarchical", "two_dimensional", "single_node", "non_cuda_aware", "flat", "naive"}
    assert "pure_nccl+fp16" in bench_gpu.DEFAULT_VARIANTS
    assert "pure_nccl+batched_copy" in bench_gpu.DEFAULT_VARIANTS


def test_bus_bandwidth_and_wire_bytes():
    # 2 (n - 1) / n x bytes / time: 8 ranks, 1 GB in 1 s -> 1.75 GB/s; 2 ranks, 100 MB in 10 ms -> 10 GB/s
    assert bench_gpu.bus_bandwidth_gbps(1e9, 1.0, 8) == pytest.approx(1.75)
    assert bench_gpu.bus_bandwidth_gbps(100e6, 0.01, 2) == pytest.approx(10.0)
    assert bench_gpu.bus_bandwidth_gbps(100e6, 0.01, 1) is None
    assert bench_gpu.bus_bandwidth_gbps(100e6, 0.0, 4) is None
    assert bench_gpu.wire_itemsize({}) == 4
    assert bench_gpu.wire_itemsize({"allreduce_grad_dtype": "float16"}) == 2


def test_tolerance_by_wire_dtype():
    assert bench_gpu.tolerance({"allreduce_grad_dtype": "float16"})[0] == 1e-2
    assert bench_gpu.tolerance({})[0] == 1e-5


def test_failures_and_reasons():
    assert bench_gpu.first_failure([None, None]) is None
    assert bench_gpu.first_failure([None, "x", "y"]) == (1, "x", False)
    assert bench_gpu.first_failure(["x", "y"]) == (0, "x", True)
    assert bench_gpu.na((0, "NcclError: duplicate GPU", True)) == "n/a: NcclError: duplicate GPU"
    assert bench_gpu.na((1, "OSError: x", False)) == "n/a: OSError: x (rank 1)"
    reason = bench_gpu.short_reason(RuntimeError("first line\nsecond line"))
    assert reason == "RuntimeError: first line"
    assert len(bench_gpu.short_reason(ValueError("z" * 500))) == 90
    assert bench_gpu.short_reason(KeyError()) == "KeyError"
    assert bench_gpu.skip_line(["CuPy not installed"]) == "bench_gpu: skipped: no CUDA device (CuPy not installed)"
    assert bench_gpu.skip_line([None, "no device visible to CuPy"]) == (
        "bench_gpu: skipped: no CUDA device on rank(s) 1 (no device visible to CuPy)"
    )


def test_comm_share_and_table():
    assert bench_gpu.comm_share(0.2, 0.15) == pytest.approx(0.25)
    assert bench_gpu.comm_share(None, 0.15) is None
    assert bench_gpu.comm_share(0.2, None) is None
    table = bench_gpu.format_table(("a", "b"), [["x", 1.5], ["y", "-"]])
    assert table.splitlines() == ["| a | b |", "|---|---|", "| x | 1.5 |", "| y | - |"]
    assert bench_gpu.fmt(None, ".1f") == "-" and bench_gpu.fmt(2.25, ".1f") == "2.2"


def test_one_rank_checks_nothing_and_says_so():
    """On one rank nothing is exchanged: the check column must not claim PASS."""
    args = [
        str(SCRIPT),
        "--cpu",
        "--small",
        "--parts",
        "allreduce",
        "--repeat",
        "1",
        "--communicators",
        "naive,two_dimensional",
    ]
    res = run_mpi(args, n=1, timeout=120, cwd=str(REPO))
    assert res.returncode == 0, res.output[-3000:]
    rows = [line for line in res.stdout.splitlines() if line.startswith(("| naive", "| two_"))]
    assert len(rows) == 2 and all("PASS" not in r and "one rank: nothing exchanged" in r for r in rows), res.stdout


def test_harness_on_cpu_two_ranks():
    """--cpu drives the whole harness (collective n/a decisions, checks, training loop) with NumPy."""
    args = [
        str(SCRIPT),
        "--cpu",
        "--small",
        "--arch",
        "nin",
        "--iterations",
        "1",
        "--train-warmup",
        "2",
        "--communicators",
        "pure_nccl,naive,two_dimensional+fp16,dummy",
    ]
    res = run_mpi(args, n=2, timeout=120, cwd=str(REPO))
    assert not res.timed_out, res.output[-3000:]
    assert res.returncode == 0, res.output[-3000:]
    rows = {
        line.split("|")[1].strip(): [c.strip() for c in line.strip().strip("|").split("|")]
        for line in res.stdout.splitlines()
        if line.startswith("| ") and not line.startswith("| communicator")
    }
    assert rows["pure_nccl"][-1].startswith("n/a: RuntimeError"), res.stdout
    assert rows["naive"][5] == "PASS" and rows["two_dimensional+fp16"][5] == "PASS", res.stdout
    assert rows["two_dimensional+fp16"][1] == "float16"
    assert rows["dummy"][5] == "-"
    assert rows["two_dimensional"][3] != "-", res.stdout  # training fell back past pure_nccl/non_cuda_aware
    assert "dummy (no exchange)" in rows or "none (plain MomentumSGD)" in rows
    assert "gradient exchange share of an iteration" in res.stdout
