"""Where data, labels and the loss are, checked with the rank graph (issue 41), and which rule
is reported first with which stage at fault (no MPI)."""

import pytest

from mnframe.config.data_flow import data_lines
from mnframe.config.schema import DatasetConfig, ModelParallelTopology
from mnframe.config.topology import check_graph, describe, figure

T = "mnframe.recipes.mnist_model_parallel.model.MLP1Middle"


def _stage(rank_in, rank_out):
    return {"module": {"_target_": T, "n_units": 4}, "rank_in": rank_in, "rank_out": rank_out}


def _topo(*ranks):
    """Each rank: (dataset, classifier, [(rank_in, rank_out), ...])."""
    plans = [{"dataset": d, "classifier": c, "stages": [_stage(*s) for s in stages]} for d, c, stages in ranks]
    return ModelParallelTopology.model_validate({"kind": "model_parallel", "ranks": plans})


def _data(strategy="scatter"):
    return DatasetConfig.model_validate({"source": {"_target_": "x.y"}, "strategy": strategy})


# the 3-stage pipeline of the issue: rank 0 reads, rank 1 hidden, rank 2 the output stage and the loss
LAST = [("input", False, [(None, 1)]), ("empty", False, [(0, 2)]), ("input", True, [(1, None)])]
FIRST = [("input", True, [(None, 1), (2, None)]), ("empty", False, [(0, 2)]), ("empty", False, [(1, 0)])]


def test_loss_on_the_last_rank_with_its_own_batches_is_refused():
    report = check_graph(_topo(*LAST), _data("scatter"), 3)
    [issue] = report.issues
    assert issue.path == "dataset.strategy"
    assert "ranks 0 and 2" in issue.message and "rank 2's labels" in issue.message
    assert "multi_node_iterator" in issue.render()
    assert "\n" not in issue.render()


@pytest.mark.parametrize("strategy", ["multi_node_iterator", "synchronized"])
def test_loss_on_the_last_rank_in_step_is_accepted(strategy):
    assert check_graph(_topo(*LAST), _data(strategy), 3).ok


def test_loss_on_rank_0_with_one_reader_is_accepted_under_every_strategy():
    for strategy in ("scatter", "shard", "multi_node_iterator", "synchronized", "replicate"):
        assert check_graph(_topo(*FIRST), _data(strategy), 3).ok, strategy


def test_loss_on_a_rank_without_labels_is_refused():
    ranks = LAST[:2] + [("empty", True, [(1, None)])]
    [issue] = check_graph(_topo(*ranks), _data("multi_node_iterator"), 3).issues
    assert issue.path == "topology.ranks.2.dataset"
    assert "reads no labels" in issue.message


def test_multi_node_iterator_needs_rank_0_to_read():
    ranks = [("empty", False, [(1, 2)]), ("input", False, [(None, 0)]), ("input", True, [(0, None)])]
    [issue] = check_graph(_topo(*ranks), _data("multi_node_iterator"), 3).issues
    assert issue.path == "topology.ranks.0.dataset"


def test_replicate_is_refused_with_several_replicas_only():
    assert check_graph(_topo(*FIRST), _data("replicate"), 3).ok
    [issue] = check_graph(_topo(*FIRST), _data("replicate"), 6).issues
    assert issue.path == "dataset.strategy" and "2 replicas" in issue.message


def test_check_says_who_reads_where_the_loss_is_and_what_first_stages_take():
    lines = data_lines(_topo(*LAST), _data("multi_node_iterator"), 6)
    assert lines[0].startswith("data (dataset.strategy=multi_node_iterator): ranks 0 and 2 read batches")
    assert "same batch in the same order" in lines[0] and lines[0].endswith("loss on rank 2")
    assert "  rank 0 stage 0 takes the whole batch (x, t)" in lines
    assert "  2 replicas: each gets 1/2 of every epoch" in lines
    lines = data_lines(_topo(*FIRST), _data(), 3)
    assert "  rank 0 stage 0 takes x (the loss keeps the labels t)" in lines


# -- the first broken rule, pointing at the stage at fault (item 4) ---------------------------


def test_unanswered_send_is_reported_before_the_loss_rule():
    # rank 2 (the loss) also sends to rank 0, which never receives: the unanswered send is the fault
    ranks = LAST[:2] + [("input", True, [(1, 0)])]
    [issue] = check_graph(_topo(*ranks), _data("multi_node_iterator"), 3).issues
    assert issue.path == "topology.ranks.2.stages.0.rank_out"
    assert "no matching receive" in issue.message


def test_cycle_is_named_before_the_loss_rule():
    # every rank first waits for another: 0 <- 2 <- 1 <- 0; rank 2's loss stage also sends on
    ranks = [("input", False, [(2, 1)]), ("empty", False, [(0, 2)]), ("input", True, [(1, 0)])]
    [issue] = check_graph(_topo(*ranks), _data("multi_node_iterator"), 3).issues
    assert "cycle" in issue.message and "rank 0 stage 0 waits for rank 2" in issue.message
    assert issue.path == "topology.ranks.0.stages.0.rank_in"  # the reader's stage should read the input


def test_wrong_rank_in_on_stage_0_points_at_stage_0():
    ranks = [("input", True, [(2, 1), (2, None)]), ("empty", False, [(0, 2)]), ("empty", False, [(1, 0)])]
    [issue] = check_graph(_topo(*ranks), _data(), 3).issues
    assert issue.path == "topology.ranks.0.stages.0.rank_in"
    assert "rank 0 stage 0 receives from rank 2" in issue.message


# -- --graph draws every replica (item 6) -----------------------------------------------------


def test_picture_has_one_panel_per_replica():
    import matplotlib.pyplot as plt

    topo = _topo(*FIRST)
    fig = figure(topo, 6)
    titles = [ax.get_title() for ax in fig.axes]
    assert titles == ["replica 0: world ranks 0-2", "replica 1: world ranks 3-5"]
    texts = [t.get_text() for t in fig.axes[1].texts]
    assert any(t.startswith("rank 2 (world 5)") for t in texts)
    plt.close(fig)
    assert "replica 1: world ranks [3, 4, 5]" in describe(topo, 6, dataset=_data())
