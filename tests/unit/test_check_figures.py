"""scripts/check_figures.py: README.md and docs/*.md hold no figure without a source, and the
scan itself tells a sourced figure from a hand-typed one (it runs no command)."""

import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("check_figures", REPO / "scripts" / "check_figures.py")
check_figures = importlib.util.module_from_spec(spec)
sys.modules["check_figures"] = check_figures  # (dataclasses look their module up there)
spec.loader.exec_module(check_figures)

TEST = "tests/unit/test_check_figures.py::test_every_figure_in_the_readme_and_docs_has_a_source"
BENCH = "| mnist | 2 | 11300.6 | 4163.3 | 2.714 |"  # a line of BENCHMARKS.md


def problems(text):
    """The scan's problems for one Markdown text (as if it were docs/page.md)."""
    blocks = check_figures.blocks(REPO / "docs" / "page.md", text)
    return [problem for block in blocks for problem in check_figures.check_block(block, BENCH)]


def test_every_figure_in_the_readme_and_docs_has_a_source():
    assert check_figures.scan() == []


def test_a_hand_typed_timing_ratio_or_accuracy_is_refused():
    for text in (
        "The job takes about 35 s.",
        "It is 1.5x faster.",
        "It reaches 98.6 % accuracy.",
        "validation accuracy 0.95 at the end",
        "| a row | 17 min |",
    ):
        [problem] = problems(text)
        assert "untagged figure" in problem and "docs/page.md:1" in problem


def test_shapes_counts_and_placeholders_are_not_figures():
    assert problems("2 nodes x 2 ranks, 8x8 digits, 844 passed, `done in <T> s`, ResNet-50") == []


def test_a_tagged_figure_needs_an_existing_check():
    good = f'<!-- figure: cmd="python -m mnframe" check="{TEST}" tolerance="x3" -->\nIt takes 35 s.'
    assert problems(good) == []
    [missing] = problems('<!-- figure: cmd="x" check="tests/nope.py" tolerance="x3" -->\nIt takes 35 s.')
    assert "tests/nope.py does not exist" in missing
    [no_test] = problems(f'<!-- figure: cmd="x" check="{TEST}_not" tolerance="1" -->\n35 s')
    assert "defines no test" in no_test
    [lacks] = problems(f'<!-- figure: cmd="x" check="{TEST}" -->\nIt takes 35 s.')
    assert "lacks tolerance" in lacks


def test_a_figure_still_to_measure_is_pending_not_an_error():
    text = '<!-- figure: cmd="bash scripts/t.sh" check="scripts/t.sh" tolerance="?" -->\nabout FIGURE-TODO min'
    assert problems(text) == []


def test_a_figure_from_benchmarks_must_be_in_the_log():
    assert problems("mnist on 2 ranks: 2.714x the peer (BENCHMARKS.md section 3)") == []
    [problem] = problems("mnist on 2 ranks: 2.9x the peer (BENCHMARKS.md section 3)")
    assert "'2.9x' is not in BENCHMARKS.md" in problem


def test_a_setting_must_be_in_the_file_it_names():
    ok = "<!-- setting: mnframe/runtime/settings.py -->\nThe deadline is 600 s by default."
    assert problems(ok) == []
    [problem] = problems("<!-- setting: mnframe/runtime/settings.py -->\nThe deadline is 601 s by default.")
    assert "601 is not in mnframe/runtime/settings.py" in problem


def test_tags_straight_above_a_fence_or_table_cover_it():
    fence = "<!-- setting: mnframe/runtime/settings.py -->\nExample:\n```\nwaited 600 s\n```"
    table = "<!-- setting: mnframe/runtime/settings.py -->\n| a | 600 s |\n| b | 600 s |"
    assert problems(fence) == [] and problems(table) == []
    assert len(problems("Example:\n\n```\nwaited 600 s\n```")) == 1  # a blank line: no cover
