"""``mnframe.commands.cli.flags_problem`` (issue 38 item 8): the runner's own flags and ``tune=optuna``
are refused in one line where they would be ignored or misreported."""

import pytest

from mnframe.commands import cli


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


def test_hydra_optuna_sweeper_without_tune_points_to_tune_optuna():
    """Issue 38 item 10: lightning-hydra-template's `-m hydra/sweeper=optuna` gave the trials no objective."""
    text = problem("-m", "hydra/sweeper=optuna", "model.n_units=choice(8,16)")
    assert text.startswith("hydra/sweeper=optuna alone gives the trials no objective") and "use tune=optuna" in text
    assert problem("-m", "tune=optuna", "hydra/sweeper=optuna") is None


def test_sqlalchemy_2_with_optuna_2_is_named_as_an_environment_problem():
    from mnframe.commands import tune

    versions = {"optuna": "2.10.1", "sqlalchemy": "2.0.30"}
    text = tune.environment_problem(versions.__getitem__)
    assert "optuna 2.10.1" in text and "SQLAlchemy 2.0.30" in text and "sqlalchemy<2" in text
    assert tune.environment_problem({"optuna": "2.10.1", "sqlalchemy": "1.4.54"}.__getitem__) is None
    assert tune.environment_problem({"optuna": "4.5.0", "sqlalchemy": "2.0.30"}.__getitem__) is None
