"""`python -m mnframe --help` lists every command first, one line each, and an unknown command
gets the same list (exit 2, naming the word, with a suggestion for a typo)."""

import subprocess
import sys

import pytest

from mnframe.commands.cli import command_list, unknown_command

# what each command's line must hold, in the order --help lists them
COMMANDS = [
    ("train", "train, e.g. recipe="),
    ("evaluate", "python -m mnframe evaluate RUN_DIR"),
    ("predict", "python -m mnframe predict RUN_DIR INPUT"),
    ("checkpoint", "python -m mnframe checkpoint list|verify RUN_DIR"),
    ("doctor", "python -m mnframe doctor"),
    ("tune", "python -m mnframe -m tune=optuna"),
    ("check", "--check --world-size N [--graph FILE.png]"),
    ("compat", "python -m mnframe.compat SCRIPT.py"),
]


def mnframe(*args):
    return subprocess.run(
        [sys.executable, "-m", "mnframe", *args], capture_output=True, text=True, timeout=120, cwd="/"
    )


def assert_lists_every_command(head):
    lines = head.splitlines()
    where = []
    for _, text in COMMANDS:
        [at] = [i for i, line in enumerate(lines) if text in line]  # exactly one line each
        where.append(at)
    assert where == sorted(where), "commands out of order"
    assert "training is the default" in lines[0]


def test_the_command_list_heads_the_help_template():
    """Fast: the list (conf/config.yaml's hydra.help.header) and that --help prints it first."""
    from omegaconf import OmegaConf

    from mnframe.config.compose import CONF_DIR

    assert_lists_every_command(command_list())
    template = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "config.yaml").hydra.help)["template"]
    assert template.startswith("${hydra.help.header}") and "$CONFIG" not in template


@pytest.mark.slow
def test_help_lists_every_command_first_one_line_each():
    r = mnframe("--help")
    assert r.returncode == 0, r.stderr
    head, groups = r.stdout.split("== Configuration groups ==")
    assert_lists_every_command(head)
    assert "recipe: cifar" in groups and "communicator: auto" in groups  # Hydra's groups follow
    assert len(r.stdout.splitlines()) <= 50  # the composed config is not dumped (--cfg job prints it)


@pytest.mark.slow
@pytest.mark.parametrize("word, hint", [("frobnicate", ""), ("evalute", " (did you mean 'evaluate'?)")])
def test_an_unknown_command_gets_the_same_list(word, hint):
    r = mnframe(word, "runs/x")
    assert r.returncode == 2, r.stdout + r.stderr
    first, rest = r.stderr.split("\n", 1)
    assert first == f"mnframe: configuration error: unknown command {word!r}{hint}; the commands are:"
    assert command_list().strip() in rest and "Traceback" not in r.stderr


def test_overrides_flags_and_commands_are_not_unknown_commands():
    for argv in (["recipe=mnist"], ["~debug"], ["+x=1"], ["-m", "a=1,2"], ["--help"], [], ["evaluate", "r"]):
        assert unknown_command(argv) is None, argv
    assert unknown_command(["checkpoints", "list"]) == "checkpoints"
