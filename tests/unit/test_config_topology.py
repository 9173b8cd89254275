"""Static checks of model-parallel rank graphs (no MPI)."""

import pytest

from mnframe.config.schema import ModelParallelTopology
from mnframe.config.topology import check_graph, describe, rank_schedule, render_png, replicas

T = "mnframe.recipes.mnist_model_parallel.model.MLP1Middle"


def _stage(rank_in, rank_out):
    return {"module": {"_target_": T, "n_units": 4}, "rank_in": rank_in, "rank_out": rank_out}


def _topo(*ranks):
    plans = []
    for i, stages in enumerate(ranks):
        plans.append(
            {"dataset": "input" if i == 0 else "empty", "classifier": i == 0, "stages": [_stage(*s) for s in stages]}
        )
    return ModelParallelTopology.model_validate({"kind": "model_parallel", "ranks": plans})


def test_two_rank_mlp_is_ok_and_ordered():
    topo = _topo([(None, 1), (1, None)], [(0, 0)])
    report = check_graph(topo)
    assert report.ok
    assert [(s, d, op.phase) for s, d, op in report.steps] == [
        (0, 1, "forward"),
        (1, 0, "forward"),
        (0, 1, "backward"),
        (1, 0, "backward"),
    ]


def test_three_rank_pipeline_is_ok():
    topo = _topo([(None, 1), (2, None)], [(0, 2)], [(1, 0)])
    assert check_graph(topo).ok


def test_fan_out_and_in_with_lists():
    topo = _topo([(None, [1, 2]), ([1, 2], None)], [(0, 0)], [(0, 0)])
    assert check_graph(topo).ok


def test_crossed_order_deadlocks():
    # rank 0 waits for rank 2 first while rank 2 waits for rank 1, which waits for rank 0's
    # second send: a cycle of blocking receives.
    topo = _topo([(None, 1), (2, None)], [(0, 2)], [(1, 0)])
    ok = check_graph(topo)
    assert ok.ok
    bad = _topo([(2, 1), (None, None)], [(0, 2)], [(1, 0)])
    report = check_graph(bad)
    assert not report.ok
    assert "deadlocks" in report.issues[0].message


def test_send_without_receive():
    topo = _topo([(None, [1, 1]), (None, None)], [(0, None)])
    report = check_graph(topo)
    assert any("no matching receive" in i.message for i in report.issues)
    assert report.issues[0].path == "topology.ranks.0.stages.0.rank_out"


def test_receive_without_send():
    topo = _topo([(None, None)], [(0, None)])
    report = check_graph(topo)
    assert any("never sends" in i.message for i in report.issues)
    assert report.issues[0].path.startswith("topology.ranks.1.stages.0")


def test_peer_out_of_range_and_self():
    report = check_graph(_topo([(None, 5)], [(0, 1)]))
    paths = [i.path for i in report.issues]
    assert "topology.ranks.0.stages.0.rank_out" in paths
    assert "topology.ranks.1.stages.0.rank_out" in paths


def test_empty_rank_must_receive_first():
    report = check_graph(_topo([(None, 1), (1, None)], [(None, None), (0, 0)]))
    assert [i.path for i in report.issues] == ["topology.ranks.1.stages.0.rank_in"]
    assert "empty dataset" in report.issues[0].message
    # an unanswered send is the first broken rule; its fault is the empty rank's stage reading nothing
    report = check_graph(_topo([(None, 1), (1, None)], [(None, 0)]))
    assert [i.path for i in report.issues] == ["topology.ranks.1.stages.0.rank_in"]
    assert "rank 0 stage 0 sends to rank 1, and rank 1 stage 0 takes no input" in report.issues[0].message


def test_schedule_backward_is_reversed():
    topo = _topo([(None, 1), (1, None)], [(0, 0)])
    ops = rank_schedule(topo.ranks[0])
    assert [(o.kind, o.phase) for o in ops] == [
        ("send", "forward"),
        ("recv", "forward"),
        ("send", "backward"),
        ("recv", "backward"),
    ]


def test_mapping_form_of_ranks_is_accepted():
    plan = {"stages": [_stage(None, None)]}
    topo = ModelParallelTopology.model_validate({"ranks": {0: plan}})
    assert topo.group_size == 1
    with pytest.raises(ValueError):
        ModelParallelTopology.model_validate({"ranks": {0: plan, 2: plan}})


def test_describe_and_picture(tmp_path):
    topo = _topo([(None, 1), (1, None)], [(0, 0)])
    text = describe(topo, 4)
    assert "replica 1: world ranks [2, 3]" in text and "graph OK" in text
    assert replicas(topo, 4) == [[0, 1], [2, 3]]
    assert render_png(topo, str(tmp_path / "graph.png"))
    assert (tmp_path / "graph.png").stat().st_size > 1000


# -- hand-offs to the own rank (ChainerMN's branching and twisting models) ---------------------


def test_branching_through_the_own_rank_is_ok():
    parent = [(None, [0, 1, 2]), (0, 0), ([0, 1, 2], None)]
    report = check_graph(_topo(parent, [(0, 0)], [(0, 0)]))
    assert report.ok, report.issues
    assert all(op.peer != 0 for op in report.schedule[0])  # hand-offs are no blocking operations
    assert [(s, d) for s, d, op in report.steps if op.phase == "forward"] == [(0, 1), (0, 2), (1, 0), (2, 0)]


def test_twisting_with_two_hand_offs_is_ok():
    middle = [(0, 1), (None, 0), (None, 2), (2, 1), ([1, 1], None)]
    assert check_graph(_topo([(None, 1), (1, None)], middle, [(1, None), (None, 1)])).ok


def test_hand_off_received_before_it_was_sent():
    report = check_graph(_topo([(None, 1), ([1, 0], None)], [(0, 0)]))
    assert [i.path for i in report.issues] == ["topology.ranks.0.stages.1.rank_in"]
    assert "receives from its own rank 0 1 time(s) but earlier stages sent to it only 0" in report.issues[0].message


def test_hand_off_never_received():
    report = check_graph(_topo([(None, [1, 0]), (1, None)], [(0, 0)]))
    assert [i.path for i in report.issues] == ["topology.ranks.0.stages.0.rank_out"]
    assert "sends to its own rank 0 but no later stage receives it" in report.issues[0].message


def test_deadlock_between_hand_offs_is_still_found():
    # each rank first waits for the other's value, then hands it to itself and sends
    report = check_graph(_topo([(1, 0), (0, 1), (1, None)], [(0, 1), (1, 0), (None, 0)]))
    assert not report.ok and "deadlocks in forward" in report.issues[0].message
