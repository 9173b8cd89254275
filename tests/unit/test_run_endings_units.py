"""The pieces of issue 30 that need no MPI job: which values count as a non-finite loss, the
Ctrl-C handler's first/second press, and plots published atomically."""

import math
import os
import signal
import subprocess
import sys
import textwrap

import chainer
import numpy
import pytest

from mnframe.checkpoint import divergence


def test_code_of_finds_the_first_non_finite_loss_only():
    assert divergence.code_of({"main/loss": 1.0, "main/accuracy": math.nan}) == (0, None)
    assert divergence.code_of({"main/loss": chainer.Variable(numpy.array(math.nan, dtype=numpy.float32))}) == (
        1,
        "main/loss",
    )
    assert divergence.code_of({"gen/loss": 2.0, "dis/loss": math.inf}) == (2, "dis/loss")
    assert divergence.code_of({"validation/main/0/loss": -math.inf}) == (3, "validation/main/0/loss")
    assert divergence.code_of({"main/loss": numpy.zeros(3)}) == (0, None)  # not a scalar: not judged


def test_watch_stops_a_finite_loss_that_runs_away_and_not_normal_noise():
    """Issue 38 item 7: after the warm-up, above factor x lowest AND above the first value."""
    watch = divergence.Watch(factor=1.0e4, warmup=3)
    losses = [2.3, 1.0e3, 1.0e5]  # the warm-up (3 iterations) is not judged
    assert [watch.code({"main/loss": v})[0] for v in losses] == [0, 0, 0]
    assert watch.code({"main/loss": 5.6e10, "main/accuracy": 1e30}) == (divergence.RUNAWAY, "main/loss")
    assert "main/loss = 5.6e+10, above 10000 x its lowest value 2.3" in watch.detail
    # a tiny best loss followed by ordinary noise, below the first value: normal training
    quiet = divergence.Watch(factor=1.0e4, warmup=3)
    for v in [2.3, 1.0, 1.0e-7, 1.0e-7, 0.5, 2.0, 0.1]:
        assert quiet.code({"main/loss": v}) == (0, None)
    # negative losses are not judged by the factor; NaN still is, and first
    neg = divergence.Watch(factor=10, warmup=0)
    assert [neg.code({"nll/loss": v})[0] for v in (-1.0, 100.0)] == [0, 0]
    assert neg.code({"nll/loss": math.nan}) == (1, "nll/loss")
    assert divergence.Watch(factor=None, warmup=0).code({"main/loss": 1.0})[0] == 0


def test_first_ctrl_c_requests_a_checkpoint_and_a_second_exits_130_at_once():
    """In a child process: the second press (later than SECOND_INTERRUPT_S) ends it with 130;
    a press within that time (one keypress reaching a rank twice) does not."""
    ours = signal.getsignal(signal.SIGINT)  # whatever earlier tests in this process left
    code = textwrap.dedent(
        """
        import os, signal, time
        from mnframe.runtime import preemption
        preemption.install(interrupt=True)
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)  # the same keypress, forwarded: ignored
        assert preemption.requested() and preemption._interrupt.is_set()
        print("first", flush=True)
        time.sleep(preemption.SECOND_INTERRUPT_S + 0.1)
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)
        print("not reached", flush=True)
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 130, proc.stderr
    assert proc.stdout == "first\n" and "Traceback" not in proc.stderr
    assert proc.stderr.count("Ctrl-C: all ranks will checkpoint") == 1
    assert "second Ctrl-C: exiting now" in proc.stderr
    assert signal.getsignal(signal.SIGINT) is ours  # this process untouched


def test_plot_is_published_whole_or_not_at_all(tmp_path, monkeypatch):
    from chainer.training.extensions import PlotReport

    from mnframe.extensions.plot_report import AtomicPlotReport

    if not PlotReport.available():
        pytest.skip("matplotlib is not installed")
    import matplotlib.figure

    class Trainer:  # what PlotReport reads
        out = str(tmp_path)
        is_before_training = False
        observation = {"main/loss": 1.0}

        class updater:
            epoch, iteration = 1, 1

    plot = AtomicPlotReport(["main/loss"], "iteration", trigger=(1, "iteration"), filename="loss.png")
    plot._trigger = lambda _trainer: True
    plot(Trainer)
    first = (tmp_path / "loss.png").read_bytes()
    assert first.startswith(b"\x89PNG")

    def interrupted(_self, path, **kwargs):  # half an image, then Ctrl-C
        with open(path, "wb") as f:
            f.write(b"\x89PN")
        raise KeyboardInterrupt

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", interrupted)
    with pytest.raises(KeyboardInterrupt):
        plot(Trainer)
    assert (tmp_path / "loss.png").read_bytes() == first  # the previous image, whole
    assert plot._file_name == "loss.png"
    assert os.listdir(tmp_path) == ["loss.png"]  # the half-written temporary file is gone
