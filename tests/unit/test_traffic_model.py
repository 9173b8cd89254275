"""``communicators/traffic_model.py`` and ``training/step_model.py`` (issue 39 item 4): each algorithm's
bytes on a node's link, bytes per rank and messages, against formulas derived by hand, and the
step time's parts (compute stretched by shared cores, the averaging, what overlap hides)."""

import math

import pytest

from mnframe.communicators import traffic_model as tm
from mnframe.communicators.wire_allreduce import CHUNK_BYTES, MIN_CHUNK
from mnframe.training import step_model as sm

MB = 4_000_000.0  # bytes of float32 gradients (1M elements)


@pytest.mark.parametrize("nodes,ppn", [(2, 1), (3, 1), (4, 1), (8, 1), (2, 2), (3, 4), (4, 2)])
@pytest.mark.parametrize("half", [False, True])
def test_pipelined_algorithms_put_2_n_minus_1_over_n_of_the_wire_bytes_on_each_link(nodes, ppn, half):
    wire = MB / 2 if half else MB
    bound = 2 * (nodes - 1) / nodes * wire  # a ring's bytes per node, each way
    two_d = tm.traffic("two_dimensional", MB, nodes, ppn, half)
    hier = tm.traffic("hierarchical", MB, nodes, ppn, half)
    assert two_d.link_bytes == pytest.approx(bound)
    assert hier.link_bytes == pytest.approx(bound)
    # two_dimensional spreads it over the node's ppn ranks; hierarchical's leader sends it all
    assert two_d.rank_bytes == pytest.approx(2 * bound / ppn)
    assert hier.rank_bytes == pytest.approx(2 * bound)
    # messages: per chunk a reduce-scatter and an allgather message to each of the n-1 peers
    itemsize = 2 if half else 4
    per_chunk = max(MIN_CHUNK, CHUNK_BYTES * nodes // itemsize)
    k = math.ceil(wire / ppn / itemsize / per_chunk)
    assert two_d.messages == 2 * k * (nodes - 1)
    assert two_d.rounds == 2 * k


@pytest.mark.parametrize("nodes,ppn", [(2, 1), (4, 1), (8, 1), (2, 2), (3, 4)])
def test_mpi_allreduce_algorithms_count_only_the_peers_on_other_nodes(nodes, ppn):
    p = nodes * ppn
    per_rank = 2 * (p - 1) / p * MB
    off = (p - ppn) / (p - 1)
    flat = tm.traffic("flat", MB, nodes, ppn)
    assert flat.link_bytes == pytest.approx(ppn * per_rank * off)
    assert flat.rank_bytes == pytest.approx(2 * per_rank * off)
    assert flat.rounds == 2 * math.ceil(math.log2(p))
    naive = tm.traffic("naive", MB, nodes, ppn, arrays=6)  # one allreduce per parameter: 6 x the rounds
    assert naive.link_bytes == pytest.approx(flat.link_bytes)
    assert naive.rounds == 6 * flat.rounds
    if ppn == 1:  # one rank per node: every algorithm moves what a ring moves
        assert flat.link_bytes == pytest.approx(2 * (nodes - 1) / nodes * MB)


def test_one_node_puts_nothing_on_the_link_and_an_unknown_algorithm_is_named():
    for name in tm.ALGORITHMS:
        assert tm.traffic(name, MB, 1, 4).link_bytes == 0
    assert tm.averaging_ms("two_dimensional", MB, 1, 1, 1e9, 50).total_ms == 0
    with pytest.raises(ValueError, match="unknown algorithm 'ring'"):
        tm.traffic("ring", MB, 2, 1)


def test_averaging_is_the_slower_of_wire_and_cpu():
    share = tm.constant("payload_share")
    a = tm.averaging_ms("two_dimensional", MB, 2, 1, 1e9, 0.0)
    assert a.wire_ms == pytest.approx(MB * 8 / (1e9 * share) * 1e3)  # 2 (n-1)/n = 1 for two nodes
    cpu = (2 * MB * tm.constant("tcp_ns_per_byte") + MB * tm.constant("local_ns_per_byte")) / 1e6
    assert a.cpu_ms == pytest.approx(cpu)
    assert a.total_ms == max(a.wire_ms, a.cpu_ms) == a.wire_ms  # 1 Gbit/s: the wire
    fast = tm.averaging_ms("two_dimensional", MB, 2, 1, 1e12, 0.0)
    assert fast.total_ms == fast.cpu_ms  # a link far faster than the CPU: the CPU
    stretched = tm.averaging_ms("two_dimensional", MB, 2, 1, 1e12, 0.0, cpu_share=4)
    assert stretched.cpu_ms == pytest.approx(4 * fast.cpu_ms)
    half = tm.averaging_ms("two_dimensional", MB, 2, 1, 1e9, 0.0, half=True)
    assert half.wire_ms == pytest.approx(a.wire_ms / 2)
    late = tm.averaging_ms("two_dimensional", MB, 2, 1, 1e9, 100.0)
    assert late.wire_ms - a.wire_ms == pytest.approx(late.traffic.rounds * 0.1)


def test_every_constant_says_where_it_was_measured():
    for name, (value, where) in tm.CALIBRATION.items():
        assert value > 0 and len(where) > 10, name


def test_step_is_compute_times_share_plus_averaging_less_what_overlap_hides():
    assert sm.cpu_share(8, 2) == 4 and sm.cpu_share(1, 2) == 1
    avg = tm.averaging_ms("two_dimensional", MB, 2, 1, 1e9, 0.0, cpu_share=2.0)
    base = sm.predict_step(10.0 * sm.cpu_share(4, 2), avg)
    assert base.compute_ms == 20.0 and base.hidden_ms == 0
    assert base.step_ms == pytest.approx(20.0 + avg.total_ms)
    over = sm.predict_step(20.0, avg, overlap=True)
    assert over.hidden_ms == 0  # no spare core: the overlap's spinning wait takes backward's core
    spare = sm.predict_step(10.0, tm.averaging_ms("two_dimensional", MB, 2, 1, 1e9, 0.0), overlap=True, spare_core=True)
    assert spare.hidden_ms == pytest.approx(min(spare.averaging.total_ms, sm.BACKWARD_SHARE * 10.0))
    assert spare.examples_per_s(100) == pytest.approx(100 / spare.step_ms * 1e3)


def test_on_one_machine_the_averaging_cpu_is_every_node_s_bytes_and_every_rank_s_sums_over_its_cores():
    # the simulated cluster: each byte between nodes costs the machine moved_ns_per_byte (both
    # ends' TCP work and the forwarding), every rank does its local sums, all on the same cores
    t = tm.traffic("two_dimensional", MB, 8, 1)
    a = tm.averaging_ms("two_dimensional", MB, 8, 1, 1e9, 0.0, cpu_share=99.0, machine_cores=2)
    work_ns = 8 * t.link_bytes * tm.constant("moved_ns_per_byte") + 8 * MB * tm.constant("local_ns_per_byte")
    assert a.cpu_ms == pytest.approx(work_ns / 1e6 / 2)  # cpu_share is not used
    assert a.total_ms == max(a.wire_ms, a.cpu_ms)
    # twice the cores: half the CPU time; the wire is the link's, unchanged
    b = tm.averaging_ms("two_dimensional", MB, 8, 1, 1e9, 0.0, machine_cores=4)
    assert b.cpu_ms == pytest.approx(a.cpu_ms / 2) and b.wire_ms == a.wire_ms
    # float16: half the bytes moved, the conversions added for every rank
    h = tm.averaging_ms("two_dimensional", MB, 8, 1, 1e9, 0.0, half=True, machine_cores=2)
    local = tm.constant("local_ns_per_byte") + tm.constant("half_ns_per_byte")
    assert h.cpu_ms == pytest.approx((8 * t.link_bytes / 2 * tm.constant("moved_ns_per_byte") + 8 * MB * local) / 2e6)
    # through predict_step, as --predict shared=true adds it
    step = sm.predict_step(10.0 * sm.cpu_share(8, 2), a)
    assert step.step_ms == pytest.approx(40.0 + a.total_ms)
