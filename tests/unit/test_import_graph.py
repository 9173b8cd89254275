"""The import graph of mnframe has no cycle between packages (docs/architecture.md, "The flow").

Every ``import`` and ``from ... import`` statement of every module under ``mnframe/`` is
read with the AST, wherever it is: at module level, inside functions and methods, under
``if TYPE_CHECKING`` (a function-level import hides a dependency from Python, not from
this test). The nodes:

* ``mnframe``: the package's ``__init__`` (the ChainerMN face);
* each subpackage as one node (``mnframe.config``, ``mnframe.builder``, ``mnframe.runtime``, ...);
* each module directly in ``mnframe/`` as its own node (``mnframe.pipeline``, ``mnframe.cuda_env``,
  ...): a one-file package, placed in the layering like any other (docs/architecture.md, "Layers";
  tests/unit/test_architecture_doc.py checks the layers against this graph).

An edge A -> B is an import in A of a module of B (``from P import name`` counts as an
import of ``P.name`` when that is a module, else of ``P``). Importing a module also runs
its parent packages' ``__init__``; that is not counted as an edge. The lazy name tables
(``mnframe/__init__.py``'s ``_EXPORTS``, ``mnframe._internal.lazy``) are strings, not imports:
the ChainerMN face resolves names on first use by design.
"""

import ast
import functools
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "mnframe"

# Packages whose modules are nodes of their own (none since utils/ was split by layer).
SPLIT = set()

# Cycles between modules of one package that remain (the package-level graph has none). The
# last one (guard <-> watchdog) went when the deadline moved into runtime/deadline.py.
KNOWN_MODULE_CYCLES = []


def _modules():
    """{dotted module name: (path, is_package)} of every module under mnframe/."""
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts = parts[:-1]
        out[".".join(parts)] = (path, is_package)
    return out


def _known(name, modules):
    """The longest prefix of ``name`` that is a module of mnframe (None: not mnframe's)."""
    parts = name.split(".")
    while parts:
        if ".".join(parts) in modules:
            return ".".join(parts)
        parts.pop()
    return None


def _imported(node, module, is_package, modules):
    """The mnframe modules one import statement imports."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = module if is_package else module.rpartition(".")[0]
        if node.level:
            base = ".".join(base.split(".")[: len(base.split(".")) - (node.level - 1)])
            source = f"{base}.{node.module}" if node.module else base
        else:
            source = node.module
        submodules = [f"{source}.{alias.name}" for alias in node.names if f"{source}.{alias.name}" in modules]
        names = submodules or [source]
    return {m for m in (_known(n, modules) for n in names) if m is not None and m != module}


@functools.lru_cache(maxsize=None)
def module_graph():
    """{module: {imported module: [line numbers]}}, over every import statement (read once)."""
    modules = _modules()
    graph = {}
    for module, (path, is_package) in modules.items():
        edges = graph.setdefault(module, {})
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for target in _imported(node, module, is_package, modules):
                    edges.setdefault(target, []).append(node.lineno)
    return graph


def node_of(module):
    """The package-level node of ``module`` (see the module docstring)."""
    parts = module.split(".")
    if len(parts) == 1:
        return "mnframe"
    if ".".join(parts[:2]) in SPLIT and len(parts) > 2:
        return ".".join(parts[:3])
    return ".".join(parts[:2])


def package_graph(graph):
    """{node: {node: [(module, imported module, lines)]}} without edges inside a node."""
    out = {}
    for module, edges in graph.items():
        for target, lines in edges.items():
            a, b = node_of(module), node_of(target)
            if a != b:
                out.setdefault(a, {}).setdefault(b, []).append((module, target, lines))
    return out


def cycles(graph):
    """The strongly connected components of more than one node (Tarjan), each sorted."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10000))

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(component)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def describe(component, graph):
    """One line per edge inside ``component``, naming the imports that make it."""
    lines = []
    for a in sorted(component):
        for b in sorted(graph.get(a, {})):
            if b in component:
                where = graph[a][b]
                if where and isinstance(where[0], tuple):  # package graph: the module imports behind the edge
                    where = "; ".join(f"{m} imports {t} (line {', '.join(map(str, ls))})" for m, t, ls in where)
                else:
                    where = f"line {', '.join(map(str, where))}"
                lines.append(f"  {a} -> {b}: {where}")
    return "\n".join(lines)


def test_the_walk_sees_function_level_imports():
    graph = module_graph()
    # builder/data.py imports training.debug inside build_data only
    assert "mnframe.training.debug" in graph["mnframe.builder.data"]
    assert "mnframe.config.schema" in graph["mnframe.builder.validate"]
    assert len(graph) > 150  # every module, not only those that import something


def test_no_cycle_between_packages():
    packages = package_graph(module_graph())
    found = cycles(packages)
    report = "\n".join(f"cycle {sorted(c)}:\n{describe(c, packages)}" for c in found)
    assert not found, "import cycles between packages:\n" + report


def test_no_cycle_between_modules_beyond_the_known_ones():
    graph = module_graph()
    found = [c for c in cycles(graph) if c not in KNOWN_MODULE_CYCLES]
    report = "\n".join(f"cycle {sorted(c)}:\n{describe(c, graph)}" for c in found)
    assert not found, "import cycles between modules:\n" + report


def test_config_imports_no_builder_and_the_ground_floor_nothing_above_it():
    packages = package_graph(module_graph())
    assert "mnframe.builder" not in packages.get("mnframe.config", {})
    assert not packages.get("mnframe.runtime"), f"runtime imports {sorted(packages['mnframe.runtime'])}"
    above = set(packages.get("mnframe._internal", {})) - {"mnframe.dependencies", "mnframe.runtime"}
    assert not above, f"mnframe._internal imports {sorted(above)}"
