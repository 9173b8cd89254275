"""The messages bad input gets (issue 17, "Messages"): each names the key the user
wrote, what is allowed, and a fix; problems found by different checks are
reported together. Through compose + validate, as ``--check`` runs them."""

import pytest

from mnframe.builder.validate import validate
from mnframe.commands import cli
from mnframe.config import compose as C
from mnframe.config.issues import ConfigError


def refused(*overrides, world=1, config_dirs=()):
    """The message of the ConfigError that ``overrides`` get."""
    with pytest.raises(ConfigError) as info:
        validate(C.compose(list(overrides), config_dirs), world)
    return str(info.value)


def line_of(text, path):
    """The message line about ``path``."""
    [line] = [ln for ln in text.splitlines() if ln.strip().startswith(path + ":")]
    return line


def test_a_key_of_another_topology_kind_gets_no_self_suggestion():
    text = refused("topology.kind=model_parallel")
    line = line_of(text, "topology.classifier")
    assert "did you mean 'classifier'" not in line
    assert "allowed: kind, ranks" in line
    assert "kind data_parallel" in line and "override /topology: null" in line
    assert "topology.ranks: required key is missing" in text


@pytest.mark.slow  # a subprocess or many config compositions: the full tier
def test_misspelled_hyper_parameter_lists_the_lr_alias_and_suggests_it():
    text = refused("optimizer.lrr=0.1")  # mnist: Adam
    line = line_of(text, "optimizer.lrr")
    assert "did you mean 'lr'" in line
    assert "lr," in line.split("allowed:")[1] and "alpha" in line
    assert "+optimizer.lrr" not in text
    # nothing close: then (and only then) say how to add a new constructor argument
    assert "+optimizer.zzzz=" in refused("optimizer.zzzz=1")


def test_a_bad_alias_value_is_reported_under_the_key_the_user_wrote():
    text = refused("optimizer.lr=abc")
    assert "optimizer.lr: hyper-parameters must be numbers" in text
    assert "optimizer.alpha" not in text
    assert "1 problem" in text


@pytest.mark.parametrize("name", ["adam", "chainer_adam"])
@pytest.mark.slow  # a subprocess or many config compositions: the full tier
def test_adam_refuses_both_lr_and_alpha(name):
    text = refused(f"optimizer.name={name}", "optimizer.lr=0.1", "optimizer.alpha=0.2")
    line = line_of(text, "optimizer.lr")
    assert "'alpha'" in line and "both are set" in line
    # either one alone is fine, and null means Adam's default
    from mnframe.builder.optimizer import optimizer_kwargs

    for override, alpha in (("optimizer.lr=0.1", 0.1), ("optimizer.alpha=0.2", 0.2)):
        cfg = validate(C.compose([f"optimizer.name={name}", override]), 1)
        assert optimizer_kwargs(cfg.optimizer)["alpha"] == alpha
    cfg = validate(C.compose([f"optimizer.name={name}"]), 1)
    assert "alpha" not in optimizer_kwargs(cfg.optimizer) and "lr" not in optimizer_kwargs(cfg.optimizer)


@pytest.mark.slow  # a subprocess or many config compositions: the full tier
def test_misspelled_extension_name_gets_a_suggestion():
    text = refused("extensions.progres_bar.enabled=false")
    line = line_of(text, "extensions.progres_bar")
    assert "did you mean 'progress_bar'" in line
    assert "print_report" in line  # the extensions there are listed


@pytest.mark.slow  # a subprocess or many config compositions: the full tier
def test_misspelled_key_of_an_extension_lists_that_kinds_keys():
    line = line_of(refused("extensions.plot_loss.y_keyz=[a]"), "extensions.plot_loss.y_keyz")
    assert "did you mean 'y_keys'" in line
    assert "update_interval" not in line  # a progress_bar key, not a plot's
    line = line_of(refused("+extensions.plot_loss.y_keyz=[a]"), "extensions.plot_loss.y_keyz")
    assert "did you mean 'y_keys'" in line and "update_interval" not in line


def test_unknown_extension_kind_lists_the_kinds():
    line = line_of(refused("+extensions.mine={kind: plott}"), "extensions.mine.kind")
    assert "unknown extension kind" in line and "did you mean 'plot'" in line
    assert "tensorboard" in line and "or set _target_" in line


@pytest.mark.slow  # a subprocess or many config compositions: the full tier
def test_stop_shows_the_expected_form():
    for value, path in (("5", "trainer.stop"), ("[5,epochs]", "trainer.stop.1")):
        line = line_of(refused(f"trainer.stop={value}"), path)
        assert "[N, epoch] or [N, iteration]" in line and "trainer.stop=[5,epoch]" in line


def test_errors_of_different_checks_are_reported_together():
    text = refused("dataset.batch_size=-1", "dataset.strategy=scater", world=2)
    assert "2 problems" in text
    assert "dataset.batch_size" in text
    assert "did you mean 'scatter'" in text


def test_broken_yaml_in_config_dir_fails_only_its_recipe(tmp_path):
    (tmp_path / "broken.yaml").write_text("# @package _global_\nname: [oops\n")
    (tmp_path / "mine.yaml").write_text(
        "# @package _global_\ndefaults:\n  - override /optimizer: sgd\n"
        "name: mine\nmodel: {_target_: mnframe.recipes.mnist.model.MLP, n_units: 8}\n"
    )
    assert validate(C.compose(["recipe=mnist"], [tmp_path]), 1).name == "mnist"
    assert validate(C.compose(["recipe=mine"], [tmp_path]), 1).name == "mine"
    with pytest.raises(ConfigError) as info:
        C.compose(["recipe=broken"], [tmp_path])
    assert str(tmp_path / "broken.yaml") in str(info.value)
    assert "recipe 'broken'" in str(info.value)


