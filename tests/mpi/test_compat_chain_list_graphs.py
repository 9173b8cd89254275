"""ChainerMN's branching, twisting and crossing MultiNodeChainList graphs.

Components may hand values to their own rank (``rank_in=comm.rank,
rank_out=comm.rank``, ``rank_in=[comm.rank, comm.rank]``): an in-process queue,
no MPI message. Every rank builds every rank's links from one seed, so it can
run the whole network in one process: the sum of all ranks' losses, whose
gradients the split model must reproduce on the links each rank holds, over a
few SGD steps. Branching runs on 1 rank too (then only hand-offs to itself).
"""

import copy

import chainer
import chainer.functions as F
import chainer.links as L
import numpy as np
import pytest

import mnframe

MPI_SIZES = (1, 2, 3)
MPI_TIMEOUT = 180

D, N, STEPS = 4, 5, 3
RTOL, ATOL = 1e-5, 1e-6


@pytest.fixture(scope="module")
def comm(mpi_comm):
    return mnframe.create_communicator("naive", mpi_comm=mpi_comm)


def data(step):
    rng = np.random.RandomState(10 + step)
    return rng.randn(N, D).astype(np.float32), rng.randint(0, D, N).astype(np.int32)


class Sum(chainer.Chain):
    """ChainerMN's BranchSubB: a Linear of the sum of its inputs (in the order received)."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.f = L.Linear(D, D)

    def forward(self, *xs):
        h = xs[0]
        for x in xs[1:]:
            h = h + x
        return self.f(h)


def build(kinds_per_rank, size, seed=0):
    """``{rank: [link, ...]}`` for every rank, from one seed (the same on every rank)."""
    state = np.random.get_state()
    np.random.seed(seed)
    try:
        return {
            r: [Sum() if kind == "sum" else L.Linear(D, D) for kind in kinds_per_rank(r, size)] for r in range(size)
        }
    finally:
        np.random.set_state(state)


def chain(comm, links, wiring):
    model = mnframe.MultiNodeChainList(comm)
    for link, (rank_in, rank_out) in zip(links, wiring):
        model.add_link(link, rank_in=rank_in, rank_out=rank_out)
    return model


def train_and_compare(comm, links, wiring, has_loss, reference_losses):
    """STEPS SGD steps of the split model on this rank and of the whole network here."""
    mine = links[comm.rank]
    reference = chainer.ChainList(*[copy.deepcopy(link) for r in sorted(links) for link in links[r]])
    ref_links, k = {}, 0
    for r in sorted(links):
        ref_links[r] = [reference[k + i] for i in range(len(links[r]))]
        k += len(links[r])
    model = chain(comm, mine, wiring)
    opt = chainer.optimizers.SGD(lr=0.1).setup(model)
    ref_opt = chainer.optimizers.SGD(lr=0.1).setup(reference)
    for step in range(STEPS):
        x, t = data(step)
        reference.cleargrads()
        losses = reference_losses(ref_links, x, t)
        sum(losses.values()).backward()
        model.cleargrads()
        if has_loss:
            y = model(x)
            loss = F.softmax_cross_entropy(y, t)
            np.testing.assert_allclose(loss.array, losses[comm.rank].array, rtol=RTOL)
        else:
            loss = model(x)  # the delegate variable
        loss.backward()
        for i, (split, ref) in enumerate(zip(mine, ref_links[comm.rank])):
            for (name, p), (_, q) in zip(sorted(split.namedparams()), sorted(ref.namedparams())):
                assert p.grad is not None, f"rank {comm.rank} link {i}{name}: no gradient"
                np.testing.assert_allclose(
                    p.grad, q.grad, rtol=RTOL, atol=ATOL, err_msg=f"rank {comm.rank} step {step} link {i}{name}"
                )
        opt.update()
        ref_opt.update()


def ce(y, t):
    return F.softmax_cross_entropy(y, t)


# -- branching: a parent on rank 0 sends to its children (and to itself), sums what comes back ---

BRANCH_ORDERS = {
    "children": lambda _me, children: children,  # ChainerMN's BranchParent1
    "self_first": lambda me, children: [me] + children,  # BranchParent2
    "self_last": lambda me, children: children + [me],  # BranchParent3
    "rotated": lambda me, children: (children + [me])[1:] + (children + [me])[:1],  # BranchParent4
}


@pytest.mark.parametrize("order", sorted(BRANCH_ORDERS))
def test_branching(comm, order):
    size, children = comm.size, list(range(1, comm.size))
    ranks = BRANCH_ORDERS[order](0, children)
    if not ranks:
        pytest.skip("a parent without children and without itself has no branch")
    through_self = 0 in ranks

    def kinds(r, _size):
        if r:
            return ["linear"]
        return ["linear", "linear", "sum"] if through_self else ["linear", "sum"]

    links = build(kinds, size)
    if comm.rank == 0:
        wiring = [(None, ranks)] + ([(0, 0)] if through_self else []) + [(ranks, None)]
    else:
        wiring = [(0, 0)]

    def losses(ref, x, t):
        head = ref[0][0](x)
        branch = {r: ref[r][0](head) for r in children}
        if through_self:
            branch[0] = ref[0][1](head)
        return {0: ce(ref[0][-1](*[branch[r] for r in ranks]), t)}

    train_and_compare(comm, links, wiring, comm.rank == 0, losses)


def test_a_rank_alone_hands_everything_to_itself(comm):
    """On a communicator of its own, a model of hand-offs only (no MPI message) equals the plain network."""
    solo = comm.split(comm.rank, 0)  # every rank is a group of one
    links = build(lambda _r, _size: ["linear", "linear", "sum"], 1, seed=comm.rank)
    wiring = [(None, [0, 0]), (0, 0), ([0, 0], None)]

    def losses(ref, x, t):
        a, b, total = ref[0]
        head = a(x)
        return {0: ce(total(head, b(head)), t)}

    train_and_compare(solo, links, wiring, True, losses)


# -- twisting: every rank talks to both neighbours; middle ranks sum two hand-offs to themselves --


def test_twisting(comm):
    size = comm.size
    if size < 2:
        pytest.skip("twisting needs a previous and a next rank")
    last = size - 1

    def kinds(r, _size):
        return ["linear", "linear", "linear", "linear", "sum"] if 0 < r < size - 1 else ["linear", "linear"]

    links = build(kinds, size)
    r = comm.rank
    if r == 0:
        wiring = [(None, 1), (1, None)]
    elif r == last:
        wiring = [(r - 1, None), (None, r - 1)]
    else:
        wiring = [(r - 1, r), (None, r - 1), (None, r + 1), (r + 1, r), ([r, r], None)]

    def losses(ref, x, t):
        def to_next(q):
            return ref[q][0](x) if q == 0 else ref[q][2](x)

        def to_prev(q):
            return ref[q][1](x)

        out = {0: ce(ref[0][1](to_prev(1)), t), last: ce(ref[last][0](to_next(last - 1)), t)}
        for q in range(1, last):
            out[q] = ce(ref[q][4](ref[q][0](to_next(q - 1)), ref[q][3](to_prev(q + 1))), t)
        return out

    train_and_compare(comm, links, wiring, True, losses)


# -- crossing: a ring where rank 0 sends first and every other rank receives first ----------------


def test_crossing(comm):
    size = comm.size
    if size < 2:
        pytest.skip("crossing needs two ranks")
    r, prev, nxt = comm.rank, (comm.rank - 1) % size, (comm.rank + 1) % size
    links = build(lambda _q, _size: ["linear", "linear"], size)  # [send, receive] on rank 0, [receive, send] else
    wiring = [(None, nxt), (prev, None)] if r == 0 else [(prev, None), (None, nxt)]

    def losses(ref, x, t):
        sender = {q: ref[q][0] if q == 0 else ref[q][1] for q in ref}
        receiver = {q: ref[q][1] if q == 0 else ref[q][0] for q in ref}
        return {q: ce(receiver[q](sender[(q - 1) % size](x)), t) for q in ref}

    train_and_compare(comm, links, wiring, True, losses)


# -- wiring errors that stay errors -----------------------------------------------------------------


def test_hand_off_must_be_sent_before_it_is_received(comm):
    model = mnframe.MultiNodeChainList(comm)
    with pytest.raises(
        ValueError, match=r"own rank %d 1 time\(s\), but earlier components sent to it only 0" % comm.rank
    ):
        model.add_link(L.Linear(D, D), rank_in=comm.rank, rank_out=None)
    model.add_link(L.Linear(D, D), rank_in=None, rank_out=comm.rank)
    with pytest.raises(ValueError, match="never received"):
        model(np.zeros((1, D), np.float32))
    with pytest.raises(ValueError, match="outside the communicator"):
        model.add_link(L.Linear(D, D), rank_in=comm.size, rank_out=None)
