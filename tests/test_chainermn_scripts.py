"""ChainerMN-style example scripts run unchanged through ``python -m mnframe.compat`` (issue 16, proof).

Each script in examples/chainermn_scripts/ is a plain argparse script that does
``import chainermn`` and never names mnframe. Each runs under ``mpiexec`` with
its rank count (oversubscribed on small machines) and a timeout, and must have
trained: Chainer's LogReport shows every epoch and a falling loss, and where
replicas must stay identical the ranks print equal weight checksums.
"""

import json
import re
from pathlib import Path

import pytest

from mnframe.testing import run_mpi

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = REPO / "examples" / "chainermn_scripts"
TIMEOUT = 150


def _run(script, n, tmp_path, *args):
    out = tmp_path / "result"
    result = run_mpi(
        ["-m", "mnframe.compat", str(SCRIPTS / script), "--out", str(out), *args],
        n=n,
        timeout=TIMEOUT,
        cwd=str(tmp_path),
    )
    assert not result.timed_out, f"{script} on {n} ranks timed out\n{result.output[-6000:]}"
    assert result.returncode == 0, f"{script} on {n} ranks exited {result.returncode}\n{result.output[-8000:]}"
    return result, json.loads((out / "log").read_text())


def _assert_epochs_and_falling(log, epochs, key):
    assert [e["epoch"] for e in log] == list(range(1, epochs + 1)), log
    losses = [e[key] for e in log]
    assert losses[-1] < 0.8 * losses[0], f"{key} did not fall: {losses}"
    return losses


def _checksums(output, what):
    return {int(r): float(v) for r, v in re.findall(rf"rank (\d+) {what} checksum ([-0-9.e]+)", output)}


def test_scripts_never_mention_mnframe():
    scripts = sorted(SCRIPTS.glob("*.py"))
    assert len(scripts) == 6
    for path in scripts:
        text = path.read_text()
        assert "import chainermn" in text and "mnframe" not in text, path.name


@pytest.mark.parametrize("n", [1, 2, 3])
def test_mnist_data_parallel(tmp_path, n):
    _, log = _run("train_mnist.py", n, tmp_path, "--epoch", "3")
    _assert_epochs_and_falling(log, 3, "main/loss")
    _assert_epochs_and_falling(log, 3, "validation/main/loss")
    assert log[-1]["validation/main/accuracy"] > 0.9
    # 1000 examples scattered over n ranks, batches of 50 per rank
    assert log[-1]["iteration"] == 3 * -(-(-(-1000 // n)) // 50)  # noqa: B002 - ceil(ceil(1000 / n) / 50)


def test_mnist_model_parallel(tmp_path):
    _, log = _run("train_mnist_model_parallel.py", 2, tmp_path, "--epoch", "3")
    _assert_epochs_and_falling(log, 3, "main/loss")
    assert log[-1]["iteration"] == 3 * 1000 // 50 and log[-1]["validation/main/accuracy"] > 0.9


def test_mnist_dual_parallel(tmp_path):
    _, log = _run("train_mnist_dual_parallel.py", 4, tmp_path, "--epoch", "3")
    _assert_epochs_and_falling(log, 3, "main/loss")
    # two model-parallel replicas: each iterates half of the 1000 examples per epoch
    assert log[-1]["iteration"] == 3 * 500 // 50 and log[-1]["validation/main/accuracy"] > 0.9


def test_seq2seq_model_parallel(tmp_path):
    _, log = _run("seq2seq.py", 2, tmp_path, "--epoch", "4")
    losses = [e["main/loss"] for e in log]
    assert [e["epoch"] for e in log] == [1, 2, 3, 4] and log[-1]["iteration"] == 4 * 480 // 32
    assert all(b < a for a, b in zip(losses, losses[1:])), f"seq2seq loss did not fall every epoch: {losses}"


def test_dcgan_data_parallel(tmp_path):
    result, log = _run("dcgan.py", 2, tmp_path, "--epoch", "3")
    assert [e["epoch"] for e in log] == [1, 2, 3] and log[-1]["iteration"] == 3 * 320 // 32
    dis = [e["dis/loss"] for e in log]
    assert dis[-1] < dis[0], f"the discriminator did not learn: {dis}"
    for model in ("gen", "dis"):
        initial, final = _checksums(result.output, f"initial {model}"), _checksums(result.output, f"final {model}")
        assert sorted(final) == [0, 1] and final[0] == final[1], f"{model} replicas differ: {final}"
        assert initial[0] != initial[1], "each rank should start from its own random weights"


@pytest.mark.parametrize("n", [2, 3])
def test_parallel_convolution(tmp_path, n):
    result, log = _run("parallel_convolution.py", n, tmp_path, "--epoch", "3")
    _assert_epochs_and_falling(log, 3, "main/loss")
    assert log[-1]["validation/main/accuracy"] > 0.9
    heads = _checksums(result.output, "head")
    assert sorted(heads) == list(range(n)) and len(set(heads.values())) == 1, heads
