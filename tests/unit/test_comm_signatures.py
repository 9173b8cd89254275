"""Every communicator name and method exists with the ChainerMN API reference's signature; the factory's errors."""

import inspect

import pytest

from mnframe.communicators import registry

# method -> its parameters in the API reference's order (name, default or REQUIRED)
REQUIRED = object()
SPEC_METHODS = {
    "split": [("color", REQUIRED), ("key", REQUIRED)],
    "alltoall": [("xs", REQUIRED)],
    "send": [("data", REQUIRED), ("dest", REQUIRED), ("tag", REQUIRED)],
    "recv": [("source", REQUIRED), ("tag", REQUIRED)],
    "bcast": [("data", REQUIRED), ("max_buf_len", None), ("root", 0)],
    "gather": [("data", REQUIRED), ("root", 0)],
    "allgather": [("x", REQUIRED)],
    "allreduce": [("data", REQUIRED)],
    "scatter": [("xs", REQUIRED), ("root", 0)],
    "finalize": [],
    "send_obj": [("obj", REQUIRED), ("dest", REQUIRED), ("tag", 0)],
    "recv_obj": [("source", REQUIRED), ("tag", None)],
    "bcast_obj": [("obj", REQUIRED), ("max_buf_len", None), ("root", 0)],
    "gather_obj": [("obj", REQUIRED), ("root", 0)],
    "allreduce_obj": [("obj", REQUIRED)],
    "bcast_data": [("model", REQUIRED)],
    "broadcast_data": [("model", REQUIRED)],
    "multi_node_mean_grad": [("model", REQUIRED), ("zero_fill", False)],
    "allreduce_grad": [("model", REQUIRED), ("zero_fill", False)],
    "set_config": [("name", REQUIRED), ("value", True)],
    "get_config": [("name", None)],
}
PROPERTIES = ["rank", "size", "intra_rank", "intra_size", "inter_rank", "inter_size", "mpi_comm"]
# the API reference's names (a registry may add more): GPU-only ones, and those that also run on the CPU
SPEC_GPU_ONLY = ["pure_nccl", "non_cuda_aware"]
SPEC_NAMES = ["naive", "flat", "hierarchical", "two_dimensional", "single_node", "dummy", *SPEC_GPU_ONLY]


def _classes():
    from mnframe.communicators.base import CommunicatorBase

    yield "CommunicatorBase", CommunicatorBase

    for name, info in registry.COMMUNICATORS.items():  # GPU classes import without CuPy too
        yield name, info.cls


def _check_signature(cls, method, params):
    fn = getattr(cls, method)
    sig = inspect.signature(fn)
    got = [
        (p.name, REQUIRED if p.default is inspect.Parameter.empty else p.default)
        for p in list(sig.parameters.values())[1:]
        if p.kind is not p.VAR_KEYWORD
    ]
    names = [n for n, _ in got][: len(params)]
    assert names == [n for n, _ in params], f"{cls.__name__}.{method}{sig}"
    for (n, want), (_, have) in zip(params, got):
        if want is not REQUIRED:  # a spec default must be kept; a required one may gain a default
            assert have == want, f"{cls.__name__}.{method}: default of {n} is {have!r}, spec says {want!r}"


@pytest.mark.parametrize("label,cls", list(_classes()), ids=lambda x: x if isinstance(x, str) else "")
def test_methods_and_properties(label, cls):
    for method, params in SPEC_METHODS.items():
        _check_signature(cls, method, params)
    for prop in PROPERTIES:
        assert isinstance(inspect.getattr_static(cls, prop), property), f"{label}.{prop}"


def test_every_spec_name_is_registered():
    missing = sorted(set(SPEC_NAMES) - set(registry.COMMUNICATORS))  # the spec's list, not ours
    assert not missing, f"the API reference's names {missing} are not in communicators/registry.py"
    for info in registry.COMMUNICATORS.values():
        assert info.cpu_ok == ("numpy" in info.reducers) and "cupy" in info.reducers
        assert info.needs_cuda == (not info.cpu_ok)
        assert isinstance(info.needs_cuda, bool) and isinstance(info.needs_nccl, bool) and info.description
    for name in SPEC_NAMES:  # API reference: CPU not OK for the GPU-only two, OK for the others
        assert registry.COMMUNICATORS[name].needs_cuda == (name in SPEC_GPU_ONLY), name


