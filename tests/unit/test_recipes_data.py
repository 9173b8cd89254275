"""Recipe datasets: shapes, dtypes, value ranges, determinism, and clear errors for missing files."""

import numpy as np
import pytest

from mnframe.recipes.cifar import data as cifar_data
from mnframe.recipes.dcgan import data as dcgan_data
from mnframe.recipes.imagenet import data as imagenet_data
from mnframe.recipes.mnist import data as mnist_data
from mnframe.recipes.parallel_convolution import data as pconv_data
from mnframe.recipes.seq2seq import data as seq2seq_data


def _arrays(dataset):
    return [np.asarray(a) for a in dataset._datasets]


def test_digits_split_is_fixed_and_scaled():
    train, test = mnist_data.get_datasets("digits")
    again, _ = mnist_data.get_datasets()
    assert (len(train), len(test)) == (1500, 297)
    x, y = _arrays(train)
    assert x.dtype == np.float32 and y.dtype == np.int32 and x.shape == (1500, 64)
    assert x.min() >= 0.0 and x.max() <= 1.0 and set(np.unique(y)) == set(range(10))
    for a, b in zip(_arrays(train), _arrays(again)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.slow  # a subprocess or many config compositions: the full tier
def test_digits_read_without_sklearn_equal_load_digits(monkeypatch):
    """The bundled CSV read directly (no 1 s sklearn import) gives load_digits()'s data and split."""
    assert mnist_data._digits_file() is not None
    fast = mnist_data.get_datasets("digits")
    monkeypatch.setattr(mnist_data, "_digits_file", lambda: None)  # the load_digits() fallback
    slow = mnist_data.get_datasets("digits")
    for a, b in zip(fast, slow):
        for x, y in zip(_arrays(a), _arrays(b)):
            np.testing.assert_array_equal(x, y)


def test_mnist_reads_chainer_layout(tmp_path):
    rng = np.random.RandomState(0)
    for name, n in (("train", 6), ("test", 4)):
        np.savez(
            tmp_path / f"{name}.npz",
            x=rng.randint(0, 256, (n, 784)).astype(np.uint8),
            y=rng.randint(0, 10, n).astype(np.uint8),
        )
    train, test = mnist_data.get_datasets("mnist", str(tmp_path))
    x, y = _arrays(train)
    assert x.shape == (6, 784) and x.dtype == np.float32 and x.max() <= 1.0 and y.dtype == np.int32
    assert len(test) == 4


@pytest.mark.parametrize("as_file", [True, False])
def test_mnist_reads_keras_layout(tmp_path, as_file):
    rng = np.random.RandomState(0)
    np.savez(
        tmp_path / "mnist.npz",
        x_train=rng.randint(0, 256, (5, 28, 28)).astype(np.uint8),
        y_train=np.arange(5, dtype=np.uint8),
        x_test=rng.randint(0, 256, (3, 28, 28)).astype(np.uint8),
        y_test=np.arange(3, dtype=np.uint8),
    )
    path = tmp_path / "mnist.npz" if as_file else tmp_path
    train, test = mnist_data.get_datasets("mnist", str(path))
    assert _arrays(train)[0].shape == (5, 784) and len(test) == 3


def test_mnist_missing_path_names_the_files(tmp_path):
    with pytest.raises(FileNotFoundError) as err:
        mnist_data.get_datasets("mnist", str(tmp_path))
    message = str(err.value)
    assert str(tmp_path) in message and "train.npz" in message and "mnist.npz" in message
    with pytest.raises(ValueError, match="needs a path"):
        mnist_data.get_datasets("mnist")
    with pytest.raises(ValueError, match="digits"):
        mnist_data.get_datasets("fashion")


def test_imagenet_synthetic_is_deterministic_and_cropped():
    train, val = imagenet_data.get_datasets(synthetic=True, n_synthetic=8, insize=16, n_class=5)
    assert (len(train), len(val)) == (8, 2)
    x, t = val[1]
    assert x.shape == (3, 16, 16) and x.dtype == np.float32 and 0 <= t < 5
    np.testing.assert_array_equal(
        val[1][0], imagenet_data.get_datasets(synthetic=True, n_synthetic=8, insize=16, n_class=5)[1][1][0]
    )
    assert -1.0 < x.min() and x.max() < 1.0


def test_imagenet_file_list_crops_and_subtracts_mean(tmp_path):
    from PIL import Image

    rng = np.random.RandomState(0)
    lines = []
    for i in range(3):
        Image.fromarray(rng.randint(0, 256, (20, 24, 3)).astype(np.uint8)).save(tmp_path / f"{i}.png")
        lines.append(f"{i}.png {i}")
    (tmp_path / "list.txt").write_text("\n".join(lines) + "\n")
    mean = np.full((3, 20, 24), 10.0, dtype=np.float32)
    np.save(tmp_path / "mean.npy", mean)
    train, val = imagenet_data.get_datasets(
        train=str(tmp_path / "list.txt"),
        val=str(tmp_path / "list.txt"),
        root=str(tmp_path),
        mean=str(tmp_path / "mean.npy"),
        insize=16,
    )
    x, t = val[2]
    raw = np.asarray(Image.open(tmp_path / "2.png"), dtype=np.float32).transpose(2, 0, 1)
    np.testing.assert_allclose(x, (raw[:, 2:18, 4:20] - 10.0) / 255.0, rtol=1e-6)
    assert t == 2 and train[0][0].shape == (3, 16, 16)


def test_imagenet_missing_lists_say_what_to_do(tmp_path):
    with pytest.raises(FileNotFoundError, match="synthetic"):
        imagenet_data.get_datasets(train=str(tmp_path / "nope.txt"), val=None)


def test_cifar_synthetic_and_local(tmp_path):
    train, test = cifar_data.get_datasets(n_synthetic=8)
    x, y = _arrays(train)
    assert x.shape == (8, 3, 32, 32) and x.dtype == np.float32 and len(test) == 2
    np.testing.assert_array_equal(x, _arrays(pconv_data.get_datasets(n_synthetic=8)[0])[0])
    rng = np.random.RandomState(0)
    np.savez(
        tmp_path / "cifar-10.npz",
        train_x=rng.randint(0, 256, (4, 3072)).astype(np.uint8),
        train_y=np.arange(4),
        test_x=rng.randint(0, 256, (2, 3072)).astype(np.uint8),
        test_y=np.arange(2),
    )
    train, test = cifar_data.get_datasets(path=str(tmp_path))
    assert _arrays(train)[0].shape == (4, 3, 32, 32) and _arrays(train)[0].max() <= 1.0 and len(test) == 2
    with pytest.raises(FileNotFoundError, match="data_batch_1"):
        cifar_data.get_datasets(path=str(tmp_path / "empty"))


def test_dcgan_synthetic_and_directory(tmp_path):
    from PIL import Image

    images, test = dcgan_data.get_datasets(n_synthetic=4, size=32)
    assert len(test) == 1 and images.shape == (4, 3, 32, 32) and images.dtype == np.float32
    assert images.min() >= -1.0 and images.max() <= 1.0
    Image.fromarray(np.zeros((10, 12, 3), np.uint8)).save(tmp_path / "a.png")
    folder, _ = dcgan_data.get_datasets(path=str(tmp_path), size=16)
    assert len(folder) == 1 and folder[0].shape == (3, 16, 16) and folder[0].min() == -1.0
    with pytest.raises(FileNotFoundError, match="no images"):
        dcgan_data.get_datasets(path=str(tmp_path / "none"))


def test_seq2seq_targets_are_reversed_sources():
    train, test = seq2seq_data.get_datasets(n_train=10, n_test=3, length=5, n_symbols=4)
    src, tgt = _arrays(train)
    assert src.shape == (10, 5) and src.dtype == np.int32
    np.testing.assert_array_equal(tgt, src[:, ::-1])
    assert src.min() >= seq2seq_data.FIRST_SYMBOL and src.max() < seq2seq_data.vocab_size(4)
    assert len(test) == 3
