"""Every figure in README.md and docs/*.md can be reproduced: scan them and fail on one that cannot.

A figure is a measured-looking number: a duration (`35 s`, `2.5 ms`, `17 min`), a ratio
(`1.3x`, `2×`), a percentage (`98.6 %`), a rate (`900 examples/s`, `0.9 Gbit/s`, `ns per`) or an
accuracy or loss written as a plain number (`validation accuracy 0.95`). Each block that holds
one (a paragraph, one table row, or a fenced code block; a table or fence takes the tags of the
lines straight above it) must say where the figure comes from, in one
of three ways:

* it names ``BENCHMARKS.md`` (the measurement log, each entry with its command): every number
  of its figures must appear in BENCHMARKS.md, so a figure is a copy of a logged measurement;
* a tag ``<!-- figure: cmd="COMMAND" check="PATH[::TEST]" tolerance="..." -->``: COMMAND
  reproduces it and the test or script PATH fails when it drifts past the tolerance (PATH must
  exist, TEST must be defined in it; ``value="..."`` is the figure the check reads, when it reads
  one from the tag). A block with the literal marker ``FIGURE-TODO`` is a figure still to be
  measured: its tag is required but its check may not exist yet (reported as pending);
* a tag ``<!-- setting: PATH [PATH ...] -->``: the numbers are settings, defaults or limits,
  not measurements; each must appear in one of the files named (the code or test that sets it).

Run: ``python scripts/check_figures.py`` (exit 1 and one line per problem; ``--list`` prints
every figure with its source). ``tests/unit/test_check_figures.py`` runs the scan.
"""

from __future__ import annotations

import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, List, Optional, Sequence

REPO = Path(__file__).resolve().parent.parent
NUMBER = r"\d+(?:\.\d+)?"
FIGURE = re.compile(
    rf"(?<![\w.-])(?P<num>{NUMBER}(?:\s?(?:-|–|to)\s?{NUMBER})?)\s?"
    r"(?P<unit>ms|s|sec|seconds?|min|minutes?|h|hours?|x|×|%|examples/s|images/s|it/s|"
    r"[KMG]i?B/s|[MG]bit/s|ns per)(?![\w/])"
)
# an accuracy or a loss written as a plain number ("validation accuracy 0.95", "loss 2.10, 1.19")
SCORE = re.compile(r"(?<![\w/])(?:accuracy|loss)(?:es)?\s+(?:of\s+)?(?P<num>\d+\.\d+)")
# "2 x 2" (nodes x ranks) is a shape, not a ratio: a ratio's x follows the number directly
SHAPE = re.compile(r"^\d+(?:\.\d+)?\s(?:x)$")
TAG = re.compile(r"<!--\s*(figure|setting):(.*?)-->", re.S)
FENCE = re.compile(r"^(```|~~~)")


@dataclass
class Block:
    path: Path
    line: int  # first line, 1-based
    text: str


@dataclass
class Figure:
    block: Block
    text: str
    numbers: List[str]


def blocks(path: Path, text: Optional[str] = None) -> Iterator[Block]:
    """Paragraphs, table rows (one block each) and fenced code blocks of a Markdown file
    (``text``: its contents, when not read from ``path``)."""
    lines = (path.read_text() if text is None else text).split("\n")
    i, current, start = 0, [], 0

    def flush():
        if current:
            yield Block(path, start + 1, "\n".join(current))

    while i < len(lines):
        line = lines[i]
        if FENCE.match(line):
            # a paragraph that runs straight into the fence (no blank line) lends it its tags
            inherited = [m.group(0) for m in TAG.finditer("\n".join(current))]
            yield from flush()
            current, start = [*inherited, line], i
            i += 1
            while i < len(lines) and not FENCE.match(lines[i]):
                current.append(lines[i])
                i += 1
            current.append(lines[i] if i < len(lines) else "")
            yield from flush()
            current = []
        elif line.lstrip().startswith("|"):
            # each row is a block; tags on the lines straight above the table apply to every row
            inherited = [m.group(0) for m in TAG.finditer("\n".join(current))]
            yield from flush()
            current = []
            while i < len(lines) and lines[i].lstrip().startswith("|"):
                yield Block(path, i + 1, "\n".join([*inherited, lines[i]]))
                i += 1
            continue
        elif not line.strip():
            yield from flush()
            current = []
        else:
            if not current:
                start = i
            current.append(line)
        i += 1
    yield from flush()


def figures(block: Block) -> List[Figure]:
    text = TAG.sub("", block.text)
    found = []
    for m in FIGURE.finditer(text):
        if m.group("unit") == "x" and SHAPE.match(m.group(0)):
            continue
        found.append(Figure(block, m.group(0), re.findall(NUMBER, m.group("num"))))
    for m in SCORE.finditer(text):
        found.append(Figure(block, m.group(0), [m.group("num")]))
    return found


