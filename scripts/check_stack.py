"""Check an installed mnframe environment; print one line of versions, or why it fails (exit 1).

Run by scripts/setup.sh and CI with the venv's python. First Chainer, in this
interpreter that has not imported mnframe (what a ChainerMN script or Chainer's
own tests do: it works only through mnframe's import hook on NumPy 2, Python
>= 3.12 or without setuptools), one forward/backward; then mnframe and MPI.
"""

import sys


def main():
    try:
        import chainer
        import chainer.functions as F
        import chainer.links as L
        import numpy

        assert "mnframe" not in sys.modules, "the check must run Chainer before mnframe"
        link = L.Linear(3, 2)
        link.cleargrads()
        loss = F.sum(link(numpy.ones((4, 3), numpy.float32)))
        loss.backward()
        assert link.W.grad.shape == (2, 3) and numpy.isfinite(link.W.grad).all()
    except Exception as exc:
        from mnframe.dependencies import explain

        print(f"chainer without mnframe: {explain('chainer', exc)}", file=sys.stderr)
        return 1
    try:
        import mnframe
        from mnframe.dependencies import RUNNER_MODULES, require

        require(RUNNER_MODULES)
    except Exception as exc:
        print(f"mnframe: {exc}", file=sys.stderr)
        return 1
    import mpi4py

    setuptools = "absent"
    try:
        import importlib.metadata

        setuptools = importlib.metadata.version("setuptools")
    except Exception:
        pass
    print(
        f"Python {sys.version.split()[0]}, chainer {chainer.__version__}, numpy {numpy.__version__}, "
        f"mpi4py {mpi4py.__version__}, mnframe {mnframe.__version__}, setuptools {setuptools}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
