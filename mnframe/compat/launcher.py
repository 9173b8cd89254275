"""``python -m mnframe.compat``: run a ChainerMN program unchanged on mnframe.

    mpiexec -n 2 python -m mnframe.compat train_mnist.py --epoch 3
    mpiexec -n 2 python -m mnframe.compat -m pytest tests/chainermn_tests
    mpiexec -n 2 python -m mnframe.compat -c "import chainermn; ..."

Like ``python -m mpi4py``, it takes the place of the ``python`` command: the
program sees the ``sys.argv``, ``sys.path[0]`` and ``__main__`` that plain
``python`` would give it. Before it starts, ``chainermn`` is aliased to mnframe
(alias.py) and mnframe's abort guard is installed (runtime/guard.py): an
uncaught exception on any rank prints the rank and traceback and ends the whole
job. ``MNFRAME_NO_GUARD=1`` leaves the guard off, as everywhere in mnframe.
"""

import os
import runpy
import sys

from mnframe.compat.alias import install_alias

USAGE = """usage: python -m mnframe.compat (script.py | -m module | -c command) [args ...]

Runs a program written for ChainerMN on mnframe: `chainermn` and every
`chainermn.*` module resolve to mnframe's module of the same path, and an
uncaught exception on any rank aborts the whole MPI job.
"""


class UsageError(Exception):
    pass


def parse(argv):
    """``(kind, target, args)`` from the launcher's arguments: kind is 'path', 'module' or 'command'."""
    if not argv or argv[0] in ("-h", "--help"):
        raise UsageError("")
    first = argv[0]
    if first in ("-m", "-c"):
        if len(argv) < 2:
            raise UsageError(f"argument expected for the {first} option")
        return ("module" if first == "-m" else "command"), argv[1], argv[2:]
    if first.startswith("-"):
        raise UsageError(f"unknown option {first!r}")
    return "path", first, argv[1:]


def _guard_on():
    from mnframe.runtime import activation, guard

    if not activation.guard_disabled():
        guard.install()


def run(kind, target, args):
    """Run the program as plain ``python`` would; exceptions propagate to the guard."""
    install_alias()
    _guard_on()
    if kind == "path":
        if not os.path.exists(target):
            raise UsageError(f"can't open file {os.path.abspath(target)!r}: no such file")
        sys.argv[:] = [target, *args]
        sys.path[0] = os.path.dirname(os.path.abspath(target))
        runpy.run_path(target, run_name="__main__")
    elif kind == "module":
        sys.argv[:] = [target, *args]  # runpy replaces argv[0] with the module's file
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    else:
        sys.argv[:] = ["-c", *args]
        main = sys.modules["__main__"]
        code = compile(target, "<string>", "exec")
        exec(code, {"__name__": "__main__", "__builtins__": main.__dict__["__builtins__"]})


def _program_traceback(tb):
    """``tb`` without the launcher's and runpy's frames: the traceback plain ``python`` shows."""
    ours = {os.path.abspath(__file__), os.path.abspath(runpy.__file__), "<frozen runpy>"}

    def launcher_frame(t):
        name = t.tb_frame.f_code.co_filename
        return name in ours or os.path.abspath(name) in ours

    while tb is not None and launcher_frame(tb):
        tb = tb.tb_next
    return tb


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        kind, target, args = parse(argv)
    except UsageError as e:
        sys.stderr.write((f"mnframe.compat: {e}\n" if str(e) else "") + USAGE)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    try:
        run(kind, target, args)
    except UsageError as e:
        sys.stderr.write(f"mnframe.compat: {e}\n")
        return 2
    except SystemExit:
        raise  # sys.exit(n) in the program: exit n, as plain python does
    except BaseException as e:  # noqa: B902 - handed to the excepthook, i.e. the abort guard
        sys.excepthook(type(e), e, _program_traceback(e.__traceback__))
        return 1
    return 0