def test_broken_yaml_of_a_group_option_names_the_file(tmp_path):
    (tmp_path / "optimizer").mkdir()
    (tmp_path / "optimizer" / "bad.yaml").write_text("lr: [0.1\n")
    assert validate(C.compose(["recipe=mnist"], [tmp_path]), 1).name == "mnist"
    with pytest.raises(ConfigError) as info:
        C.compose(["optimizer=bad"], [tmp_path])
    assert "optimizer/bad.yaml" in str(info.value)


def test_own_recipe_without_config_dir_gets_a_hint(tmp_path, monkeypatch):
    (tmp_path / "my_recipes").mkdir()
    (tmp_path / "my_recipes" / "hinted_model.yaml").write_text("# @package _global_\nname: hinted_model\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as info:
        cli.check(["recipe=hinted_model"], 1)
    assert "--config-dir my_recipes recipe=hinted_model" in str(info.value)
    with pytest.raises(ConfigError) as info:
        cli.check(["recipe=nothing_of_the_kind"], 1)
    assert "--config-dir DIR" in str(info.value)


@pytest.mark.parametrize("logger,module", [("tensorboard", "tensorboardX"), ("mlflow", "mlflow")])
def test_logger_without_its_package_is_an_environment_problem(monkeypatch, logger, module):
    """Both loggers alike: a missing optional package is exit 3 (DependencyError), naming the extra."""
    import sys

    from mnframe.runtime.errors import DependencyError, ExitStatus

    monkeypatch.setitem(sys.modules, module, None)  # as if it were not installed
    with pytest.raises(DependencyError) as info:
        validate(C.compose([f"logger={logger}"]), 1)
    assert info.value.exit_status == ExitStatus.ENVIRONMENT
    assert str(info.value) == (
        f"extensions.{logger} (logger={logger}) needs the {module} package, which is not installed; "
        f"fix: pip install 'mnframe[{logger}]' (or {module}), or logger=none"
    )


def test_tensorboard_logger_needs_its_log_report():
    text = refused("logger=tensorboard", "extensions.log_report.enabled=false")
    assert "extensions.tensorboard.log_report" in text


@pytest.mark.slow  # a subprocess or many config compositions: the full tier
def test_refused_overrides_and_validation_problems_come_in_one_message():
    with pytest.raises(ConfigError) as info:
        cli.check(["trainer.stpo=1", "optimizer=adamm", "model.n_unitz=3", "dataset.strategy=scater"], 2)
    text = str(info.value)
    assert "4 problems" in text
    for needle in ("did you mean 'stop'", "did you mean 'adam'", "did you mean 'n_units'", "did you mean 'scatter'"):
        assert needle in text


# -- issue 38 item 9: messages that did not help --------------------------------------------------


def test_an_override_hydra_cannot_parse_is_named_with_how_to_write_it():
    with pytest.raises(ConfigError) as info:
        C.compose(["trainer.stop=[5,epoch"])
    text = str(info.value)
    assert text.startswith("cannot parse the override 'trainer.stop=[5,epoch': no viable alternative")
    assert "key=[a,b] (e.g. trainer.stop=[5,epoch])" in text and "single quotes" in text
    assert "\n" not in text  # one line


def test_a_model_section_without_target_says_to_add_one_or_pick_an_option(tmp_path):
    (tmp_path / "nt.yaml").write_text("# @package _global_\nname: nt\nmodel: {n_units: 50}\n")
    text = refused("recipe=nt", config_dirs=[tmp_path])
    line = line_of(text, "model")
    assert "no _target_" in line and "n_units is not one" in line
    assert "add `_target_: your_module.YourModel`" in line and "`- override /model: mlp`" in line
    assert "valid dictionary or instance of Component" not in text
    assert line.endswith(f"[set in {tmp_path / 'nt.yaml'}, line 3]")


def test_a_bad_value_in_a_recipe_file_names_its_file_and_line_unless_overridden(tmp_path):
    recipe = tmp_path / "bv.yaml"
    recipe.write_text(
        "# @package _global_\ndefaults:\n  - override /model: mlp\nname: bv\ndataset:\n  batch_size: -5\n"
    )
    line = line_of(refused("recipe=bv", config_dirs=[tmp_path]), "dataset.batch_size")
    assert line.endswith(f"(got -5) [set in {recipe}, line 6]")
    line = line_of(refused("recipe=bv", "dataset.batch_size=-3", config_dirs=[tmp_path]), "dataset.batch_size")
    assert line.endswith("(got -3)")  # the command line set it: no file to point at


def test_a_yaml_syntax_error_in_a_recipe_names_file_line_and_column(tmp_path):
    (tmp_path / "bad.yaml").write_text("# @package _global_\nname: bad\nmodel:\n  n_units: 50\n   channels: 3\n")
    with pytest.raises(ConfigError) as info:
        C.compose(["recipe=bad"], [tmp_path])
    assert f"cannot read {tmp_path / 'bad.yaml'}, line 5, column 12: mapping values are not allowed here" in str(
        info.value
    )


def test_a_target_that_does_not_import_under_evaluate_names_the_directory_and_pythonpath(monkeypatch, tmp_path):
    from mnframe.commands.trained import with_import_hint

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", "/somewhere")
    text = "invalid configuration: 1 problem\n  model._target_: cannot import module 'my_models' (...)"
    hinted = with_import_hint(text)
    assert f"working directory ({tmp_path})" in hinted and "PYTHONPATH=/somewhere" in hinted
    assert "run this command from the directory the run was trained in" in hinted
    assert with_import_hint("dataset.batch_size: bad") == "dataset.batch_size: bad"
