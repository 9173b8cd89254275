"""Model parallelism from a user's own recipe directory (issue 41): a 3-stage pipeline MLP on
the digits. ``--check`` refuses labels that fall out of step, shape mismatches and broken graphs
in one line naming the stage at fault; the loss on the last rank trains like the loss on rank 0
and its metrics reach the log and the done line; a shape mismatch at run time is one line;
dual parallel (6 ranks, multi-node iterator) splits each epoch over the 2 replicas."""

import json
import subprocess
import sys
import textwrap

import pytest

from mnframe.testing import run_mpi

TIMEOUT = 240

MODELS = textwrap.dedent(
    '''
    import chainer, chainer.functions as F, chainer.links as L

    class Dense(chainer.Chain):
        def __init__(self, n_in=None, n_out=64, relu=True):
            super().__init__()
            self.relu = relu
            with self.init_scope():
                self.l = L.Linear(n_in, n_out)
        def forward(self, x):
            h = self.l(x)
            return F.relu(h) if self.relu else h

    class Reader(Dense):
        """The first stage on a rank that reads the batch but has no loss: it gets (x, t)."""
        def forward(self, x, t=None):
            return super().forward(x)

    class Identity(chainer.Chain):
        def forward(self, h):
            return h
    '''
)

HEAD = """# @package _global_
defaults:
  - override /model: none
  - override /optimizer: adam
  - override /topology: null
name: {name}
dataset: {{batch_size: 50}}
trainer: {{stop: [5, epoch]}}
extensions: {{progress_bar: {{enabled: false}}}}
topology:
  kind: model_parallel
  ranks:
"""
LAST = """    - dataset: input
      stages:
        - {module: {_target_: pipe_models.Reader, n_out: 128}, rank_in: null, rank_out: 1}
    - dataset: empty
      stages:
        - {module: {_target_: pipe_models.Dense, n_out: 64}, rank_in: 0, rank_out: 2}
    - dataset: input
      classifier: true
      stages:
        - {module: {_target_: pipe_models.Dense, n_out: 10, relu: false}, rank_in: 1, rank_out: null}
"""
FIRST = """    - dataset: input
      classifier: true
      stages:
        - {module: {_target_: pipe_models.Dense, n_out: 128}, rank_in: null, rank_out: 1}
        - {module: {_target_: pipe_models.Identity}, rank_in: 2, rank_out: null}
    - dataset: empty
      stages:
        - {module: {_target_: pipe_models.Dense, n_out: 64}, rank_in: 0, rank_out: 2}
    - dataset: empty
      stages:
        - {module: {_target_: pipe_models.Dense, n_out: 10, relu: false}, rank_in: 1, rank_out: 0}
"""


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    root = tmp_path_factory.mktemp("pipeline_project")
    (root / "pipe_models.py").write_text(MODELS)
    (root / "myrecipes").mkdir()
    (root / "myrecipes" / "pipe_last.yaml").write_text(HEAD.format(name="pipe_last") + LAST)
    (root / "myrecipes" / "pipe_first.yaml").write_text(HEAD.format(name="pipe_first") + FIRST)
    return root


def check(project, recipe, *overrides, world=3):
    args = ["--config-dir", "myrecipes", f"recipe={recipe}", "--check", "--world-size", str(world), *overrides]
    r = subprocess.run(
        [sys.executable, "-m", "mnframe", *args], cwd=project, capture_output=True, text=True, timeout=120
    )
    return r.returncode, r.stdout + r.stderr


def problem(output):
    """The one problem line of a refused configuration."""
    assert "Traceback" not in output, output
    lines = [line for line in output.splitlines() if line.startswith("  ")]
    assert "1 problem" in output and len(lines) == 1, output
    return lines[0].strip()


def train(project, recipe, n, *overrides, run_dir):
    args = ["-m", "mnframe", "--config-dir", "myrecipes", f"recipe={recipe}", f"hydra.run.dir={run_dir}"]
    r = run_mpi([*args, *overrides], n=n, timeout=TIMEOUT, cwd=str(project))
    assert not r.timed_out, r.output[-3000:]
    return r


def test_labels_out_of_step_are_refused_in_one_line(project):
    status, output = check(project, "pipe_last")  # the default strategy: every reader its own batches
    assert status == 2
    line = problem(output)
    assert line.startswith("dataset.strategy: ranks 0 and 2 of the model group all read batches")
    assert "rank 2's labels" in line and "multi_node_iterator" in line


def test_shape_mismatch_is_refused_by_check_naming_both_stages(project):
    status, output = check(
        project, "pipe_last", "dataset.strategy=multi_node_iterator", "+topology.ranks.1.stages.0.module.n_in=100"
    )
    assert status == 2
    line = problem(output)
    assert line.startswith(
        "topology.ranks.1.stages.0.module: rank 1 stage 0 (Dense) cannot take what "
        "rank 0 stage 0 (Reader) sends (float32 (2, 128))"
    )
    assert "128 != 100" in line


