"""Recipe models: forward and backward on tiny inputs, without MPI.

Models that communicate (seq2seq, parallel convolution) run here against an
in-process stand-in for the communicator and ``mnframe.functions``, checking
the local math; tests/mpi/test_recipes_*.py runs them across real ranks.
"""

import chainer
import chainer.links as L
import numpy as np
import pytest

from mnframe.recipes.cifar.models import VGG
from mnframe.recipes.dcgan.models import Discriminator, Generator
from mnframe.recipes.imagenet.models import ARCHS
from mnframe.recipes.mnist.model import MLP
from mnframe.recipes.mnist_model_parallel.model import MLP0Head, MLP0Tail, MLP1Middle


def _backward_fills_grads(link, loss):
    link.cleargrads()
    loss.backward()
    missing = [name for name, p in link.namedparams() if p.grad is None]
    assert not missing, f"parameters without gradient: {missing}"


def test_mnist_mlp():
    model = L.Classifier(MLP(n_units=8))
    x = np.random.rand(4, 64).astype(np.float32)
    loss = model(x, np.arange(4, dtype=np.int32))
    assert loss.shape == () and model.predictor.l1.W.shape == (8, 64)
    _backward_fills_grads(model, loss)


def test_model_parallel_components_compose_to_the_mlp():
    head, middle, tail = MLP0Head(8), MLP1Middle(8), MLP0Tail(10)
    x = np.random.rand(3, 64).astype(np.float32)
    y = tail(middle(head(x)))
    assert y.shape == (3, 10)


@pytest.mark.parametrize("name", sorted(ARCHS))
def test_imagenet_models_report_loss_and_accuracy(name):
    cls = ARCHS[name]
    model = cls(n_class=4, width=0.0625)
    assert cls.insize in (224, 227)
    x = np.random.rand(2, 3, 64, 64).astype(np.float32)
    observation = {}
    with chainer.reporter.Reporter().scope(observation):
        chainer.reporter.get_current_reporter().add_observer("main", model)
        loss = model(x, np.array([0, 3], np.int32))
    assert {"main/loss", "main/accuracy"} <= set(observation)
    _backward_fills_grads(model, loss)


def test_vgg_tiny():
    model = L.Classifier(VGG(n_class=10, width=0.0625))
    loss = model(np.random.rand(2, 3, 32, 32).astype(np.float32), np.array([1, 2], np.int32))
    _backward_fills_grads(model, loss)


def test_dcgan_shapes():
    gen, dis = Generator(n_hidden=4, ch=16), Discriminator(ch=16)
    images = gen(gen.make_hidden(2))
    assert images.shape == (2, 3, 32, 32)
    assert dis(images).shape == (2, 1)


class _LoopbackComm:
    """Rank ``rank`` of ``size`` where every rank holds the same data: allgather repeats x."""

    def __init__(self, rank=0, size=1):
        self.rank, self.size = rank, size


def _fake_functions(monkeypatch):
    """Replace mnframe.functions' send/recv/allgather with in-process versions."""
    import chainer.functions as F

    from mnframe import functions as mnf

    mailbox = []

    def send(x, comm, rank, tag=0):  # noqa: ARG001 - stands in for mnframe.functions.send, whose callers pass keywords
        mailbox.append(x)  # keep the graph: recv returns the same variable
        return chainer.Variable(np.zeros((), np.float32))

    def recv(comm, rank, delegate_variable=None, tag=0, force_tuple=False):  # noqa: ARG001 - stands in for mnframe.functions.recv, whose callers pass keywords
        return mailbox.pop(0)

    def allgather(comm, x):
        # only used with one simulated rank here: the gathered tuple is (x,)
        return tuple(F.identity(x) for _ in range(comm.size))

    for name, fn in (("send", send), ("recv", recv), ("allgather", allgather)):
        monkeypatch.setattr(mnf, name, fn, raising=False)
    return mailbox


def test_seq2seq_encoder_decoder_in_one_process(monkeypatch):
    from mnframe.recipes.seq2seq.data import get_datasets, vocab_size
    from mnframe.recipes.seq2seq.model import Decoder, Encoder

    _fake_functions(monkeypatch)
    v = vocab_size(4)
    train, _ = get_datasets(n_train=4, n_test=1, length=5, n_symbols=4)
    xs, ys = chainer.dataset.concat_examples(train[:4])
    enc = Encoder(_LoopbackComm(0, 2), n_layers=2, n_source_vocab=v, n_target_vocab=v, n_units=6)
    dec = Decoder(_LoopbackComm(1, 2), n_layers=2, n_source_vocab=v, n_target_vocab=v, n_units=6)
    enc(xs, ys)
    loss = dec(xs, ys)
    assert loss.shape == () and float(loss.array) > 0
    enc.cleargrads()
    _backward_fills_grads(dec, loss)  # the gradient flows back into the encoder through the "send"
    assert all(p.grad is not None for p in enc.params())


def test_parallel_convolution_slices_cover_all_channels(monkeypatch):
    from mnframe.recipes.parallel_convolution.model import ParallelConvNet, ParallelConvolution2D

    _fake_functions(monkeypatch)
    for size in (1, 2, 3, 5):
        spans = [(c.lo, c.hi) for c in (ParallelConvolution2D(_LoopbackComm(r, size), 2, 7) for r in range(size))]
        covered = sorted(i for lo, hi in spans for i in range(lo, hi))
        assert covered == list(range(7)), (size, spans)
    # one rank: the layer is an ordinary convolution
    conv = ParallelConvolution2D(_LoopbackComm(0, 1), 2, 4, ksize=3, pad=1)
    x = np.random.rand(1, 2, 5, 5).astype(np.float32)
    expected = chainer.functions.convolution_2d(x, conv.W, pad=1)
    np.testing.assert_allclose(conv(x).array, expected.array, rtol=1e-5)
    model = L.Classifier(ParallelConvNet(_LoopbackComm(0, 1), n_class=10, width=0.0625))
    loss = model(np.random.rand(2, 3, 32, 32).astype(np.float32), np.array([0, 1], np.int32))
    _backward_fills_grads(model, loss)
