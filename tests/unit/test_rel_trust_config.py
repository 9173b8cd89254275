"""Opening someone else's run imports only mnframe's and the recipes' code unless --trust-config
(issue 38, item 6): the check, load_model, and the commands' flag. The jobs (evaluate under
mpiexec): tests/test_rel_foreign_runs.py."""

import pytest
import yaml

from mnframe.checkpoint.model_files import load_model
from mnframe.commands.evaluate import parse_args as evaluate_args
from mnframe.commands.predict import parse_args as predict_args
from mnframe.commands.trained import read_run_config
from mnframe.config import trust
from mnframe.runtime.errors import ConfigError


def foreign(marker):
    return {
        "recipe": "mnist",
        "model": {"_target_": "subprocess.getoutput", "cmd": f"touch {marker}"},
        "updater": {"_target_": "chainer.training.updaters.StandardUpdater"},
        "dataset": {"source": {"_target_": "mnframe.recipes.mnist.data.get_datasets"}},
        "extensions": [{"_target_": "recipes.mnist.model.MLP"}, {"_target_": "os:system"}],
    }


def test_targets_outside_mnframe_and_the_recipes_are_named_in_one_line(tmp_path):
    with pytest.raises(trust.UntrustedConfig) as info:
        trust.check(foreign(tmp_path / "m"), "run/config.yaml", trust=False)
    message = str(info.value)
    assert isinstance(info.value, ConfigError) and info.value.exit_status == 2 and "\n" not in message
    assert (
        "module(s) os, subprocess (model._target_: subprocess.getoutput, extensions.1._target_: os:system)" in message
    )
    assert "--trust-config" in message and "mnframe.recipes" not in message and "chainer" not in message
    trust.check(foreign(tmp_path / "m"), "run/config.yaml", trust=True)  # the user said so
    trust.check(  # what the user sets on the command line is theirs
        {"model": {"_target_": "my_pkg.Net"}}, "run/config.yaml", trust=False, overridden=["model._target_=my_pkg.Net"]
    )


def test_load_model_and_the_commands_refuse_a_foreign_target_before_importing_it(tmp_path):
    marker = tmp_path / "pwned"
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text(yaml.safe_dump(foreign(marker)))
    with pytest.raises(trust.UntrustedConfig, match="subprocess.getoutput.*trust_config=True"):
        load_model(run)
    with pytest.raises(trust.UntrustedConfig, match="subprocess.getoutput.*--trust-config"):
        read_run_config(str(run), [])
    assert not marker.exists()
    assert evaluate_args([str(run), "--trust-config"]).trust_config
    assert not evaluate_args([str(run)]).trust_config
    assert predict_args([str(run), "x.npz", "--trust-config"]).trust_config
