"""The README's main job, run as the README writes it, against the figures the README states:
its time (within the tolerance of its figure tag; the upper bound grows with the load average
when the shared machine is busier than at the measurement, which the tag records), its
validation accuracy, and its done line (the same fields, model.safetensors included).
scripts/check_figures.py points here."""

import json
import os
import re
import shlex
from pathlib import Path

import pytest

from mnframe.testing import run_mpi

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
CHECK = "tests/test_readme_main_job.py::test_the_main_job_matches_the_readme"


def main_job_tag():
    """The fields of the README's figure tag that names this test as its check."""
    for body in re.findall(r"<!--\s*figure:(.*?)-->", README.read_text(), re.S):
        fields = dict(part.split("=", 1) for part in shlex.split(body) if "=" in part)
        if fields.get("check") == CHECK:
            return fields
    raise AssertionError(f"README.md has no figure tag with check={CHECK}")


def stated_accuracy():
    """The validation accuracy the README states for the main job, as a fraction."""
    [percent] = re.findall(r"reaches (\d+(?:\.\d+)?) % validation accuracy", README.read_text())
    return float(percent) / 100


def readme_done_line():
    text = README.read_text()
    return re.search(r"^```\n(mnframe: done: .*?)\n```", text, re.M | re.S).group(1)


def done_fields(line):
    """The shape of a done line: its words with numbers and paths taken out."""
    line = re.sub(r"(?<!\S)(?:/|runs/)[^\s;,]*/([^/\s;,]+)", r"<dir>/\1", line)  # a file's directory -> <dir>
    return re.sub(r"\d+(?:\.\d+)?", "N", line)


def test_the_readme_states_the_main_job_and_its_command():
    tag = main_job_tag()
    text = README.read_text()
    assert "bash scripts/setup.sh && .venv/bin/mpiexec -n 2 .venv/bin/python -m mnframe" in text
    assert float(tag["value"]) > 0 and float(tag["load"]) > 0 and tag["tolerance"].startswith("x")
    assert f"about {tag['value']} s" in text
    assert "model.safetensors" in readme_done_line()


@pytest.mark.slow
def test_the_main_job_matches_the_readme(tmp_path):
    tag = main_job_tag()
    stated, factor = float(tag["value"]), float(tag["tolerance"].split()[0][1:])
    load_before = os.getloadavg()[0]
    result = run_mpi(
        ["-m", "mnframe"], n=2, timeout=max(300, 4 * stated), cwd=str(tmp_path), env={"OMP_NUM_THREADS": None}
    )
    assert result.returncode == 0 and not result.timed_out, result.output[-3000:]
    [run_dir] = list((tmp_path / "runs" / "mnist").iterdir())
    log = json.loads((run_dir / "log").read_text())
    assert log[-1]["epoch"] == 20 and log[-1]["main/loss"] < log[0]["main/loss"]
    assert abs(log[-1]["validation/main/accuracy"] - stated_accuracy()) <= 0.015, log[-1]
    [done] = [line for line in result.output.splitlines() if line.startswith("mnframe: done: ")]
    assert done_fields(done) == done_fields(readme_done_line()), (done, readme_done_line())
    # the machine is shared: a busier machine than at the measurement stretches the time as much
    busier = max(1.0, max(load_before, os.getloadavg()[0]) / float(tag["load"]))
    assert stated / factor <= result.elapsed <= stated * factor * busier, (
        f"the main job took {result.elapsed:.1f} s at load average {load_before:.1f}; README.md says about "
        f"{stated:g} s at load {tag['load']} (tolerance x{factor:g}, scaled by the load): measure it again "
        "and update the figure"
    )
