"""Chainer 7.8.1 imports in this environment whoever imports it (issue 15, item 1).

Each test starts a fresh interpreter of this venv (the one running pytest: CI
runs these on every cell of the matrix), from an empty directory, so what is
tested is the installed import hook (``mnframe-chainer-hook.pth`` ->
``_mnframe_chainer_hook``), not pytest's conftest (which imports mnframe).
"""

import json
import os
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import numpy
import pytest

from _mnframe_chainer_hook import stand_ins

NUMPY2 = int(numpy.__version__.split(".")[0]) >= 2
REPO = Path(__file__).resolve().parents[1]


def run_python(code, tmp_path, env=None, args=(), timeout=180):
    """Run ``code`` in a fresh interpreter in ``tmp_path``; return its stdout (fails on non-zero exit)."""
    full_env = {k: v for k, v in os.environ.items() if k != "MNFRAME_CHAINER_HOOK"}
    full_env.update(env or {})
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(code))
    proc = subprocess.run(
        [sys.executable, str(script), *args],
        cwd=str(tmp_path),
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


FORWARD_BACKWARD = """
    import chainer
    import chainer.functions as F
    import chainer.links as L
    import numpy
    link = L.Linear(3, 2)
    link.cleargrads()
    x = numpy.arange(12, dtype=numpy.float32).reshape(4, 3)
    loss = F.sum(link(x))
    loss.backward()
    # d(sum(x W^T + b))/dW[i, j] = sum over the batch of x[:, j]; /db = batch size
    numpy.testing.assert_allclose(link.W.grad, numpy.tile(x.sum(axis=0), (2, 1)))
    numpy.testing.assert_allclose(link.b.grad, [4.0, 4.0])
"""


def test_pth_is_in_site_packages():
    """The editable install and the wheel both put the hook's .pth at the top of site-packages."""
    pth = Path(sysconfig.get_paths()["purelib"]) / "mnframe-chainer-hook.pth"
    assert pth.is_file(), f"{pth} missing: reinstall mnframe (bash scripts/setup.sh)"
    assert pth.read_text().strip() == "import _mnframe_chainer_hook; _mnframe_chainer_hook.install_from_pth()"


def test_chainer_forward_backward_in_a_script_that_never_imports_mnframe(tmp_path):
    out = run_python(
        FORWARD_BACKWARD
        + """
    import sys, _mnframe_chainer_hook
    assert "mnframe" not in sys.modules
    assert _mnframe_chainer_hook.installed_by_pth()
    print("ok", numpy.__version__, hasattr(numpy, "sctypes"))
    """,
        tmp_path,
    )
    assert out.split()[0] == "ok" and out.split()[1] == numpy.__version__
    assert out.split()[2] == "True"  # Chainer reads numpy.sctypes at run time too (F.as_strided)


def test_chainer_imports_without_setuptools_and_numpy_distutils(tmp_path):
    """setuptools absent (Python >= 3.12 venvs; pkg_resources gone in setuptools 82) and no
    numpy.distutils (NumPy 2, Python >= 3.12): stand-ins exist only while Chainer imports."""
    out = run_python(
        """
    import json, sys
    for name in ("pkg_resources", "setuptools", "numpy.distutils"):
        sys.modules[name] = None  # any import of it now fails, as when it is not installed
    """
        + FORWARD_BACKWARD
        + """
    import chainer.testing
    import chainer._environment_check as env_check
    # Chainer's modules kept the stand-in they imported ...
    assert env_check.pkg_resources.__doc__.startswith("mnframe's stand-in")
    assert chainer.testing.helper.pkg_resources.__doc__.startswith("mnframe's stand-in")
    # ... nobody else sees it: the blocked entries are back, numpy has no distutils attribute
    assert all(sys.modules[n] is None for n in ("pkg_resources", "setuptools", "numpy.distutils"))
    assert "numpy.distutils.system_info" not in sys.modules and not hasattr(numpy, "distutils")
    # chainer.testing's requirement checks work on the stand-in
    skip_if = lambda *req: chainer.testing.with_requires(*req)(lambda: None).__dict__.get("__unittest_skip__", False)
    print(json.dumps([skip_if("numpy>=1.9"), skip_if("numpy<1.0"), skip_if("no-such-dist-xyz"),
                      skip_if("numpy>=1.9", "chainer==7.8.1")]))
    """,
        tmp_path,
    )
    assert json.loads(out.strip().splitlines()[-1]) == [False, True, True, False]


def test_numpy_untouched_in_a_process_that_never_imports_chainer(tmp_path):
    out = run_python(
        """
    import sys, json
    at_start = sorted(m for m in sys.modules if m.split(".")[0] in ("numpy", "mnframe", "chainer", "pkg_resources"))
    import numpy
    print(json.dumps({"at_start": at_start, "sctypes": hasattr(numpy, "sctypes"),
                      "extra": [m for m in ("numpy.distutils", "pkg_resources") if m in sys.modules]}))
    """,
        tmp_path,
    )
    seen = json.loads(out)
    assert seen == {"at_start": [], "sctypes": not NUMPY2, "extra": []}


@pytest.mark.parametrize("order", ["chainer first", "mnframe first"])
def test_import_order(order, tmp_path):
    first, second = (
        ("import chainer", "import mnframe as chainermn")
        if order == "chainer first"
        else ("import mnframe as chainermn", "import chainer")
    )
    out = run_python(
        f"""
    {first}
    {second}
    import numpy
    comm = chainermn.create_communicator("naive")
    x = numpy.full(3, 2.0, numpy.float32)
    print(comm.size, comm.allreduce(x).tolist(), chainer.__version__)
    """,
        tmp_path,
    )
    assert out.split("\n")[0] == "1 [2.0, 2.0, 2.0] 7.8.1"


FORKSERVER_SCRIPT = """
    import multiprocessing
    import sys


    def worker(_):
        import chainer
        import chainer.functions as F
        import numpy
        import _mnframe_chainer_hook as hook
        y = F.as_strided(numpy.arange(6, dtype=numpy.float32), (2, 2), (1, 2))  # reads numpy.sctypes
        return hook.ChainerFinder in sys.meta_path, y.shape


    if __name__ == "__main__":
        import mnframe  # in the main block: the server does not run it when preloading __main__
        from multiprocessing import forkserver
        preload = list(getattr(forkserver._forkserver, "_preload_modules", ["__main__"]))
        with multiprocessing.get_context("forkserver").Pool(1) as pool:
            print(preload, pool.map(worker, [0]))
"""


def test_forkserver_workers_get_the_hook_from_the_pth(tmp_path):
    """The .pth runs in every interpreter of the environment: no forkserver preload needed."""
    out = run_python(FORKSERVER_SCRIPT, tmp_path)
    assert out.strip() == "['__main__'] [(True, (2, 2))]"


def test_without_the_pth_import_mnframe_installs_the_hook_and_preloads_it(tmp_path):
    """MNFRAME_CHAINER_HOOK=0 keeps the .pth from installing the hook: then ``import mnframe``
    installs it and adds mnframe to the forkserver preload list, so workers get it too."""
    out = run_python(FORKSERVER_SCRIPT, tmp_path, env={"MNFRAME_CHAINER_HOOK": "0"})
    assert out.strip() == "['__main__', 'mnframe'] [(True, (2, 2))]"
    out = run_python(
        """
    import sys, _mnframe_chainer_hook as hook
    print(hook.ChainerFinder in sys.meta_path)
    """,
        tmp_path,
        env={"MNFRAME_CHAINER_HOOK": "0"},
    )
    assert out.strip() == "False"


def test_startup_imports_only_the_hook(tmp_path):
    """What every interpreter of the environment pays: importing the hook package, nothing else
    (python -X importtime; docs/numpy2.md says what it costs)."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "pass"],
        capture_output=True,
        text=True,
        cwd=str(tmp_path),
        timeout=60,
    )
    names = [line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if "|" in line]
    assert "_mnframe_chainer_hook" in names
    unwanted = [n for n in names if n.split(".")[0] in ("numpy", "mnframe", "chainer") or n.endswith(".stand_ins")]
    assert unwanted == []


# -- the pkg_resources stand-in's requirement checks ---------------------------------


@pytest.mark.parametrize(
    "version,clause,expected",
    [
        ("7.8.1", ">=7.7.0,<8.0.0", True),
        ("8.0.0", ">=7.7.0,<8.0.0", False),
        ("8.0.0rc1", "<8.0.0", True),
        ("2.0.0.post3", ">=2.0.0.post3, <2.1", True),
        ("2.0.0", ">=2.0.0.post3", False),
        ("1.26.4", "==1.26.*", True),
        ("2.1.0", "==1.26.*", False),
        ("1.4.5", "~=1.4.2", True),
        ("1.5.0", "~=1.4.2", False),
        ("2.0.0.dev0", ">=2.0.0", False),
        ("1.0", "==1.0.0", True),
        ("1.0", "!=1.0.0", False),
    ],
)
def test_stand_in_version_clauses(version, clause, expected):
    clauses = stand_ins._split("pkg" + clause)[1]
    assert all(stand_ins.satisfies(version, op, want) for op, want in clauses) is expected


def test_stand_in_require_and_errors():
    found = stand_ins.require("numpy>=1.9")
    assert found[0].version == numpy.__version__
    with pytest.raises(stand_ins.VersionConflict):
        stand_ins.require("numpy<1.0")
    with pytest.raises(stand_ins.DistributionNotFound):
        stand_ins.get_distribution("no-such-dist-xyz")
    assert issubclass(stand_ins.DistributionNotFound, stand_ins.ResolutionError)
    module = stand_ins.pkg_resources()["pkg_resources"]
    assert module.WorkingSet().require("numpy")[0].project_name == "numpy"
