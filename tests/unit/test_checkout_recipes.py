"""A source checkout used without an install (its root first on sys.path, as `python -m mnframe`
run there puts it) finds ``mnframe.recipes`` in the top-level ``recipes/``, as the wheel and the
editable install do (the GPU check runs the checkout beside an installed wheel)."""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

PROBE = """
import sys
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in getattr(type(f), "__module__", "")
                    and "editable" not in getattr(f, "__module__", "")]
sys.path_importer_cache.clear()
sys.path.insert(0, sys.argv[1])
import mnframe.recipes.mnist as r
print(r.__name__, r.__file__)
"""


def test_a_bare_checkout_finds_its_recipes(tmp_path):
    out = subprocess.run(
        [sys.executable, "-c", PROBE, str(REPO)], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr[-2000:]
    name, path = out.stdout.split()
    assert name == "mnframe.recipes.mnist"
    assert Path(path) == REPO / "recipes" / "mnist" / "__init__.py"