def tags(block: Block):
    for m in TAG.finditer(block.text):
        yield m.group(1), m.group(2).strip()


def fields(body: str) -> dict:
    out = {}
    for part in shlex.split(body):
        if "=" in part:
            key, value = part.split("=", 1)
            out[key] = value
    return out


def _has_number(text: str, number: str) -> bool:
    """``number`` occurs in ``text`` as a whole number (5 matches 5 and 5.0, not 15 or 5.5)."""
    if "." in number:
        number = number.rstrip("0").rstrip(".")
    return re.search(rf"(?<![\d.]){re.escape(number)}(?:\.0+)?(?!\d|\.\d)", text) is not None


def tag_problems(where: str, block_tags, pending: bool) -> List[str]:
    """A figure tag must name its command, its check (which must exist) and its tolerance."""
    problems = []
    for kind, body in block_tags:
        if kind != "figure":
            continue
        f = fields(body)
        missing = [k for k in ("cmd", "check", "tolerance") if not f.get(k)]
        if missing:
            problems.append(f"{where}: figure tag lacks {', '.join(missing)}: {body}")
            continue
        path, _, test = f["check"].partition("::")
        if not (REPO / path).exists():
            if not pending:
                problems.append(f"{where}: the figure's check {path} does not exist")
        elif test and not re.search(rf"\bdef {re.escape(test)}\b", (REPO / path).read_text()):
            problems.append(f"{where}: {path} defines no test {test}")
    return problems


def setting_problems(where: str, found: List[Figure], block_tags) -> List[str]:
    """Settings: every number must appear in one of the files the tags name."""
    paths = [p for kind, body in block_tags if kind == "setting" for p in body.split()]
    problems = [f"{where}: setting source {p} does not exist" for p in paths if not (REPO / p).exists()]
    sources = [(REPO / p).read_text() for p in paths if (REPO / p).exists()]
    for fig in found:
        for number in fig.numbers:
            if not any(_has_number(src, number) for src in sources):
                problems.append(f"{where}: setting {fig.text!r}: {number} is not in {' '.join(paths)}")
    return problems


def check_block(block: Block, benchmarks: str) -> List[str]:
    """The problems of one block (empty: every figure in it has a source)."""
    where = f"{block.path.relative_to(REPO)}:{block.line}"
    found = figures(block)
    block_tags = list(tags(block))
    problems = tag_problems(where, block_tags, "FIGURE-TODO" in block.text)
    kinds = {kind for kind, _ in block_tags}
    if not found or "figure" in kinds:
        return problems
    if "setting" in kinds:
        return problems + setting_problems(where, found, block_tags)
    if "BENCHMARKS.md" in block.text:
        return problems + [
            f"{where}: {fig.text!r} is not in BENCHMARKS.md"
            for fig in found
            for number in fig.numbers
            if not _has_number(benchmarks, number)
        ]
    return problems + [
        f"{where}: untagged figure {fig.text!r}: name BENCHMARKS.md, tag it "
        f'(<!-- figure: cmd="..." check="..." tolerance="..." -->, <!-- setting: PATH -->) or drop it'
        for fig in found
    ]


def documents(root: Path = REPO) -> List[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def scan(paths: Optional[Sequence[Path]] = None) -> List[str]:
    benchmarks = (REPO / "BENCHMARKS.md").read_text()
    problems = []
    for path in paths or documents():
        for block in blocks(path):
            problems.extend(check_block(block, benchmarks))
    return problems


def pending(paths: Optional[Sequence[Path]] = None) -> List[str]:
    """Figures still marked FIGURE-TODO (to be measured and filled in)."""
    return [
        f"{b.path.relative_to(REPO)}:{b.line}"
        for path in paths or documents()
        for b in blocks(path)
        if "FIGURE-TODO" in b.text
    ]


def main(argv: Sequence[str]) -> int:
    if "--list" in argv:
        for path in documents():
            for block in blocks(path):
                for fig in figures(block):
                    source = [k for k, _ in tags(block)] or (
                        ["BENCHMARKS.md"] if "BENCHMARKS.md" in block.text else ["?"]
                    )
                    print(f"{path.relative_to(REPO)}:{block.line}: {fig.text} [{', '.join(source)}]")
    problems = scan()
    for problem in problems:
        print(problem)
    for where in pending():
        print(f"{where}: FIGURE-TODO: a figure still to be measured and filled in")
    print(f"check_figures: {len(problems)} problem(s)", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
