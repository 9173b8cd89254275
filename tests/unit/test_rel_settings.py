"""The MNFRAME_* settings table (mnframe/runtime/settings.py): parsing, validation, and the docs."""

import re
from pathlib import Path

import pytest

from mnframe.runtime import settings
from mnframe.runtime.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "raw,seconds",
    [("600", 600), ("0", 0), ("2.5", 2.5), ("90s", 90), ("10m", 600), ("1h", 3600), (" 5S ", 5), (".5", 0.5)],
)
def test_durations_accept_units(raw, seconds):
    assert settings.seconds(raw) == seconds


@pytest.mark.parametrize("raw", ["-1", "ten", "5 minutes", "1d", "", "1e3", "inf"])
def test_bad_durations_are_rejected_naming_variable_and_form(raw):
    with pytest.raises(ConfigError) as info:
        settings.validate({"MNFRAME_COLLECTIVE_TIMEOUT": raw})
    text = str(info.value)
    assert f"MNFRAME_COLLECTIVE_TIMEOUT={raw!r}" in text and "e.g. 600, 90s, 10m" in text


def test_every_bad_setting_is_named_at_once():
    with pytest.raises(ConfigError) as info:
        settings.validate({"MNFRAME_EXIT_GRACE": "soon", "MNFRAME_NO_GUARD": "maybe", "MNFRAME_FAKE_NODE_SIZE": "0"})
    text = str(info.value)
    assert "MNFRAME_EXIT_GRACE='soon'" in text and "MNFRAME_NO_GUARD='maybe'" in text
    assert "MNFRAME_FAKE_NODE_SIZE='0'" in text and "positive integer" in text


def test_defaults_and_values():
    values = settings.validate({"MNFRAME_NO_GUARD": "yes", "MNFRAME_EXIT_TIMEOUT": "1m"})
    assert values["MNFRAME_COLLECTIVE_TIMEOUT"] == 600.0 and values["MNFRAME_EXIT_GRACE"] == 2.0
    assert values["MNFRAME_NO_GUARD"] is True and values["MNFRAME_EXIT_TIMEOUT"] == 60.0
    assert values["MNFRAME_CUDA_AWARE"] is None


def test_unknown_variables_get_a_suggestion():
    found = settings.unknown({"MNFRAME_COLLECTIVE_TIMOUT": "5", "MNFRAME_VENV": ".venv", "PATH": "/bin"})
    assert found == [("MNFRAME_COLLECTIVE_TIMOUT", "MNFRAME_COLLECTIVE_TIMEOUT")]


def test_docs_show_the_table():
    docs = (REPO / "docs" / "reliability.md").read_text()
    assert settings.markdown_table() in docs


def test_every_variable_the_library_reads_is_in_the_table():
    read = set()
    for path in (REPO / "mnframe").rglob("*.py"):
        read |= set(re.findall(r"\bMNFRAME_[A-Z_]+[A-Z]\b", path.read_text()))
    assert read <= set(settings.BY_NAME) | set(settings.TOOL_VARIABLES), read - set(settings.BY_NAME)


def test_every_test_named_in_the_reliability_docs_exists():
    docs = (REPO / "docs" / "reliability.md").read_text()
    named = set(re.findall(r"`(test_\w+)", docs))
    defined = set()
    for path in (REPO / "tests").rglob("test_*.py"):
        defined |= set(re.findall(r"^def (test_\w+)", path.read_text(), flags=re.M))
    assert named and named <= defined, sorted(named - defined)
