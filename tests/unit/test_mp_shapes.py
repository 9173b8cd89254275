"""The dry forward pass of a model-parallel group before launch (issue 41, item 3): one process,
no MPI, one batch of the digits through every stage in schedule order."""

import textwrap
from types import SimpleNamespace

import pytest

from mnframe.builder.shapes import shape_issues
from mnframe.config.schema import DatasetConfig, ModelParallelTopology

MODELS = textwrap.dedent(
    """
    import chainer, chainer.functions as F, chainer.links as L

    class Dense(chainer.Chain):
        def __init__(self, n_in=None, n_out=16):
            super().__init__()
            with self.init_scope():
                self.l = L.Linear(n_in, n_out)
        def forward(self, x):
            return F.relu(self.l(x))

    class Reader(Dense):
        def forward(self, x, t=None):
            return super().forward(x)

    class Talker(chainer.Chain):
        def __init__(self, comm):
            super().__init__()
        def forward(self, x):
            return x
    """
)


@pytest.fixture(autouse=True)
def models(tmp_path, monkeypatch):
    (tmp_path / "dry_models.py").write_text(MODELS)
    monkeypatch.syspath_prepend(str(tmp_path))
    return "dry_models"


def _cfg(*ranks):
    """Each rank: (dataset, classifier, [(target, kwargs, rank_in, rank_out), ...])."""
    plans = [
        {
            "dataset": d,
            "classifier": c,
            "stages": [
                {"module": {"_target_": f"dry_models.{t}", **kw}, "rank_in": i, "rank_out": o} for t, kw, i, o in stages
            ],
        }
        for d, c, stages in ranks
    ]
    topo = ModelParallelTopology.model_validate({"kind": "model_parallel", "ranks": plans})
    data = DatasetConfig.model_validate({"source": {"_target_": "mnframe.recipes.mnist.data.get_datasets"}})
    return SimpleNamespace(topology=topo, dataset=data)


def test_matching_pipeline_runs_through():
    cfg = _cfg(
        ("input", False, [("Reader", {"n_out": 128}, None, 1)]),
        ("empty", False, [("Dense", {"n_out": 32}, 0, 2)]),
        ("input", True, [("Dense", {"n_out": 10}, 1, None)]),
    )
    issues, note = shape_issues(cfg)
    assert issues == [] and note.startswith("shapes OK: a batch of (float32 (2, 64), int32 (2,))")


def test_mismatch_names_sender_and_receiver():
    cfg = _cfg(
        ("input", False, [("Reader", {"n_out": 128}, None, 1)]),
        ("empty", False, [("Dense", {"n_in": 100, "n_out": 32}, 0, 2)]),
        ("input", True, [("Dense", {"n_out": 10}, 1, None)]),
    )
    [issue] = shape_issues(cfg)[0]
    assert issue.path == "topology.ranks.1.stages.0.module"
    assert "rank 1 stage 0 (Dense) cannot take what rank 0 stage 0 (Reader) sends (float32 (2, 128))" in issue.message
    assert "128 != 100" in issue.message and "\n" not in issue.render()


def test_output_that_does_not_fit_the_loss():
    # 3 scores for labels up to 9: the output stage does not fit the loss
    cfg = _cfg(
        ("input", True, [("Dense", {"n_out": 16}, None, 1), ("Dense", {"n_out": 3}, 1, None)]),
        ("empty", False, [("Dense", {"n_out": 16}, 0, 0)]),
    )
    [issue] = shape_issues(cfg)[0]
    assert issue.path == "topology.ranks.0.stages.1.module" and "does not fit the loss" in issue.message


def test_first_stage_getting_x_and_t_but_taking_x():
    cfg = _cfg(
        ("input", False, [("Dense", {"n_out": 16}, None, 1)]),
        ("input", True, [("Dense", {"n_out": 10}, 0, None)]),
    )
    [issue] = shape_issues(cfg)[0]
    assert issue.path == "topology.ranks.0.stages.0.module"
    assert "gets the whole batch (x, t)" in issue.message and "takes 1 input(s)" in issue.message
    assert "def forward(self, x, t=None)" in issue.render()


def test_stages_that_communicate_themselves_are_left_out():
    cfg = _cfg(("input", True, [("Talker", {}, None, None)]))
    assert shape_issues(cfg) == (
        [],
        "shapes not checked: rank 0 stage 0 (Talker) communicates itself (it takes a communicator)",
    )
