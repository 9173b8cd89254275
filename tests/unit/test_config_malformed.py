"""Malformed configs and overrides: each is refused with a ConfigError (exit
status 2 through the CLI) whose message names the offending key."""

import copy

import pytest

from mnframe.builder.validate import validate
from mnframe.commands import cli
from mnframe.config import compose as C
from mnframe.config.issues import ConfigError

# (command-line overrides, world size, text the message must contain)
OVERRIDES = [
    (["trainer.stpo=[1,epoch]"], 1, "trainer.stpo"),  # unknown key
    (["trainer.stpo=[1,epoch]"], 1, "did you mean 'stop'"),
    (["communicator=nave"], 1, "did you mean 'naive'"),  # unknown option
    (["optimizer=adamm"], 1, "did you mean 'adam'"),
    (["recipe=mnits"], 1, "did you mean 'mnist'"),
    (["dataset.batch_size=-5"], 1, "dataset.batch_size"),  # negative
    (["dataset.batch_size=0"], 1, "dataset.batch_size"),
    (["dataset.batch_size=abc"], 1, "dataset.batch_size"),  # wrong type
    (["dataset.global_batch_size=10"], 3, "dataset.global_batch_size"),  # not divisible
    (["communicator=pure_nccl"], 2, "communicator.name"),  # GPU-only, no GPU
    (["trainer.device=gpu"], 1, "trainer.device"),
    (["trainer.stop=[5,epochs]"], 1, "trainer.stop"),
    (["trainer.stop=5"], 1, "trainer.stop"),
    (["recipe=mnist_model_parallel"], 1, "topology.ranks"),  # needs more ranks
    (["recipe=mnist_dual_parallel"], 3, "topology.ranks"),  # not a multiple
    (
        ["recipe=mnist_model_parallel", "topology.ranks.1.stages.0.rank_out=null"],
        2,
        "topology.ranks.1.stages.0.rank_out: rank 0 stage 1 receives from rank 1, and rank 1 stage 0 sends nothing",
    ),  # receive without send: the stage at fault is the one whose output goes nowhere
    (
        ["recipe=mnist_model_parallel", "topology.ranks.1.stages.0.rank_in=7"],
        2,
        "topology.ranks.1.stages.0.rank_in",
    ),  # rank does not exist
    (["dataset.strategy=scater"], 2, "did you mean 'scatter'"),
    (["resume=sometimes"], 1, "resume"),
    (["extensions.log_report.interval=0"], 1, "extensions.log_report.interval"),
    (["model.n_units=-", "model._target_=mnframe.recipes.mnist.model.MLPX"], 1, "model._target_"),
    (["optimizer.alpha=fast"], 1, "optimizer.alpha"),
    (["communicator.allreduce_grad_dtype=int8"], 1, "communicator.allreduce_grad_dtype"),
]


@pytest.mark.parametrize("overrides,world,needle", OVERRIDES, ids=[" ".join(o) + f"@{w}" for o, w, _ in OVERRIDES])
def test_override_is_refused(overrides, world, needle):
    with pytest.raises(ConfigError) as info:
        cli.check(overrides, world, has_cuda=False)
    assert needle in str(info.value)


@pytest.fixture(scope="module")
def base():
    return C.compose(["recipe=mnist"])


@pytest.fixture(scope="module")
def model_parallel():
    return C.compose(["recipe=mnist_model_parallel"])


def _set(tree, path, value):
    keys = path.split(".")
    node = tree
    for k in keys[:-1]:
        node = node[int(k)] if isinstance(node, list) else node[k]
    last = keys[-1]
    if value is _DELETE:
        del node[last]
    elif isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value


_DELETE = object()

