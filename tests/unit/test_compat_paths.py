"""Every module path of the installed ChainerMN imports from mnframe with the peer's public names (issue 16.1).

The module list and each module's public names are read from the peer's source
files with ``ast`` at test time (the peer is never imported). A module's public
names: the functions, classes and variables it defines at top level (inside
``try``/``if`` blocks too) and the names it imports from ``chainermn`` - minus
names with a leading underscore, and minus a ``chainermn`` submodule imported
by a module that is not a package ``__init__`` (an implementation detail there),
and minus a name that the module binds to an imported module (``cp``, the
``None`` fallback of ``import cupy as cp`` in ``_memory_utility``).

One explicit exclusion: ``chainermn.nccl`` only re-exports ``cupy.cuda.nccl``
names when CuPy's NCCL imports. mnframe.nccl lists them and serves them lazily;
the test requires them present exactly where CuPy's NCCL imports (``_available``).
"""

import ast
import importlib
import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mnframe._internal import chainermn_paths as paths

NCCL_MODULE = "chainermn.nccl"


def _peer_root():
    spec = importlib.util.find_spec("chainermn")  # locates the package; executes nothing
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("the peer package chainermn (shipped with Chainer 7.8.1) is not installed")
    return Path(list(spec.submodule_search_locations)[0])


def _module_name(root, path):
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _peer_modules():
    root = _peer_root()
    return {_module_name(root, p): p for p in sorted(root.rglob("*.py"))}


def _top_level(body):
    for node in body:
        yield node
        if isinstance(node, ast.Try):
            yield from _top_level(node.body)
            for handler in node.handlers:
                yield from _top_level(handler.body)
            yield from _top_level(node.orelse)
        elif isinstance(node, ast.If):
            yield from _top_level(node.body)
            yield from _top_level(node.orelse)


def _public_names(path, modules):
    is_package = path.name == "__init__.py"
    body = list(_top_level(ast.parse(path.read_text()).body))
    # ``try: import cupy as cp / except: cp = None``: a module alias, not an API name
    module_aliases = {a.asname or a.name for node in body if isinstance(node, ast.Import) for a in node.names}
    names = set()
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name) and t.id not in module_aliases)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "chainermn":
            for alias in node.names:
                name = alias.asname or alias.name
                if not is_package and f"{node.module}.{alias.name}" in modules:
                    continue  # a submodule imported for the implementation
                names.add(name)
    return sorted(n for n in names if not n.startswith("_"))


def _cupy_nccl_names(path):
    return sorted(
        a.asname or a.name
        for node in _top_level(ast.parse(path.read_text()).body)
        if isinstance(node, ast.ImportFrom) and node.module == "cupy.cuda.nccl"
        for a in node.names
    )


def _mnframe_name(peer_name):
    return "mnframe" + peer_name[len("chainermn") :]


PEER_MODULES = sorted(_peer_modules()) if importlib.util.find_spec("chainermn") else []


def test_the_peer_list_is_the_one_of_chainermn_7_8_1():
    modules = _peer_modules()
    # a few paths issue 16 names, so a changed peer layout is noticed rather than silently passing
    for name in (
        "chainermn.iterators.multi_node_iterator",
        "chainermn.communicators.flat_communicator",
        "chainermn.communicators._memory_utility",
        "chainermn.extensions._multi_node_snapshot",
        "chainermn.nccl",
        "chainermn.testing.device",
    ):
        assert name in modules
    assert len(modules) >= 39


@pytest.mark.parametrize("peer_name", PEER_MODULES)
def test_module_path_imports_from_mnframe_with_the_peer_names(peer_name):
    modules = _peer_modules()
    module = importlib.import_module(_mnframe_name(peer_name))
    missing = [n for n in _public_names(modules[peer_name], modules) if not hasattr(module, n)]
    assert not missing, f"{_mnframe_name(peer_name)} lacks {missing} (defined by {peer_name})"


