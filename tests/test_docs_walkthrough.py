"""docs/your_own_recipe.md as a user follows it: its files are written into a fresh
project directory, its `python -m mnframe` commands run there exactly as written
(`mpiexec -n N` under an outer timeout), the `--check` outputs it shows are what the
commands print, and the recipes train (falling loss, validation accuracy in the log; the
pipeline with the loss on its last rank as well as the one with the loss on rank 0)."""

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from mnframe.testing import run_mpi

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "your_own_recipe.md"
BLOCK = re.compile(r"^```(\w*)\n(.*?)^```$", re.S | re.M)


def blocks():
    """(language, text) of every fenced block of the walkthrough, in order."""
    return [(m.group(1), m.group(2)) for m in BLOCK.finditer(DOC.read_text())]


def run(command, cwd):
    """One command line of the doc: (exit status, stdout + stderr)."""
    args = shlex.split(command)
    if args[0] == "mpiexec":
        n = int(args[args.index("-n") + 1])
        rest = args[args.index("python") + 1 :]
        r = run_mpi(rest, n=n, timeout=240, cwd=str(cwd))
        assert not r.timed_out, f"{command} timed out\n{r.output[-3000:]}"
        return r.returncode, r.output
    assert args[0] == "python", command
    r = subprocess.run([sys.executable, *args[1:]], cwd=cwd, capture_output=True, text=True, timeout=120)
    return r.returncode, r.stdout + r.stderr


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    root = tmp_path_factory.mktemp("walkthrough") / "my_project"
    root.mkdir()
    for _, text in blocks():
        first = text.splitlines()[0] if text else ""
        if first.startswith("# file: "):
            path = root / first[len("# file: ") :].strip()
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    return root


def test_the_walkthrough_runs_as_written(project):
    found = blocks()
    commands = 0
    for i, (lang, text) in enumerate(found):
        if lang != "bash":
            continue
        for line in text.splitlines():
            if "-m mnframe" not in line:
                continue
            status, output = run(line.split("  #")[0].strip(), project)
            commands += 1
            assert status == 0, f"{line}\n{output[-3000:]}"
            shown = found[i + 1] if i + 1 < len(found) else None
            if "--check" in line and shown and shown[0] == "":  # the output the doc shows
                assert output.strip() == shown[1].strip(), output
    assert commands >= 5
    assert (project / "pipeline.png").stat().st_size > 1000
    for name, runs in (("convnet", 2), ("convnet_pipeline", 1), ("convnet_pipeline_last", 1)):
        dirs = sorted((project / "runs" / name).iterdir())
        assert len(dirs) == runs
        log = json.loads((dirs[0] / "log").read_text())
        assert [e["epoch"] for e in log] == [1, 2, 3, 4, 5]
        assert log[-1]["main/loss"] < 0.6 * log[0]["main/loss"]
        assert log[-1]["validation/main/accuracy"] > 0.8
    # the loss on the last rank trains like the loss on rank 0 (docs: step 4), its values in rank 0's log
    last, first = (
        json.loads(next((project / "runs" / n).iterdir()).joinpath("log").read_text())
        for n in ("convnet_pipeline_last", "convnet_pipeline")
    )
    assert abs(last[-1]["validation/main/accuracy"] - first[-1]["validation/main/accuracy"]) < 0.05


def test_the_doc_states_the_data_shape_the_recipes_get():
    from mnframe.recipes.mnist.data import get_datasets

    train, test = get_datasets("digits")
    x, t = train[0]
    assert x.shape == (64,) and str(x.dtype) == "float32" and 0 <= x.min() and x.max() <= 1
    assert str(t.dtype) == "int32" and (len(train), len(test)) == (1500, 297)
    text = DOC.read_text()
    assert "64** pixels in **[0, 1]**" in text and "(1, 8, 8)" in text and "1500 training and 297 test" in text


def test_the_runner_doc_model_parallel_recipe_works_as_written(tmp_path):
    readme = (REPO / "docs" / "runner.md").read_text()
    [snippet] = [text for lang, text in BLOCK.findall(readme) if lang == "yaml" and "name: my_mp" in text]
    (tmp_path / "my_recipes").mkdir()
    (tmp_path / "my_recipes" / "my_mp.yaml").write_text(snippet)
    command = "mpiexec -n 2 python -m mnframe --config-dir my_recipes recipe=my_mp"
    assert command in readme
    status, output = run(
        command + " extensions=minimal trainer.stop=[30,iteration] "
        "extensions.log_report.interval=10 extensions.log_report.unit=iteration",
        tmp_path,
    )
    assert status == 0, output[-3000:]
    [run_dir] = list((tmp_path / "runs" / "my_mp").iterdir())
    log = json.loads((run_dir / "log").read_text())
    assert [e["iteration"] for e in log] == [10, 20, 30]
    assert log[-1]["main/loss"] < log[0]["main/loss"]