# (path to set, value, text the message must contain) on the mnist recipe
MUTATIONS = [
    ("learning_rate", 0.1, "learning_rate"),  # unknown top-level key
    ("optimzer", {}, "did you mean 'optimizer'"),
    ("trainer.devise", "cpu", "trainer.devise"),
    ("dataset.batchsize", 10, "did you mean 'batch_size'"),
    ("dataset.source._target_", "mnframe.recipes.mnist.data.no_such", "dataset.source._target_"),
    ("dataset.source.sorce", "digits", "dataset.source.sorce"),
    ("model.n_unit", 10, "did you mean 'n_units'"),
    ("model._target_", "nosuchpackage.Model", "model._target_"),
    ("communicator.name", "hierarchichal", "did you mean 'hierarchical'"),
    ("communicator.batched_copy", "maybe", "communicator.batched_copy"),
    ("optimizer.name", "adamw", "optimizer.name"),
    ("optimizer.weight_decay", -1.0, "optimizer.weight_decay"),
    ("optimizer.gradient_clipping", 0, "optimizer.gradient_clipping"),
    ("optimizer.lr_schedule", {"kind": "cosine_restarts"}, "optimizer.lr_schedule"),
    ("optimizer.betta1", 0.9, "did you mean 'beta1'"),
    ("extensions.plot_loss.y_keys", [], "extensions.plot_loss.y_keys"),
    ("extensions.snapshot_everything", {"enabled": True}, "extensions.snapshot_everything"),
    ("extensions.progres_bar", {"update_interval": 3}, "did you mean 'progress_bar'"),
    ("extensions.print_report.entires", ["epoch"], "did you mean 'entries'"),
    ("checkpoint.keep", 0, "checkpoint.keep"),
    ("checkpoint.intervall", 5, "did you mean 'interval'"),
    ("trainer.stop", [0, "epoch"], "trainer.stop"),
    ("topology.kind", "pipeline", "topology"),
    ("updater._target_", "chainer.training.updaters.NoSuchUpdater", "updater._target_"),
    ("updater.kwarg", {"loss_func": None}, "did you mean 'kwargs'"),
    ("name", "", "name"),
    ("seed", "x", "seed"),
    ("dataset.loader", "threads", "dataset.loader"),
    ("model", None, "model"),  # data parallel without model
    ("trainer", _DELETE, "trainer"),  # missing section
    ("checkpoint.resume", "must", "resume=auto|must|never"),
]


@pytest.mark.parametrize("path,value,needle", MUTATIONS, ids=[m[0] for m in MUTATIONS])
def test_malformed_config_is_refused(base, path, value, needle):
    raw = copy.deepcopy(base)
    _set(raw, path, value)
    with pytest.raises(ConfigError) as info:
        validate(raw, 2)
    assert needle in str(info.value)


def test_all_problems_are_reported_at_once(base):
    raw = copy.deepcopy(base)
    _set(raw, "dataset.batch_size", -1)
    _set(raw, "trainer.devise", "cpu")
    _set(raw, "communicator.name", "nope")
    _set(raw, "model.n_unit", 3)
    with pytest.raises(ConfigError) as info:
        validate(raw, 2)
    text = str(info.value)
    for key in ("dataset.batch_size", "trainer.devise", "communicator.name", "model.n_unit"):
        assert key in text
    assert "4 problems" in text
    assert "Traceback" not in text


MP_MUTATIONS = [
    # a deadlock: rank 1 sends before it receives, rank 0 also sends first
    ("topology.ranks.1.stages.0.rank_in", None, "topology.ranks.1.stages.0.rank_in"),
    ("topology.ranks.0.stages.1.rank_in", 0, "receives from its own rank 0 1 time(s) but earlier stages sent"),
    ("topology.ranks.0.stages.0.rank_out", [1, 1], "no matching receive"),
    ("topology.ranks.1.stages", [], "topology.ranks.1.stages"),
    ("topology.ranks.0.classifier", "maybe", "topology.ranks.0.classifier"),
]


@pytest.mark.parametrize("path,value,needle", MP_MUTATIONS, ids=[m[0] for m in MP_MUTATIONS])
def test_malformed_rank_graph_is_refused(model_parallel, path, value, needle):
    raw = copy.deepcopy(model_parallel)
    _set(raw, path, value)
    with pytest.raises(ConfigError) as info:
        validate(raw, 2)
    assert needle in str(info.value)
