"""Run every tests/mpi/test_*.py under mpiexec with each rank count it declares.

A module declares ``MPI_SIZES = (1, 2, 3)`` (default) and optionally
``MPI_TIMEOUT = seconds`` (default 240) and ``MPI_ENV = {...}``, all as
literals. Inside, tests compute expectations from rank and size.
"""

import ast
from pathlib import Path

import pytest

from mnframe.testing import run_pytest_module

MPI_DIR = Path(__file__).parent / "mpi"


def _declared(path):
    values = {"MPI_SIZES": (1, 2, 3), "MPI_TIMEOUT": 240, "MPI_ENV": {}}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            name = getattr(node.targets[0], "id", None)
            if name in values:
                values[name] = ast.literal_eval(node.value)
    return values


def _cases():
    for path in sorted(MPI_DIR.glob("test_*.py")):
        decl = _declared(path)
        for n in decl["MPI_SIZES"]:
            yield pytest.param(path, n, decl, id=f"{path.stem}-np{n}")


@pytest.mark.parametrize("path,n,decl", list(_cases()))
def test_mpi_module(path, n, decl):
    result = run_pytest_module(
        path, n, timeout=decl["MPI_TIMEOUT"], env=decl["MPI_ENV"], cwd=str(Path(__file__).parent.parent)
    )
    if result.timed_out:
        pytest.fail(f"{path.name} with {n} ranks timed out after {decl['MPI_TIMEOUT']}s\n{result.output[-6000:]}")
    if result.returncode != 0:
        pytest.fail(f"{path.name} with {n} ranks exited {result.returncode}\n{result.output[-8000:]}")
