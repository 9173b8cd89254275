"""Builder-provided communicators and configuration faults raised by a ``_target_`` (issue 17, bugs 4, 5)."""

import types

import pytest

from mnframe.builder import instantiate as I
from mnframe.builder.model import COMMUNICATOR_PARAMETERS, build_component
from mnframe.builder.validate import validate
from mnframe.config import compose as C
from mnframe.config.issues import ConfigError
from mnframe.config.schema import Component


class Declares:
    def __init__(self, comm, width=1, data_comm=None):
        self.comm, self.width, self.data_comm = comm, width, data_comm


class TakesAnything:
    def __init__(self, **kwargs):
        self.kwargs = kwargs


COMMS = types.SimpleNamespace(model="model-comm", data="data-comm", world="world-comm")


def test_a_model_gets_the_communicators_it_declares_by_name():
    made = build_component(Component.model_validate({"_target_": f"{__name__}.Declares", "width": 3}), COMMS, "model")
    assert (made.comm, made.data_comm, made.width) == ("model-comm", "data-comm", 3)
    # **kwargs declares nothing: no communicator is pushed into it
    made = build_component(Component.model_validate({"_target_": f"{__name__}.TakesAnything", "a": 1}), COMMS, "model")
    assert made.kwargs == {"a": 1}
    assert set(COMMUNICATOR_PARAMETERS.values()) == {"model", "data", "world"}


def test_validation_knows_the_builder_passes_comm():
    raw = C.compose(["recipe=seq2seq"])
    validate(raw, 2)  # Encoder/Decoder require `comm`; the config need not (must not) give it
    bad = C.compose(["recipe=seq2seq", "+topology.ranks.1.stages.0.module.comm=1"])
    with pytest.raises(
        ConfigError,
        match=r"topology\.ranks\.1\.stages\.0\.module\.comm: .*Encoder gets 'comm' "
        r"from the runner; remove it",
    ):
        validate(bad, 2)


def test_a_fault_names_the_key_and_the_blamed_argument():
    exc = FileNotFoundError("no file")
    exc.argument = ("train", "val")
    text = I.fault_message("dataset.source", "pkg.load", {"train": None}, exc)
    assert text.startswith(
        "dataset.source.train, dataset.source.val: pkg.load(train=None) failed: FileNotFoundError: no file"
    )
    with pytest.raises(ConfigError, match=r"^model: .*MLP\(n_units=-5\) failed: ValueError: negative"):
        I.instantiate(
            Component.model_validate({"_target_": "mnframe.recipes.mnist.model.MLP", "n_units": -5}), path="model"
        )
    with pytest.raises(AttributeError):  # not a configuration fault: keeps its traceback
        I.instantiate(Component.model_validate({"_target_": f"{__name__}.broken"}), path="model")


def broken():
    raise AttributeError("a bug in the user's code")


def test_recipe_data_blames_its_arguments():
    from mnframe.recipes.imagenet.data import get_datasets
    from mnframe.recipes.mnist.data import get_datasets as mnist

    with pytest.raises(FileNotFoundError) as info:
        get_datasets(train="train.txt", val=None)
    assert info.value.argument == ("train", "val")
    with pytest.raises(FileNotFoundError) as info:
        mnist("mnist", "/nonexistent")
    assert info.value.argument == "path"
