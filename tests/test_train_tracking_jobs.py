"""``logger=mlflow`` without the mlflow package, as a user starts it on 2 ranks: an
environment problem (exit 3), one line naming the package and the extra, no traceback."""

from pathlib import Path

from mnframe.testing import run_mpi

REPO = Path(__file__).resolve().parent.parent


def test_logger_mlflow_without_mlflow_exits_3_naming_the_package(tmp_path):
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text("import sys\nsys.modules['mlflow'] = None  # as if not installed\n")
    result = run_mpi(
        ["-m", "mnframe", "logger=mlflow", f"hydra.run.dir={tmp_path / 'run'}"],
        n=2,
        timeout=180,
        cwd=str(tmp_path),
        env={"PYTHONPATH": f"{hide}:{REPO}"},
    )
    assert not result.timed_out, result.output[-4000:]
    assert result.returncode == 3, result.output[-4000:]
    assert "Traceback" not in result.output
    [line] = [ln for ln in result.output.splitlines() if "needs the mlflow package" in ln]
    assert line.startswith("mnframe: environment problem: extensions.mlflow")
    assert "pip install 'mnframe[mlflow]'" in line