@pytest.mark.parametrize("name", list(registry.COMMUNICATORS))
def test_the_registry_row_holds_the_class_of_its_name(name):
    from mnframe._internal.import_path import resolve as _resolve
    from mnframe.communicators.mpi_communicator import MpiCommunicator

    info = registry.COMMUNICATORS[name]
    cls = info.cls
    assert isinstance(cls, type) and issubclass(cls, MpiCommunicator)
    assert cls.__module__ == f"mnframe.communicators.{name}"  # the class lives in the module of its name
    assert cls.reducers == dict(info.reducers)
    assert all(isinstance(t, type) for d, t in cls.reducers.items() if d == "numpy")  # CPU reducers: classes
    assert cls.grad_devices() == frozenset(info.reducers)
    for target in info.reducers.values():
        assert callable(_resolve(target))  # GPU strategies import without CuPy


@pytest.mark.slow  # a subprocess or many config compositions: the full tier
def test_config_group_is_generated_from_the_registry():
    from mnframe.config.compose import compose, list_group_options

    assert list_group_options("communicator") == sorted([registry.AUTO, *registry.COMMUNICATORS])
    for name in [registry.AUTO, *registry.COMMUNICATORS]:
        cfg = compose([f"communicator={name}"])
        assert cfg["communicator"] == {
            "name": name,
            "chosen_by_auto": False,  # validation sets it where auto picks the name (optimizer.autotune)
            "allreduce_grad_dtype": None,
            "batched_copy": False,
            "compression": "none",
            "powersgd_rank": 4,
            "powersgd_start_iter": 10,
        }


def test_create_communicator_signature():
    from mnframe.communicators.factory import create_communicator

    sig = inspect.signature(create_communicator)
    assert [(p.name, p.default) for p in sig.parameters.values()] == [
        ("communicator_name", None),
        ("mpi_comm", None),
        ("allreduce_grad_dtype", None),
        ("batched_copy", True),  # ChainerMN 7.8.1's default (the older API reference says False)
        # mnframe's own, keyword-only (docs/powersgd.md)
        ("compression", None),
        ("powersgd_rank", 4),
        ("powersgd_start_iter", 10),
    ]
    kinds = [p.kind for p in sig.parameters.values()]
    assert kinds[4:] == [inspect.Parameter.KEYWORD_ONLY] * 3
    import mnframe

    assert mnframe.create_communicator is create_communicator


def test_registry_is_import_light():
    import subprocess
    import sys

    code = (
        "import sys, mnframe.communicators.registry as r; r.COMMUNICATORS; "
        "assert 'mpi4py' not in sys.modules and 'cupy' not in sys.modules, sorted(sys.modules)"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_unknown_name_suggests():
    from mnframe.communicators.factory import create_communicator

    with pytest.raises(ValueError, match=r"'hierarchicl'.*Did you mean 'hierarchical'.*naive"):
        create_communicator("hierarchicl")


@pytest.mark.skipif(registry.cuda_problem() is None, reason="CUDA is available here")
@pytest.mark.parametrize("name", ["pure_nccl", "non_cuda_aware"])
def test_gpu_name_without_cuda(name):
    from mnframe.communicators.factory import create_communicator

    with pytest.raises(RuntimeError, match=r"runs on GPUs but .*Names that work on CPU: naive, flat"):
        create_communicator(name)


@pytest.mark.parametrize(
    "problem,devices,nccl_problem,expected",
    [
        ("CuPy is not installed", 0, "not checked", "two_dimensional"),
        (None, 1, None, "pure_nccl"),  # CUDA with NCCL, one GPU for the one rank
        (None, 1, "CuPy cannot load NCCL", "non_cuda_aware"),
    ],
)
def test_default_name_is_the_one_create_communicator_picks(monkeypatch, problem, devices, nccl_problem, expected):
    """``factory.default_name`` is the only default: what ``create_communicator()`` creates."""
    from mpi4py import MPI

    from mnframe import cuda_env
    from mnframe.communicators.factory import default_name

    fake = cuda_env.CudaProbe(problem=problem, device_count=devices, nccl_problem=nccl_problem)
    monkeypatch.setattr(cuda_env, "probe", lambda: fake)
    assert default_name(MPI.COMM_SELF) == expected
    assert not hasattr(registry, "default_name")


def test_bad_grad_dtype():
    from mnframe.communicators.factory import create_communicator

    with pytest.raises(ValueError, match="allreduce_grad_dtype"):
        create_communicator("naive", allreduce_grad_dtype="int32")
