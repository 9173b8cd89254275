"""Every shipped config group option and every recipe composes and validates."""

import pytest

from mnframe.builder.validate import validate
from mnframe.config import compose as C
from mnframe.config.issues import ConfigError
from mnframe.config.schema import ModelParallelTopology, RunConfig

RECIPES = sorted(C.find_recipes())
# group options that need something this machine may lack (a GPU, a data path)
NEEDS = {
    ("communicator", "pure_nccl"): "a CUDA GPU",
    ("communicator", "non_cuda_aware"): "a CUDA GPU",
    ("dataset", "mnist"): "dataset.source.path",
    ("dataset", "custom"): "dataset.source._target_",
}


def _world_for(cfg):
    topo = cfg["topology"]
    return len(topo["ranks"]) if topo.get("kind") == "model_parallel" else 2


def test_mnist_recipes_are_shipped():
    assert {"mnist", "mnist_model_parallel", "mnist_dual_parallel"} <= set(RECIPES)


@pytest.mark.parametrize("recipe", RECIPES)
def test_recipe_composes_and_validates(recipe):
    raw = C.compose([f"recipe={recipe}"])
    cfg = validate(raw, _world_for(raw), has_cuda=False)
    assert isinstance(cfg, RunConfig)
    assert cfg.name == recipe


def _options():
    for group in (
        "communicator",
        "optimizer",
        "dataset",
        "model",
        "topology",
        "updater",
        "trainer",
        "extensions",
        "checkpoint",
        "logger",
        "tune",
        "debug",
    ):
        for option in C.list_group_options(group):
            yield group, option


@pytest.mark.parametrize("group,option", list(_options()))
def test_group_option_composes(group, option):
    overrides = ["recipe=mnist", f"{group}={option}"]
    if group == "topology" and option != "data_parallel":
        overrides.append("model=none")
    if group == "model" and option == "none":
        overrides.append("topology=mlp_two_ranks")
    raw = C.compose(overrides)
    world = _world_for(raw)
    need = NEEDS.get((group, option))
    if need is None:
        validate(raw, world, has_cuda=False)
        return
    with pytest.raises(ConfigError, match="communicator.name|trainer.device|" + need):
        validate(raw, world, has_cuda=False)  # refused here, saying why


def test_every_registered_communicator_has_a_config_file():
    from mnframe.communicators.registry import COMMUNICATORS

    assert set(COMMUNICATORS) <= set(C.list_group_options("communicator"))


def test_gpu_communicator_validates_with_a_gpu():
    raw = C.compose(["communicator=pure_nccl", "trainer.device=gpu"])
    cfg = validate(raw, 2, has_cuda=True)
    assert cfg.communicator.name == "pure_nccl"


@pytest.mark.parametrize(
    "device,has_cuda,expected",
    [
        ("cpu", False, "two_dimensional"),
        ("auto", False, "two_dimensional"),
        ("cpu", True, "two_dimensional"),
        ("auto", True, "pure_nccl"),
        ("gpu", True, "pure_nccl"),
    ],
)
def test_auto_communicator_follows_the_training_device(device, has_cuda, expected):
    raw = C.compose([f"trainer.device={device}"])
    assert raw["communicator"]["name"] == "auto"  # the runner's default
    cfg = validate(raw, 2, has_cuda=has_cuda)
    assert cfg.communicator.name == expected
    assert raw["communicator"]["name"] == "auto"  # the composed config is left as it was


def test_dual_parallel_needs_a_multiple_of_the_group():
    raw = C.compose(["recipe=mnist_dual_parallel"])
    cfg = validate(raw, 4)
    assert isinstance(cfg.topology, ModelParallelTopology)
    with pytest.raises(ConfigError, match="topology.ranks"):
        validate(raw, 3)


def test_overrides_reach_the_typed_config():
    raw = C.compose(
        [
            "recipe=mnist",
            "optimizer=momentum_sgd",
            "optimizer.lr=0.05",
            "trainer.stop=[5,iteration]",
            "extensions.progress_bar.update_interval=3",
            "dataset.global_batch_size=64",
        ]
    )
    cfg = validate(raw, 4)
    assert cfg.optimizer.hparams["lr"] == 0.05
    assert tuple(cfg.trainer.stop) == (5, "iteration")
    assert cfg.extensions["progress_bar"].update_interval == 3


