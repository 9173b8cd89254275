"""A dependency that does not import is an environment problem (issue 15, items 2 and 3).

One line names the package, why and what to install; exit status 3
(``ExitStatus.ENVIRONMENT``), never 2; no traceback. MPI missing is made real
with ``MPI4PY_LIBMPI`` pointing at no library: mpi4py's own "cannot load MPI
library", as in a venv without the ``mpich`` extra or a cluster MPI.
"""

import os
import subprocess
import sys

import pytest

from mnframe.dependencies import HOOK_FIX, MPI_FIX, explain, missing_dependency
from mnframe.runtime.errors import DependencyError, ExitStatus

NO_MPI = {"MPI4PY_LIBMPI": "/nonexistent/libmpi.so.12"}


def run_mnframe(args, tmp_path, env=None, timeout=180):
    full_env = dict(os.environ, **(env or {}))
    return subprocess.run(
        [sys.executable, "-m", "mnframe", *args],
        cwd=str(tmp_path),
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_exit_status_table():
    assert int(ExitStatus.ENVIRONMENT) == 3 and DependencyError.exit_status == ExitStatus.ENVIRONMENT


@pytest.mark.parametrize("args", [["--cfg", "job"], []])
def test_no_mpi_library_is_one_line_naming_the_fix(args, tmp_path):
    proc = run_mnframe(args, tmp_path, env=NO_MPI)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(
        "mnframe: environment problem: mpi4py cannot load an MPI library (cannot load MPI "
        "library: none of libmpi.so.12 found); fix: "
    )
    assert 'pip install "mnframe[mpich]"' in lines[0] and "cluster's MPI" in lines[0]
    assert not (tmp_path / "runs").exists()


def test_doctor_without_mpi_suggests_the_mpich_extra_or_a_cluster_mpi(tmp_path):
    proc = run_mnframe(["doctor"], tmp_path, env=NO_MPI)
    assert proc.returncode == 1 and "Traceback" not in proc.stdout + proc.stderr
    assert "[FAIL] mpi4py: cannot import mpi4py.MPI (cannot load MPI library" in proc.stdout
    assert f"fix: {MPI_FIX}" in proc.stdout


def test_check_needs_no_mpi(tmp_path):
    proc = run_mnframe(["--check", "--world-size", "2"], tmp_path, env=NO_MPI)
    assert proc.returncode == 0 and "config OK for 2 rank(s)" in proc.stdout, proc.stderr


def test_target_whose_own_import_fails_is_an_environment_problem_not_a_config_error(tmp_path):
    (tmp_path / "needs_missing.py").write_text("import mnframe_no_such_package_xyz\n\n\nclass Net:\n    pass\n")
    proc = run_mnframe(["--check", "model._target_=needs_missing.Net"], tmp_path)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip() == (
        "mnframe: environment problem: needs_missing cannot be imported: it needs mnframe_no_such_package_xyz, "
        "which is not installed; fix: pip install mnframe_no_such_package_xyz"
    )


def test_misspelt_target_module_stays_a_config_error(tmp_path):
    proc = run_mnframe(["--check", "model._target_=no_such_module_xyz.Net"], tmp_path)
    assert proc.returncode == 2 and "configuration error" in proc.stderr
    assert "cannot import module 'no_such_module_xyz'" in proc.stderr


def _missing(name):
    return ModuleNotFoundError(f"No module named {name!r}", name=name)


@pytest.mark.parametrize(
    "module,exc,expected",
    [
        (
            "mnframe.optimizers.fused",
            _missing("numpy.distutils"),
            "mnframe.optimizers.fused cannot be imported (No module named 'numpy.distutils'): Chainer 7.8.1 needs "
            f"mnframe's import hook here; fix: {HOOK_FIX}",
        ),
        (
            "chainer",
            AttributeError("`np.sctypes` was removed in the NumPy 2.0 release."),
            "chainer cannot be imported (`np.sctypes` was removed in the NumPy 2.0 release.): Chainer 7.8.1 needs "
            f"mnframe's import hook here; fix: {HOOK_FIX}",
        ),
        ("hydra", _missing("hydra"), "hydra is not installed; fix: pip install hydra-core"),
        (
            "mnframe.recipes.mnist.data",
            _missing("sklearn"),
            "mnframe.recipes.mnist.data cannot be imported: it needs sklearn, which is not installed; "
            "fix: pip install scikit-learn",
        ),
        (
            "mpi4py.MPI",
            RuntimeError(
                "cannot load MPI library\n/v/lib/libmpi.so.12: cannot open shared object file: "
                "No such file or directory\nlibmpi.so.40: cannot open shared object file: No such"
            ),
            f"mpi4py cannot load an MPI library (cannot load MPI library: none of libmpi.so.12, libmpi.so.40 found); "
            f"fix: {MPI_FIX}",
        ),
        (
            "mpi4py.MPI",
            RuntimeError("cannot load MPI library\nlibmpi.so.12: undefined symbol: MPI_Foo\nx: y"),
            f"mpi4py cannot load an MPI library (cannot load MPI library libmpi.so.12: undefined symbol: MPI_Foo); "
            f"fix: {MPI_FIX}",
        ),
    ],
)
def test_explain(module, exc, expected):
    assert explain(module, exc) == expected


def test_missing_dependency_tells_a_missing_module_from_a_missing_dependency():
    assert missing_dependency("my_models.nets", _missing("my_models")) is None  # the module itself: config error
    assert missing_dependency("my_models.nets", _missing("my_models.nets")) is None
    assert "it needs torch" in missing_dependency("my_models.nets", _missing("torch"))
    assert missing_dependency("my_models", ImportError("cannot import name 'x'")) is None


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHECK_STACK = os.path.join(REPO, "scripts", "check_stack.py")


def test_check_stack_passes_here(tmp_path):
    """scripts/setup.sh ends with this check; here the stack works."""
    proc = subprocess.run([sys.executable, CHECK_STACK], cwd=str(tmp_path), capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"Python {sys.version.split()[0]}, chainer 7.8.1, numpy ")


@pytest.mark.skipif(
    not (sys.version_info >= (3, 12) or int(__import__("numpy").__version__.split(".")[0]) >= 2),
    reason="with NumPy 1.x on Python <= 3.11 Chainer imports without the hook",
)
def test_check_stack_fails_and_says_why_when_chainer_does_not_import(tmp_path):
    """What setup.sh reports (then exits 1) when the stack it installed does not import: here
    Chainer without the hook (MNFRAME_CHAINER_HOOK=0), where it needs numpy.distutils or sctypes."""
    proc = subprocess.run(
        [sys.executable, CHECK_STACK],
        cwd=str(tmp_path),
        capture_output=True,
        text=True,
        timeout=180,
        env=dict(os.environ, MNFRAME_CHAINER_HOOK="0"),
    )
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.startswith("chainer without mnframe: chainer cannot be imported (")
    assert proc.stderr.strip().endswith(f"Chainer 7.8.1 needs mnframe's import hook here; fix: {HOOK_FIX}")


class _NotInstalled:
    """A meta path finder for which ``names`` are not installed."""

    def __init__(self, *names):
        self.names = names

    def find_spec(self, name, path=None, target=None):  # noqa: ARG002 - the MetaPathFinder protocol's names
        if name.split(".")[0] in self.names:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


def test_optional_pillow_missing_is_one_line_naming_it(monkeypatch, tmp_path):
    from mnframe.recipes.dcgan import data as dcgan_data

    for name in [m for m in sys.modules if m == "PIL" or m.startswith("PIL.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "meta_path", [_NotInstalled("PIL")] + sys.meta_path)
    with pytest.raises(DependencyError) as info:
        dcgan_data.get_datasets(path=str(tmp_path))
    assert str(info.value) == "PIL is not installed; fix: pip install Pillow"