def test_nccl_names_are_listed_and_present_exactly_where_cupy_nccl_imports():
    path = _peer_modules()[NCCL_MODULE]
    import mnframe.nccl as nccl

    names = _cupy_nccl_names(path)
    assert names and set(names) <= set(dir(nccl))
    available = importlib.util.find_spec("cupy") is not None and nccl._available
    for name in names:
        assert hasattr(nccl, name) == available, name


def test_reexports_are_mnframe_objects():
    from mnframe.communicators import flat, naive
    from mnframe.communicators.flat_communicator import FlatCommunicator
    from mnframe.communicators.mpi_communicator import MpiCommunicator
    from mnframe.communicators.mpi_communicator_base import MpiCommunicatorBase
    from mnframe.communicators.naive_communicator import NaiveCommunicator
    from mnframe.iterators import multi_node
    from mnframe.iterators.multi_node_iterator import create_multi_node_iterator

    assert FlatCommunicator is flat.FlatCommunicator and NaiveCommunicator is naive.NaiveCommunicator
    assert MpiCommunicatorBase is MpiCommunicator and issubclass(NaiveCommunicator, MpiCommunicatorBase)
    assert create_multi_node_iterator is multi_node.create_multi_node_iterator


# -- the one table of paths (mnframe/_internal/chainermn_paths.py) and the modules made from its rows

MNFRAME_ROOT = Path(__file__).resolve().parents[2] / "mnframe"


def _file_of(path):
    """mnframe's file for table path ``path`` (a module or a package ``__init__``), or None."""
    base = MNFRAME_ROOT.joinpath(*path.split(".")) if path else MNFRAME_ROOT
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.exists():
            return candidate
    return None


def test_the_table_lists_every_peer_path():
    missing = [p for p in PEER_MODULES if paths.relative(p, "chainermn") not in paths.PATHS]
    assert not missing, f"add these ChainerMN paths to mnframe/_internal/chainermn_paths.py: {missing}"


def test_a_row_of_names_has_no_file_and_an_own_path_has_one():
    for path, row in paths.PATHS.items():
        made = paths.made_from_row(path)
        assert made == (row is not paths.OWN and path not in paths.PACKAGES), path
        if made:
            assert _file_of(path) is None, f"mnframe/{path.replace('.', '/')}.py shadows its row of names"
        else:
            assert _file_of(path) is not None, f"{path!r} is OWN (or a package) but mnframe has no file for it"


def _only_reexports(tree):
    """True for a module whose body is a docstring, imports and ``__all__`` (nothing of its own)."""
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # the docstring
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["__all__"]:
            continue
        return False
    return any(isinstance(node, ast.ImportFrom) for node in tree.body)


def test_no_module_holds_only_a_reexport():
    offenders = [
        str(f.relative_to(MNFRAME_ROOT.parent))
        for f in sorted(MNFRAME_ROOT.rglob("*.py"))
        if f.name != "__init__.py" and _only_reexports(ast.parse(f.read_text()))
    ]
    assert not offenders, (
        f"modules that only re-export (make them a row of mnframe/_internal/chainermn_paths.py): {offenders}"
    )


@pytest.mark.parametrize("path", sorted(paths.PATHS))
def test_every_table_path_imports_with_its_row(path):
    from mnframe._internal.import_path import resolve

    name = "mnframe" + (f".{path}" if path else "")
    module = importlib.import_module(name)
    assert importlib.util.find_spec(name) is not None
    for attr, target in (paths.PATHS[path] or {}).items():
        assert getattr(module, attr) is resolve(target), (name, attr)


def test_a_module_made_from_its_row_is_a_plain_module_of_mnframe_objects():
    import pickle

    import mnframe.communicators.naive
    import mnframe.communicators.naive_communicator as nc
    from mnframe.extensions.checkpoint import _CheckpointStats

    assert sys.modules["mnframe.communicators.naive_communicator"] is nc
    assert mnframe.communicators.naive_communicator is nc  # bound on its package, as for a file
    assert nc.__all__ == ["NaiveCommunicator"] and "chainermn.communicators.naive_communicator" in nc.__doc__
    assert nc.__spec__.name == nc.__name__ and not hasattr(nc, "__file__")
    assert importlib.reload(nc) is nc and nc.NaiveCommunicator is mnframe.communicators.naive.NaiveCommunicator
    # the object keeps its home module: pickles name it, and load back as the same class
    assert nc.NaiveCommunicator.__module__ == "mnframe.communicators.naive"
    assert pickle.loads(pickle.dumps(nc.NaiveCommunicator)) is nc.NaiveCommunicator
    stats = _CheckpointStats()
    stats.record(1.5)
    again = pickle.loads(pickle.dumps(stats))
    assert type(again) is _CheckpointStats and again.durations == [1.5]