@pytest.mark.slow
def test_check_accepts_in_step_layout_and_says_where_data_and_loss_are(project, tmp_path):
    png = tmp_path / "graph.png"
    status, output = check(project, "pipe_last", "dataset.strategy=multi_node_iterator", "--graph", str(png), world=6)
    assert status == 0, output
    assert "ranks 0 and 2 read batches, the same batch in the same order" in output
    assert "loss on rank 2" in output and "rank 0 stage 0 takes the whole batch (x, t)" in output
    assert "2 replicas: each gets 1/2 of every epoch" in output
    assert "shapes OK: a batch of (float32 (2, 64), int32 (2,)) ran through every stage" in output
    assert png.stat().st_size > 1000


@pytest.mark.slow
@pytest.mark.parametrize(
    "overrides,start",
    [
        # rank 2 also sends to rank 0, which never receives: the send, not the loss rule
        (
            ["topology.ranks.2.stages.0.rank_out=0"],
            "topology.ranks.2.stages.0.rank_out: rank 2 stage 0 sends to rank 0",
        ),
        # rank 0 waits for rank 2 first: a cycle, named as one, at the reader's stage
        (
            ["topology.ranks.0.stages.0.rank_in=2", "topology.ranks.2.stages.0.rank_out=0"],
            "topology.ranks.0.stages.0.rank_in: the stage order deadlocks in forward, a cycle of receives",
        ),
        # loss on rank 0: stage 0 with a wrong rank_in points at stage 0
        (
            ["recipe=pipe_first", "topology.ranks.0.stages.0.rank_in=2"],
            "topology.ranks.0.stages.0.rank_in: rank 0 stage 0 receives from rank 2",
        ),
        # the loss on a rank that reads no labels
        (
            ["topology.ranks.2.dataset=empty"],
            "topology.ranks.2.dataset: rank 2 has the loss (classifier: true) but reads no labels",
        ),
        # a first stage that gets (x, t) but takes only x
        (
            ["topology.ranks.0.stages.0.module._target_=pipe_models.Dense"],
            "topology.ranks.0.stages.0.module: rank 0 stage 0 (Dense) reads the batch",
        ),
    ],
    ids=["unanswered-send", "cycle", "stage0-rank_in", "loss-without-labels", "x-t-to-x"],
)
def test_the_first_broken_rule_points_at_the_stage_at_fault(project, overrides, start):
    recipe = "pipe_last"
    if overrides[0].startswith("recipe="):
        recipe, overrides = overrides[0].split("=")[1], overrides[1:]
    status, output = check(project, recipe, "dataset.strategy=multi_node_iterator", *overrides)
    assert status == 2
    assert problem(output).startswith(start), output


@pytest.mark.slow
def test_loss_on_the_last_rank_trains_like_loss_on_rank_0_with_metrics(project, tmp_path):
    last = train(project, "pipe_last", 3, "dataset.strategy=multi_node_iterator", run_dir=tmp_path / "last")
    assert last.returncode == 0, last.output[-3000:]
    [done] = [line for line in last.output.splitlines() if line.startswith("mnframe: done:")]
    assert "main/loss" in done and "validation/main/accuracy" in done, done
    first = train(project, "pipe_first", 3, run_dir=tmp_path / "first")
    assert first.returncode == 0, first.output[-3000:]
    logs = {name: json.loads((tmp_path / name / "log").read_text()) for name in ("last", "first")}
    for log in logs.values():
        assert [e["iteration"] for e in log] == [30, 60, 90, 120, 150]
        assert log[-1]["main/loss"] < 0.5 * log[0]["main/loss"]
    acc = {name: log[-1]["validation/main/accuracy"] for name, log in logs.items()}
    assert acc["last"] > 0.9 and abs(acc["last"] - acc["first"]) < 0.03, acc
    assert (tmp_path / "last" / "loss.png").stat().st_size > 1000


@pytest.mark.slow
def test_shape_mismatch_at_run_time_is_one_line(project, tmp_path):
    r = train(
        project,
        "pipe_last",
        3,
        "dataset.strategy=multi_node_iterator",
        "+topology.ranks.1.stages.0.module.n_in=100",
        run_dir=tmp_path / "run",
    )
    assert r.returncode == 2, r.output[-3000:]
    assert (
        "Traceback" not in r.output
        and "rank 1 stage 0 (Dense) cannot take what rank 0 stage 0 (Reader) sends" in r.output
    )


@pytest.mark.slow
def test_dual_parallel_multi_node_iterator_splits_the_epoch(project, tmp_path):
    r = train(
        project,
        "pipe_last",
        6,
        "dataset.strategy=multi_node_iterator",
        "trainer.stop=[1,epoch]",
        run_dir=tmp_path / "dual",
    )
    assert r.returncode == 0, r.output[-3000:]
    [entry] = json.loads((tmp_path / "dual" / "log").read_text())
    assert entry["iteration"] == 1500 // 2 // 50  # 2 replicas: half the 30 iterations of 3 ranks
    assert "main/loss" in entry
