"""ChainerMN's module path ``chainermn.testing.device``: ``get_device`` for tests."""

import chainer


def get_device(device_id=None, use_chainerx=False):
    """The Chainer device a test runs on: NumPy (``@numpy``) without ``device_id``,
    CuPy GPU ``device_id`` (``@cupy:N``) with it; with ``use_chainerx`` the ChainerX
    equivalents (``native:0``, ``cuda:N``), which need a ChainerX build of Chainer."""
    if use_chainerx:
        spec = "native:0" if device_id is None else f"cuda:{device_id}"
    else:
        spec = "@numpy" if device_id is None else f"@cupy:{device_id}"
    return chainer.get_device(spec)
