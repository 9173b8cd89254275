"""``mnframe.cli.flags_problem`` (issue 38 item 8): the runner's own flags and ``tune=optuna``
are refused in one line where they would be ignored or misreported."""

import pytest

from mnframe import cli


def problem(*argv):
    opts, rest = cli.parse_own_flags(argv)
    return cli.flags_problem(opts, rest)


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["--check", "--world-size", "-1"], "--world-size must be a positive number of ranks (got -1)"),
        (["--check", "--world-size", "0"], "(got 0)"),
        (["--world-size", "0"], "(got 0)"),
        (["--world-size", "4"], "--world-size applies only to --check"),
        (["--graph", "g.png", "--has-cuda"], "--has-cuda and --graph apply only to --check"),
        (["tune=optuna", "optimizer.lr=0.1"], "add -m (python -m mnframe -m tune=optuna"),
    ],
)
def test_refused(argv, needle):
    assert needle in (problem(*argv) or "")


@pytest.mark.parametrize(
    "argv",
    [
        ["--check", "--world-size", "4"],
        ["--check", "tune=optuna"],  # validating a search's config runs no search
        ["-m", "tune=optuna"],
        ["--multirun", "tune=optuna"],
        ["recipe=mnist"],
    ],
)
def test_accepted(argv):
    assert problem(*argv) is None