def test_user_recipe_directory(tmp_path):
    (tmp_path / "my_model.yaml").write_text(
        "# @package _global_\n"
        "defaults:\n  - override /optimizer: sgd\n"
        "name: my_model\nmodel:\n  _target_: mnframe.recipes.mnist.model.MLP\n  n_units: 16\n"
    )
    raw = C.compose(["recipe=my_model"], [tmp_path])
    cfg = validate(raw, 1)
    assert cfg.name == "my_model" and cfg.optimizer.name == "sgd"
    assert cfg.model.kwargs["n_units"] == 16


def test_yaml_round_trip_keeps_the_hash():
    raw = C.compose([])
    text = C.to_yaml(raw)
    assert C.from_yaml(text) == raw
    assert C.config_hash(C.to_yaml(C.from_yaml(text))) == C.config_hash(text)


@pytest.mark.parametrize("name", ["adam", "chainer_adam"])
def test_lr_is_an_alias_of_adams_alpha(name):
    from mnframe.builder.optimizer import optimizer_kwargs

    cfg = validate(C.compose(["recipe=mnist", f"optimizer.name={name}", "optimizer.lr=0.01"]), 2)
    assert optimizer_kwargs(cfg.optimizer)["alpha"] == 0.01
    assert "lr" not in optimizer_kwargs(cfg.optimizer)


def test_chainer_adam_builds_chainers_own_class():
    import chainer

    from mnframe._internal.import_path import resolve as import_target
    from mnframe.builder.optimizer import OPTIMIZERS

    assert import_target(OPTIMIZERS["chainer_adam"]) is chainer.optimizers.Adam


# -- recipe-local options and the generated dataset defaults -------------------


def test_recipe_local_options_are_group_options():
    options = C.find_recipe_options()
    assert options[("dataset", "digits")] == C.RECIPES_DIR / "mnist" / "dataset" / "digits.yaml"
    assert options[("model", "mlp")] == C.RECIPES_DIR / "mnist" / "model" / "mlp.yaml"
    assert ("topology", "mlp_two_ranks") in options
    for (group, option), path in options.items():
        assert option in C.list_group_options(group)
        assert not (C.CONF_DIR / group / path.name).exists(), f"{path} shadows conf/{group}/{path.name}"
    raw = C.compose(["recipe=mnist_model_parallel", "model=mlp", "dataset=mnist", "dataset.source.path=/x"])
    assert raw["model"]["_target_"] == "mnframe.recipes.mnist.model.MLP"
    assert raw["dataset"]["source"]["source"] == "mnist"
    assert raw["topology"]["kind"] == "model_parallel"


def test_user_recipe_folder_brings_its_own_options(tmp_path):
    (tmp_path / "toy" / "model").mkdir(parents=True)
    (tmp_path / "toy" / "recipe.yaml").write_text(
        "# @package _global_\ndefaults:\n  - override /model: tiny\nname: toy\n"
    )
    (tmp_path / "toy" / "model" / "tiny.yaml").write_text("_target_: mnframe.recipes.mnist.model.MLP\nn_units: 8\n")
    cfg = validate(C.compose(["recipe=toy"], [tmp_path]), 1)
    assert cfg.model.kwargs["n_units"] == 8
    assert "tiny" in C.list_group_options("model", [tmp_path])


def test_same_option_in_two_recipe_folders_is_an_error(tmp_path):
    for name in ("a", "b"):
        (tmp_path / name / "model").mkdir(parents=True)
        (tmp_path / name / "recipe.yaml").write_text("# @package _global_\nname: x\n")
        (tmp_path / name / "model" / "same.yaml").write_text("_target_: x.y\n")
    with pytest.raises(ConfigError, match="model=same is defined twice"):
        C.find_recipe_options([tmp_path])


def test_dataset_defaults_come_from_the_schema():
    from mnframe.config.schema import DatasetConfig

    defaults = C.dataset_defaults()
    for name, field in DatasetConfig.model_fields.items():
        if not field.is_required():
            assert defaults[name] == field.default
    assert defaults["source"] == {"_target_": "???"}


@pytest.mark.parametrize("recipe", RECIPES)
def test_recipe_states_only_what_differs_and_every_dataset_key_is_overridable(recipe):
    import yaml

    stated = yaml.safe_load(C.find_recipes()[recipe].read_text()).get("dataset") or {}
    defaults = C.dataset_defaults()
    same = sorted(k for k, v in stated.items() if k != "source" and defaults.get(k) == v)
    assert not same, f"recipe {recipe} restates the schema's dataset defaults {same}"
    raw = C.compose([f"recipe={recipe}", "dataset.loader=multiprocess", "dataset.n_processes=2"])
    assert set(raw["dataset"]) == set(defaults)
    assert raw["dataset"]["loader"] == "multiprocess" and raw["dataset"]["n_processes"] == 2
