"""The one import-path resolver (mnframe._internal.import_path): both spellings, and the validator's messages."""

import pytest

from mnframe._internal.import_path import locate, resolve


@pytest.mark.parametrize("path", ["mnframe.recipes.mnist.model:MLP", "mnframe.recipes.mnist.model.MLP"])
def test_both_spellings_name_the_same_object(path):
    from mnframe.recipes.mnist.model import MLP

    assert resolve(path) is MLP
    assert locate(path) == (MLP, None, None)


def test_modules_and_nested_attributes():
    import mnframe.communicators
    from mnframe.communicators.registry import CommunicatorInfo

    assert resolve("mnframe.communicators") is mnframe.communicators
    assert resolve("mnframe.communicators.registry:CommunicatorInfo.cpu_ok") is CommunicatorInfo.cpu_ok
    assert resolve(len) is len  # anything but a string is itself


@pytest.mark.parametrize(
    "path,problem,hint",
    [
        ("foo", "not a dotted path", None),
        ("nosuchpkg.mod.Thing", "cannot import module 'nosuchpkg.mod'", None),
        ("mnframe.recipes.mnist.model.MPL", "module 'mnframe.recipes.mnist.model' has no attribute 'MPL'", "MLP"),
        ("mnframe.recipes.mnist.model:MPL", "module 'mnframe.recipes.mnist.model' has no attribute 'MPL'", "MLP"),
    ],
)
def test_locate_says_what_is_wrong(path, problem, hint):
    obj, text, suggestion = locate(path)
    assert obj is None and problem in text and suggestion == hint
    with pytest.raises((ImportError, AttributeError)):
        resolve(path)


def test_the_validator_and_the_builders_use_it():
    from mnframe._internal import targets
    from mnframe._internal.targets import check_target

    assert targets.import_target is resolve
    assert check_target("model", "mnframe.recipes.mnist.model:MLP", {"n_units": 3}) == []
    issues = check_target("model", "mnframe.recipes.mnist.model:MLP", {"n_unit": 3})
    assert [i.path for i in issues] == ["model.n_unit"] and issues[0].suggestion == "n_units"
