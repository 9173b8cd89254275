"""docs/architecture.md is true: its module table names what the tree holds, and its layers are the
real import graph (every import statement, those inside functions included; see test_import_graph).

* The "Packages and what each owns" table: every ``mnframe/...`` path in its first column exists
  (``{a,b}`` expanded), and every subpackage of ``mnframe/`` and every module directly in it is in it.
* The "Layers" table: every node of the import graph (a subpackage, or a module directly in
  ``mnframe/``) is in exactly one layer, and no import goes from a layer to one above it.
* The package root shows the layers: at most 10 ``.py`` files directly in ``mnframe/``; no cycle
  between subpackages (test_import_graph); no two modules in different folders share a file name,
  but for ChainerMN's own paths (the pairs below) and package ``__init__``/``__main__``, and no module
  is named like a subpackage of ``mnframe/`` (but ``builder/extensions.py``, the builder of that section).
* "One ``.npz`` reader": no module of ``mnframe/`` but ``_internal/npz_read.py`` calls ``numpy.load``.
"""

import ast
import importlib.util
import itertools
import re
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "mnframe"
DOC = ROOT / "docs" / "architecture.md"
MAX_ROOT_MODULES = 10
# Same file name in two folders, both ChainerMN's own module paths (chainermn.functions/links.batch_normalization;
# the multi-node iterator and optimizer): one layer, the names ChainerMN users know.
CHAINERMN_PAIRS = {
    "batch_normalization.py": {"mnframe/functions", "mnframe/links"},
    "multi_node.py": {"mnframe/iterators", "mnframe/optimizers"},
}
# builder/<section>.py is the builder of that config section; this one is named like a package.
SECTION_BUILDERS = {"mnframe/builder/extensions.py"}