def test_names_that_are_both_a_module_path_and_a_function_stay_functions():
    both = [
        (package, name)
        for package in paths.PACKAGES
        for name in paths.PATHS[package]
        if package and f"{package}.{name}" in paths.PATHS
    ]
    assert sorted(both) == [("functions", "pseudo_connect"), ("links", "create_mnbn_model")]
    for package, name in both:
        pkg = importlib.import_module(f"mnframe.{package}")
        importlib.import_module(f"mnframe.{package}.{name}")
        assert callable(getattr(pkg, name)), (package, name)


# -- the private helpers ChainerMN's tests call, on one rank


def test_communication_utility_helpers():
    from mpi4py import MPI

    from mnframe.communicators import _communication_utility as cu

    assert cu.init_ranks(MPI.COMM_WORLD) == [0, 0, 1, 0, 1]
    obj = np.arange(355678)
    np.testing.assert_array_equal(cu.chunked_bcast_obj(obj, MPI.COMM_WORLD, 2378, 0), obj)
    for bad in (-1, 0, cu.INT_MAX):
        with pytest.raises(AssertionError):
            cu.chunked_bcast_obj(obj, MPI.COMM_WORLD, bad, 0)
    with pytest.raises(AssertionError):  # the root must give the object
        cu.chunked_bcast_obj(None, MPI.COMM_WORLD, 10, 0)
    with pytest.raises(ValueError, match="float16, float32, or float64"):
        cu._get_nccl_type_id(np.int32)


def test_memory_utility_helpers():
    import chainer.links as L

    from mnframe.communicators import _memory_utility as mu

    model = L.Classifier(L.Linear(3, 2))
    model.cleargrads()
    params = mu.extract_params_set_data(model)
    assert [p.name for p in params] == ["W", "b"] and len(params) == len(mu.extract_params_set_grad(model, True))
    assert mu.extract_params_set_grad(model, False) == []  # no gradients yet
    assert mu.count_grad_elements(params, zero_fill=True) == 8
    x = np.arange(6, dtype=np.float32).reshape(2, 3)[:, 1]
    buf = mu.array_to_buffer_object(x)
    assert isinstance(buf, np.ndarray) and buf.flags.c_contiguous and list(buf) == [1.0, 4.0]


def test_replica_set_parser_and_epoch_helpers_and_get_device():
    from mnframe.datasets.scatter import get_epoch_trigger, get_n_iterations_for_one_epoch
    from mnframe.extensions._multi_node_snapshot import _parse_replica_sets
    from mnframe.testing import get_device

    assert _parse_replica_sets([0, 1], 4) == [{0}, {1}, {2, 3}]
    assert _parse_replica_sets([range(0, 16, 2)], 16) == [set(range(0, 16, 2)), set(range(1, 16, 2))]
    import mnframe

    comm = mnframe.create_communicator("naive")
    with pytest.warns(DeprecationWarning):
        assert get_n_iterations_for_one_epoch(list(range(10)), 3, comm) == 4
    with pytest.warns(DeprecationWarning):
        assert get_epoch_trigger(2, list(range(10)), 3, comm) == (8, "iteration")
    assert str(get_device()) == "@numpy"


def test_bn_backend_selection():
    import mnframe
    from mnframe.functions.batch_normalization import get_communication_backend

    comm = mnframe.create_communicator("naive")
    assert get_communication_backend(comm) == "mpi" and get_communication_backend(comm, "mpi") == "mpi"
    with pytest.raises(ValueError, match="nccl is not supported"):
        get_communication_backend(comm, "nccl")
    with pytest.raises(ValueError, match="does not support"):
        get_communication_backend(comm, "gloo")


