"""``python -m mnframe.compat`` runs ChainerMN programs unchanged (issue 16.6).

The program sees what plain ``python`` gives it (argv, ``__main__``, sys.path[0]),
``chainermn`` is mnframe, and the abort guard ends the whole MPI job when one
rank raises. Every MPI job runs under a timeout (run_mpi kills its group).
"""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from mnframe.testing import run_mpi

REPO = Path(__file__).resolve().parent.parent

PROBE = textwrap.dedent("""
    import json, pickle, sys

    class Point:  # defined in __main__: pickles by reference, as under plain python
        pass

    me = sys.modules["__main__"]
    print("PROBE " + json.dumps({
        "argv": sys.argv, "name": __name__, "path0": sys.path[0], "file": globals().get("__file__"),
        "spec_none": globals().get("__spec__") is None, "main_is_me": me.__dict__ is globals(),
        "pickles": type(pickle.loads(pickle.dumps(Point()))).__name__,
        "chainermn": sys.modules["chainermn"].__name__ if "chainermn" in sys.modules else None,
    }))
""")


def _probe(output):
    line = next(s for s in output.splitlines() if s.startswith("PROBE "))
    return json.loads(line[len("PROBE ") :])


def _python(args, cwd):
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=cwd, timeout=120)


def test_a_script_sees_what_plain_python_gives_it(tmp_path):
    (tmp_path / "sub").mkdir()
    script = tmp_path / "sub" / "probe.py"
    script.write_text(PROBE)
    plain = _python([str(script), "--epoch", "3", "-m", "x"], cwd=tmp_path)
    wrapped = _python(["-m", "mnframe.compat", str(script), "--epoch", "3", "-m", "x"], cwd=tmp_path)
    assert plain.returncode == 0 and wrapped.returncode == 0, wrapped.stderr[-3000:]
    assert _probe(wrapped.stdout) == _probe(plain.stdout)
    assert _probe(wrapped.stdout)["argv"] == [str(script), "--epoch", "3", "-m", "x"]


def test_a_module_sees_what_python_dash_m_gives_it(tmp_path):
    (tmp_path / "probe_mod.py").write_text(PROBE)
    plain = _python(["-m", "probe_mod", "a", "b"], cwd=tmp_path)
    wrapped = _python(["-m", "mnframe.compat", "-m", "probe_mod", "a", "b"], cwd=tmp_path)
    assert plain.returncode == 0 and wrapped.returncode == 0, wrapped.stderr[-3000:]
    got, want = _probe(wrapped.stdout), _probe(plain.stdout)
    assert got.pop("spec_none") is False and want.pop("spec_none") is False
    assert got == want and got["argv"] == [str(tmp_path / "probe_mod.py"), "a", "b"]


def test_chainermn_is_mnframe_inside_the_program(tmp_path):
    code = (
        "import chainermn, chainermn.communicators.flat_communicator as f, mnframe.communicators.flat as g\n"
        "print('SAME', chainermn.__name__, f.FlatCommunicator is g.FlatCommunicator)"
    )
    result = _python(["-m", "mnframe.compat", "-c", code], cwd=tmp_path)
    assert "SAME mnframe True" in result.stdout, result.stderr[-3000:]


@pytest.mark.parametrize(
    "args,message",
    [
        ([], "usage: python -m mnframe.compat"),
        (["-m"], "argument expected for the -m option"),
        (["--bogus"], "unknown option '--bogus'"),
        (["missing_script.py"], "can't open file"),
    ],
)
def test_usage_errors_exit_2_with_a_message(tmp_path, args, message):
    result = _python(["-m", "mnframe.compat", *args], cwd=tmp_path)
    assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr


def test_sys_exit_status_is_the_programs(tmp_path):
    script = tmp_path / "exit3.py"
    script.write_text("import sys\nsys.exit(3)\n")
    assert _python(["-m", "mnframe.compat", str(script)], cwd=tmp_path).returncode == 3


FAILING = textwrap.dedent("""
    import chainermn

    def train(comm):
        if comm.rank == comm.size - 1:
            raise ValueError("bad batch on the last rank")
        comm.mpi_comm.barrier()  # the other ranks would wait here forever without the guard

    comm = chainermn.create_communicator("naive")
    train(comm)
""")


@pytest.mark.parametrize("n", [2, 3])
def test_an_uncaught_exception_on_one_rank_aborts_the_job(tmp_path, n):
    script = tmp_path / "failing.py"
    script.write_text(FAILING)
    result = run_mpi(
        ["-m", "mnframe.compat", str(script)],
        n=n,
        timeout=60,
        cwd=str(tmp_path),
        env={"MNFRAME_COLLECTIVE_TIMEOUT": "600"},
    )
    assert not result.timed_out and result.elapsed < 45, result.output[-4000:]
    assert result.returncode != 0
    err = result.stderr
    assert f"uncaught exception on rank {n - 1}/{n}" in err and "ValueError: bad batch on the last rank" in err
    # the traceback is the program's, as plain python prints it: no launcher or runpy frames
    assert f'File "{script}", line 6, in train' in err
    assert "mnframe/compat" not in err and "runpy" not in err


PYTEST_FILE = textwrap.dedent("""
    import chainermn
    import mnframe
    import numpy as np
    from chainermn.communicators.naive_communicator import NaiveCommunicator
    from mpi4py import MPI


    def test_allreduce_through_the_chainermn_path():
        comm = NaiveCommunicator(MPI.COMM_WORLD)
        assert chainermn is mnframe
        total = comm.allreduce(np.array([comm.rank + 1.0]))
        assert total[0] == comm.size * (comm.size + 1) / 2
""")


def test_pytest_runs_chainermn_style_tests_under_mpiexec(tmp_path):
    (tmp_path / "test_style.py").write_text(PYTEST_FILE)
    result = run_mpi(
        ["-m", "mnframe.compat", "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_style.py"],
        n=2,
        timeout=120,
        cwd=str(tmp_path),
    )
    assert not result.timed_out and result.returncode == 0, result.output[-4000:]
    assert result.stdout.count("1 passed") == 2