def _graph_module():
    spec = importlib.util.spec_from_file_location("_import_graph", Path(__file__).with_name("test_import_graph.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


graph_of = _graph_module()


def _section(title):
    """The text of the ``## title`` section of the doc."""
    text = DOC.read_text(encoding="utf-8")
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match, f"docs/architecture.md has no section '## {title}'"
    return match.group(1)


def _table_rows(section):
    """[[cell, ...]] of the markdown table in ``section`` (header and rule dropped)."""
    rows = [line.strip().strip("|").split(" | ") for line in section.splitlines() if line.startswith("| ")]
    return [[c.strip() for c in row] for row in rows[1:] if not set(row[0]) <= set("- ")]


def _expand(path):
    """``mnframe/{a,b}/x.py`` -> [``mnframe/a/x.py``, ``mnframe/b/x.py``]."""
    match = re.search(r"\{([^}]*)\}", path)
    if not match:
        return [path]
    return list(
        itertools.chain.from_iterable(
            _expand(path[: match.start()] + part + path[match.end() :]) for part in match.group(1).split(",")
        )
    )


def _table_paths():
    """Every ``mnframe/...`` path the module table's first column names, braces expanded."""
    paths = []
    for row in _table_rows(_section("Packages and what each owns")):
        for token in re.findall(r"`([^`]+)`", row[0]):
            if token.startswith("mnframe/"):
                paths.extend(_expand(token))
    return paths


def _node_name(token):
    """A layer table token (``runtime/``, ``cuda_env.py``, ``__init__.py``) -> its graph node."""
    name = token.rstrip("/")
    if name.endswith(".py"):
        name = name[: -len(".py")]
    return "mnframe" if name == "__init__" else f"mnframe.{name}"


def _layers():
    """{node: layer index, bottom = 0} from the Layers table, in the doc's order (bottom first)."""
    out = {}
    for index, row in enumerate(_table_rows(_section("Layers"))):
        for token in re.findall(r"`([^`]+)`", row[1]):
            node = _node_name(token)
            assert node not in out, f"{token} is in two layers of docs/architecture.md"
            out[node] = index
    return out


def _tree_nodes():
    """The import graph's nodes: the root package, each subpackage, each module directly in mnframe/."""
    nodes = {"mnframe"}
    for path in PACKAGE.iterdir():
        if path.is_dir() and (path / "__init__.py").exists():
            nodes.add(f"mnframe.{path.name}")
        elif path.suffix == ".py" and path.name != "__init__.py":
            nodes.add(f"mnframe.{path.stem}")
    return nodes


def test_the_module_table_names_only_what_exists():
    missing = [p for p in _table_paths() if not (ROOT / p).exists()]
    assert not missing, f"docs/architecture.md's module table names paths that do not exist: {missing}"


def test_the_module_table_names_every_package_and_root_module():
    named = {p.rstrip("/") for p in _table_paths()}
    tree = [p.relative_to(ROOT).as_posix() for p in PACKAGE.iterdir() if (p / "__init__.py").exists()]
    tree += [p.relative_to(ROOT).as_posix() for p in PACKAGE.glob("*.py")]
    absent = sorted(p for p in tree if p not in named and not any(n.startswith(p + "/") for n in named))
    assert not absent, f"add these to docs/architecture.md's module table: {absent}"


def test_the_layers_cover_the_tree_once():
    layers, nodes = _layers(), _tree_nodes()
    assert not nodes - set(layers), f"put these in a layer of docs/architecture.md: {sorted(nodes - set(layers))}"
    assert not set(layers) - nodes, f"the Layers table names what is not in the tree: {sorted(set(layers) - nodes)}"


def test_no_import_goes_up_a_layer():
    layers = _layers()
    packages = graph_of.package_graph(graph_of.module_graph())
    upward = [
        f"{a} (layer {layers[a]}) imports {b} (layer {layers[b]}): "
        + "; ".join(f"{m} line {', '.join(map(str, ls))}" for m, _, ls in where)
        for a, targets in packages.items()
        for b, where in targets.items()
        if layers.get(a, -1) < layers.get(b, -1)
    ]
    assert not upward, "imports against docs/architecture.md's Layers:\n" + "\n".join(upward)


def test_the_root_shows_the_layers():
    root = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(root) <= MAX_ROOT_MODULES, f"{len(root)} modules directly in mnframe/: {root}"
    assert not graph_of.cycles(graph_of.package_graph(graph_of.module_graph()))


def test_file_names_say_their_layer():
    folders = {}
    for path in PACKAGE.rglob("*.py"):
        if path.name not in ("__init__.py", "__main__.py"):
            folders.setdefault(path.name, set()).add(path.parent.relative_to(ROOT).as_posix())
    repeated = {
        name: sorted(where) for name, where in folders.items() if len(where) > 1 and CHAINERMN_PAIRS.get(name) != where
    }
    assert not repeated, f"file names repeated across folders (rename one so the name says its layer): {repeated}"
    names = Counter(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists())
    clashes = sorted(
        path
        for path in (p.relative_to(ROOT).as_posix() for p in PACKAGE.rglob("*.py") if p.stem in names)
        if path not in SECTION_BUILDERS
    )
    assert not clashes, f"modules named like a subpackage of mnframe/: {clashes}"


def _numpy_loads(path):
    """Line numbers of ``numpy.load``/``np.load`` calls in ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and node.attr == "load"
        and isinstance(node.value, ast.Name)
        and node.value.id in ("np", "numpy")
    ]


def test_one_npz_reader():
    assert "the one `.npz` reader" in DOC.read_text(encoding="utf-8")
    reader = PACKAGE / "_internal" / "npz_read.py"
    others = {
        p.relative_to(ROOT).as_posix(): lines
        for p in PACKAGE.rglob("*.py")
        if p != reader and "testing" not in p.parts and (lines := _numpy_loads(p))
    }
    assert not others, f"numpy.load outside mnframe/_internal/npz_read.py (read through SafeNpz/load_arrays): {others}"
