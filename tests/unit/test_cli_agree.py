"""The ranks' agreement on the broadcast config: one rank's verdict or a
different config hash becomes the same ConfigError everywhere."""

import pytest

from mnframe.commands import cli
from mnframe.config import compose as C
from mnframe.config.issues import ConfigError


class FakeWorld:
    """Rank 0 of 2; what the other rank contributes to each exchange (by its name) is given."""

    rank, size = 0, 2

    def __init__(self, digest, error=None):
        self.other = {"verdict:config": error, "config.hash": digest}


@pytest.fixture(autouse=True)
def two_ranks(monkeypatch):
    """The exchanges of ``agree_on_config`` (``host_collectives.allgather_obj``) with the fake other rank."""
    from mnframe.communicators import host_collectives

    monkeypatch.setattr(host_collectives, "allgather_obj", lambda world, obj, name: [obj, world.other[name]])


@pytest.fixture(scope="module")
def yaml_text():
    return C.to_yaml(C.compose(["recipe=mnist"]))


def test_agreement_returns_the_typed_config(yaml_text):
    digest = C.config_hash(yaml_text)
    cfg, config, h = cli.agree_on_config(FakeWorld(digest), yaml_text, has_cuda=False)
    assert cfg.name == "mnist" and h == digest and config["name"] == "mnist"


def test_other_ranks_error_is_raised_here(yaml_text):
    world = FakeWorld(C.config_hash(yaml_text), "invalid configuration: rank 1 has no GPU")
    with pytest.raises(ConfigError, match="rank 1 has no GPU") as info:
        cli.agree_on_config(world, yaml_text, has_cuda=False)
    assert str(info.value) == "invalid configuration: rank 1 has no GPU" and info.value.agreed


def test_different_hashes_are_refused(yaml_text):
    with pytest.raises(ConfigError, match="different configurations"):
        cli.agree_on_config(FakeWorld("0" * 64), yaml_text, has_cuda=False)