# -- the alias: every chainermn path is the mnframe module itself (fresh interpreter)

ALIAS_CHECK = r"""
import importlib, sys
from mnframe.compat import install_alias
install_alias()
for name in sys.argv[1:]:
    mod = importlib.import_module(name)
    target = importlib.import_module("mnframe" + name[len("chainermn"):])
    assert mod is target, (name, mod)
    assert sys.modules[name] is target
import chainermn.communicators.naive_communicator as nc
from chainermn.communicators.naive_communicator import NaiveCommunicator
import mnframe.communicators.naive
assert NaiveCommunicator is mnframe.communicators.naive.NaiveCommunicator
peer_files = [m.__file__ for m in list(sys.modules.values()) if getattr(m, "__file__", None)]
assert not any("site-packages/chainermn" in f for f in peer_files), "the peer package was imported"
for missing in ("chainermn.no_such_module", "chainermn.communicators.registry"):  # the second: mnframe's own
    try:
        importlib.import_module(missing)
    except ModuleNotFoundError as e:
        assert e.name == missing and "mnframe" + missing[len("chainermn"):] in str(e), e
    else:
        raise AssertionError(missing + " imported")
import pickle
from chainermn.extensions.checkpoint import _CheckpointStats
assert type(pickle.loads(pickle.dumps(_CheckpointStats()))) is _CheckpointStats
print("ALIAS OK", len(sys.argv) - 1)
"""


def _table_paths_as_chainermn():
    return sorted("chainermn" + (f".{p}" if p else "") for p in paths.PATHS)


@pytest.mark.slow  # a subprocess or many config compositions: the full tier
def test_every_peer_and_table_path_imports_through_the_alias_as_the_mnframe_module():
    names = sorted(set(PEER_MODULES) | set(_table_paths_as_chainermn()))
    result = subprocess.run([sys.executable, "-c", ALIAS_CHECK, *names], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-4000:]
    assert f"ALIAS OK {len(names)}" in result.stdout


@pytest.mark.slow  # a subprocess or many config compositions: the full tier
def test_alias_refuses_when_the_peer_is_already_imported():
    code = (
        "import chainermn.datasets.empty_dataset\nfrom mnframe.compat import install_alias\n"
        "try:\n    install_alias()\n"
        "except RuntimeError as e:\n    print('REFUSED', 'already imported' in str(e))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "REFUSED True" in result.stdout, result.stderr[-3000:]


def test_checkpoint_stats_and_filename_helpers():
    import mnframe
    from mnframe.extensions.checkpoint import _CheckpointStats, create_multi_node_checkpointer

    stats = _CheckpointStats()
    assert stats.report() == "count=0"
    for _ in range(3):
        stats.start()
        stats.end()
    assert stats.report().startswith("count=3, mean_s=")
    with pytest.raises(RuntimeError, match="without start"):
        stats.end()
    checkpointer = create_multi_node_checkpointer("hoge", mnframe.create_communicator("naive"))
    names = checkpointer._filenames([7, 123])
    assert names == ["hoge.0.7", "hoge.0.123"]
    parsed = list(checkpointer._parse_filenames(names + ["other.0.1", "hoge.0.x"]))
    assert parsed == [("hoge", 0, 7), ("hoge", 0, 123)]


def test_iterator_control_message_codec_and_scatter_index():
    from mnframe.datasets.scatter import _scatter_index
    from mnframe.iterators.multi_node_iterator import _build_ctrl_msg, _parse_ctrl_msg

    msg = _build_ctrl_msg(True, False, True, False, 42)
    assert _parse_ctrl_msg(msg) == (True, False, True, False, 42)
    np.testing.assert_array_equal(_build_ctrl_msg(*_parse_ctrl_msg(msg)), msg)
    assert list(_scatter_index(10, 3, False)) == [(0, 0, 4), (1, 4, 7), (2, 7, 10)]
