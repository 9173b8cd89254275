"""Each fact about a component lives in one place (issue 19): the extension kinds
and lr schedules are the typed models themselves, and the arguments the builder
passes to an updater are one table that the validator reads."""

import typing

import pytest

from mnframe.builder.validate import validate
from mnframe.config import compose as C
from mnframe.config.issues import ConfigError
from mnframe.config.schema_extensions import Extension, ExtensionBase, extension_kinds
from mnframe.config.schema_schedules import LrSchedule


def test_every_extension_kind_is_a_model_that_builds_itself():
    kinds = extension_kinds()
    members = typing.get_args(typing.get_args(Extension)[0])
    # the kinds are the union's members, each named by its ``kind`` literal (a kind table would be a second list)
    assert sorted(kinds) == sorted(typing.get_args(m.model_fields["kind"].annotation)[0] for m in members)
    assert len(kinds) == len(members)
    assert set(kinds) >= {  # the shipped kinds (more may be added)
        "evaluator",
        "log_report",
        "print_report",
        "progress_bar",
        "plot",
        "observe_lr",
        "tensorboard",
        "csv",
        "mlflow",
        "custom",
    }
    for kind, model in kinds.items():
        assert issubclass(model, ExtensionBase)
        assert model.build is not ExtensionBase.build, kind
    # the validator's list of kinds comes from the union itself
    with pytest.raises(ConfigError) as info:
        validate(C.compose(["+extensions.x={kind: nope}"]), 1)
    for kind in kinds:
        if kind != "custom":
            assert kind in str(info.value)


def test_every_schedule_is_a_model_that_builds_itself():
    union = typing.get_args(LrSchedule)[0]
    for model in typing.get_args(union):
        assert "build" in vars(model), model


def test_extensions_are_typed_by_the_config_not_by_the_pipeline():
    cfg = validate(
        C.compose(["extensions.plot_loss=null", "+extensions.mine={_target_: chainer.training.extensions.observe_lr}"]),
        1,
    )
    assert "plot_loss" not in cfg.extensions
    assert type(cfg.extensions["plot_accuracy"]).__name__ == "PlotExt"  # kind: plot
    assert type(cfg.extensions["progress_bar"]).__name__ == "ProgressBarExt"  # kind: its key
    assert cfg.extensions["mine"].kind == "custom"  # a _target_ without a kind
    assert typing.get_args(Extension)  # a discriminated union


UPDATER = """
import chainer


class NeedsModels(chainer.training.updaters.StandardUpdater):
    def __init__(self, iterator, optimizer, models, device=None):
        super().__init__(iterator, optimizer, device=device)
        self.models = models


class NeedsConverter(chainer.training.updaters.StandardUpdater):
    def __init__(self, iterator, optimizer, converter, device=None):
        super().__init__(iterator, optimizer, converter=converter, device=device)
"""


def test_updater_arguments_the_builder_provides_are_the_ones_validation_accepts(tmp_path, monkeypatch):
    from mnframe import pipeline
    from mnframe.builder.updater import PROVIDED

    (tmp_path / "my_updaters.py").write_text(UPDATER)
    monkeypatch.syspath_prepend(str(tmp_path))
    base = ["extensions=minimal", "model.n_units=8", "trainer.stop=[1,iteration]"]
    cfg = validate(C.compose(base + ["updater._target_=my_updaters.NeedsModels"]), 1)
    trainer = pipeline.build_trainer(cfg, str(tmp_path / "run")).trainer
    assert trainer.updater.models == (trainer.updater.get_optimizer("main").target,)
    assert "models" in PROVIDED
    # what the builder does not pass is asked of the config
    with pytest.raises(ConfigError, match="updater.converter"):
        validate(C.compose(base + ["updater._target_=my_updaters.NeedsConverter"]), 1)
