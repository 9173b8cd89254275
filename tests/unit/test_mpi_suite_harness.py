"""The MPI suite's harness (mnframe/testing/mpi_suite.py): one launch per rank count, a verdict per test.

Each case lays out a small project of its own (tests/conftest.py + tests/mpi/test_demo.py) and runs
pytest on it as a user would; the outer report must name each bad test and pass the good ones.
"""

import os
import subprocess
import sys
import textwrap
from xml.etree import ElementTree

import pytest

CONFTEST = "from mnframe.testing.mpi_suite import *  # noqa\n"


def _project(tmp_path, body, header="MPI_SIZES = (1, 2)\nMPI_TIMEOUT = 20\n"):
    (tmp_path / "tests" / "mpi").mkdir(parents=True)
    (tmp_path / "tests" / "conftest.py").write_text(CONFTEST)
    (tmp_path / "tests" / "mpi" / "test_demo.py").write_text(header + textwrap.dedent(body))
    return tmp_path


def _run(root, *args, timeout=300, env=None):
    """(exit status, output, {'test_x@np2': 'passed'|'failed'|'skipped'}) of pytest on the project."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", "/dev/null", "--rootdir", str(root)]
    cmd += ["--junitxml", str(root / "report.xml"), *args, str(root / "tests")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})})
    outcomes = {}
    for case in ElementTree.parse(root / "report.xml").iter("testcase"):
        kinds = [child.tag for child in case if child.tag in ("failure", "error", "skipped")]
        outcomes[case.get("name")] = {"failure": "failed", "error": "failed", "skipped": "skipped"}.get(
            kinds[0] if kinds else "", "passed"
        )
    return proc.returncode, proc.stdout + proc.stderr, outcomes


@pytest.mark.slow  # a subprocess or many config compositions: the full tier
def test_one_launch_per_rank_count_and_a_failure_fails_only_itself(tmp_path):
    root = _project(
        tmp_path,
        """
        import pytest
        from mpi4py import MPI

        def test_a_sum():
            assert MPI.COMM_WORLD.allreduce(1) == MPI.COMM_WORLD.size

        def test_fails_on_the_last_rank():
            comm = MPI.COMM_WORLD
            comm.Barrier()
            assert comm.rank != comm.size - 1, "planted"

        def test_skips_without_a_peer():
            if MPI.COMM_WORLD.size < 2:
                pytest.skip("needs a peer")

        def test_z_pid():
            import os
            MPI.COMM_WORLD.allgather(os.getppid())
        """,
    )
    rc, out, got = _run(root)
    assert rc == 1, out
    assert got["test_a_sum@np1"] == got["test_a_sum@np2"] == "passed", out
    # np1: the only rank is the last; np2: rank 1 fails after the barrier, rank 0 passes
    assert got["test_fails_on_the_last_rank@np1"] == got["test_fails_on_the_last_rank@np2"] == "failed", out
    assert got["test_skips_without_a_peer@np1"] == "skipped" and got["test_skips_without_a_peer@np2"] == "passed"
    assert got["test_z_pid@np1"] == got["test_z_pid@np2"] == "passed", out
    assert "planted" in out and "rank 1" in out


@pytest.mark.slow
def test_a_hang_a_stranded_failure_and_a_crash_are_named_and_the_rest_still_run(tmp_path):
    root = _project(
        tmp_path,
        """
        import os, time
        from mpi4py import MPI
        comm = MPI.COMM_WORLD

        def test_1_hangs_on_rank_0():
            if comm.rank == 0:
                time.sleep(60)

        def test_2_after_the_hang():
            assert comm.allreduce(1) == comm.size

        def test_3_fails_on_rank_0_while_rank_1_waits():
            assert comm.rank != 0, "planted"
            comm.bcast(None, root=0)

        def test_4_after_the_stranded_failure():
            assert comm.allreduce(1) == comm.size

        def test_5_crashes_rank_1():
            if comm.rank == 1:
                os._exit(9)
            comm.Barrier()

        def test_6_after_the_crash():
            assert comm.allreduce(1) == comm.size
        """,
        header="MPI_SIZES = (2,)\nMPI_TIMEOUT = 6\n",
    )
    rc, out, got = _run(root, "--full", timeout=400, env={"MNFRAME_MPI_SUITE_GRACE": "2"})
    assert rc == 1, out
    assert got["test_1_hangs_on_rank_0@np2"] == "failed" and "HUNG" in out, out
    assert got["test_3_fails_on_rank_0_while_rank_1_waits@np2"] == "failed" and "planted" in out, out
    assert got["test_5_crashes_rank_1@np2"] == "failed" and "died in this test" in out, out
    for name in ("test_2_after_the_hang", "test_4_after_the_stranded_failure", "test_6_after_the_crash"):
        assert got[f"{name}@np2"] == "passed", out
