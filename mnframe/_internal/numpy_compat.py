"""Make sure Chainer 7.8.1 imports in this process and in its forkserver workers.

The work is done by the ``_mnframe_chainer_hook`` package (see its docstring):
it puts back ``numpy.sctypes`` under NumPy 2 and provides ``numpy.distutils``
and ``pkg_resources`` stand-ins where they are missing, when Chainer is
imported. Normally the ``mnframe-chainer-hook.pth`` file that mnframe installs
has already set it up at interpreter start-up, in this process and in every
child interpreter (spawn, forkserver): then ``apply()`` does nothing.

Without the .pth (``MNFRAME_CHAINER_HOOK=0``, or mnframe used from a checkout
on ``PYTHONPATH``), ``apply()`` installs the hook now, so Chainer imports if it
is imported after mnframe, and adds ``mnframe`` to multiprocessing's forkserver
preload list: the server (which unpickles Chainer objects for
MultiprocessIterator workers in a fresh interpreter) imports mnframe once and
every worker forked from it has the hook. Under ``spawn`` the main module must
then import mnframe before chainer. Importing nothing else, this stays cheap.
"""


def apply():
    try:
        import _mnframe_chainer_hook as hook
    except ImportError:  # mnframe's directory copied alone: Chainer's own error will say what is missing
        return
    if hook.installed_by_pth():
        return
    hook.install()
    _preload_in_forkserver()


def _preload_in_forkserver():
    try:
        from multiprocessing import forkserver
    except ImportError:  # a platform without forkserver
        return
    # CPython keeps the list on the module's server object; the default is ['__main__'].
    modules = list(getattr(forkserver._forkserver, "_preload_modules", ["__main__"]))
    if "mnframe" not in modules:
        forkserver.set_forkserver_preload(modules + ["mnframe"])
