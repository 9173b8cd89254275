"""Dependencies that fail to import, reported as environment problems.

``require(modules)`` imports each module and turns a failure into a
``DependencyError`` whose one-line message says which package, why, and what
to install; the CLI prints it without a traceback and exits 3
(``ExitStatus.ENVIRONMENT``), never 2 (that is a configuration error).
``explain`` builds the message for an import failure seen elsewhere (a
``_target_`` module whose own imports fail). The fixes are kept here, once.
"""

from __future__ import annotations

import importlib
from typing import Optional, Sequence

from mnframe.runtime.errors import DependencyError
from mnframe.runtime.mpi_library import rebuild_command

# What `python -m mnframe` needs before it composes anything. Chainer before
# mpi4py.MPI: importing mpi4py.MPI initialises MPI, and a failure before that
# leaves nothing to clean up on any rank.
RUNNER_MODULES = ("numpy", "chainer", "yaml", "omegaconf", "hydra", "pydantic", "mpi4py", "mpi4py.MPI")

MPI_FIX = (
    'pip install "mnframe[mpich]" (MPICH from PyPI), or load your cluster\'s MPI '
    f"(e.g. `module load openmpi`) and rebuild mpi4py against it: {rebuild_command()}"
)
HOOK_FIX = (
    "reinstall mnframe so that its import hook (mnframe-chainer-hook.pth) is in site-packages: "
    "pip install --force-reinstall --no-deps mnframe (in a checkout: bash scripts/setup.sh), "
    "and do not set MNFRAME_CHAINER_HOOK=0; or import mnframe before chainer"
)

# import name -> distribution to install, where they differ
DISTRIBUTIONS = {
    "yaml": "PyYAML",
    "hydra": "hydra-core",
    "sklearn": "scikit-learn",
    "PIL": "Pillow",
    "cv2": "opencv-python",
    "cupy": "cupy-cuda12x (or the wheel for your CUDA)",
}
# Modules Chainer 7.8.1 needs that mnframe's import hook provides
HOOKED = ("numpy.distutils", "pkg_resources")


def require(modules: Sequence[str] = RUNNER_MODULES) -> None:
    """Import ``modules`` in order; raise DependencyError for the first that fails."""
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:  # ImportError, or e.g. mpi4py's RuntimeError "cannot load MPI library"
            raise DependencyError(explain(name, exc)) from None


def distribution(module: str) -> str:
    top = module.split(".")[0]
    return DISTRIBUTIONS.get(top, top)


def explain(module: str, exc: BaseException) -> str:
    """One line: which package cannot be imported, why, and what to install."""
    why = " ".join(str(exc).split()) or type(exc).__name__
    if module.startswith("mpi4py") and not isinstance(exc, ModuleNotFoundError):
        return f"mpi4py cannot load an MPI library ({mpi_load_failure(exc)}); fix: {MPI_FIX}"
    missing = getattr(exc, "name", None) if isinstance(exc, ModuleNotFoundError) else None
    if (missing and missing.startswith(HOOKED)) or "sctypes" in why:
        return f"{module} cannot be imported ({why}): Chainer 7.8.1 needs mnframe's import hook here; fix: {HOOK_FIX}"
    if missing and not _within(module, missing):
        return (
            f"{module} cannot be imported: it needs {missing}, which is not installed; "
            f"fix: pip install {distribution(missing)}"
        )
    if missing:
        return f"{module} is not installed; fix: pip install {distribution(module)}"
    return (
        f"{module} is installed but fails to import ({type(exc).__name__}: {why}); "
        f"fix: reinstall it (pip install --force-reinstall {distribution(module)})"
    )


def mpi_load_failure(exc: BaseException) -> str:
    """mpi4py's multi-line "cannot load MPI library" (one line per file it tried) in short."""
    first, *tried = [line.strip() for line in str(exc).splitlines() if line.strip()]
    not_found = [line.split(":")[0] for line in tried if "cannot open shared object file" in line]
    if tried and len(not_found) == len(tried):
        names = sorted({name.rsplit("/", 1)[-1] for name in not_found})
        return f"{first}: none of {', '.join(names)} found"
    return " ".join([first] + tried[:1])


def missing_dependency(module: str, exc: BaseException) -> Optional[str]:
    """For a failed ``import module``: the environment problem when a module that
    ``module`` itself imports is missing (``explain``'s message), else None (then
    ``module`` itself is missing: a misspelt name, a configuration error)."""
    missing = getattr(exc, "name", None) if isinstance(exc, ModuleNotFoundError) else None
    if missing is None or _within(module, missing):
        return None
    return explain(module, exc)


def _within(module: str, missing: str) -> bool:
    """True when ``missing`` is ``module`` or one of its parent packages."""
    return module == missing or module.startswith(missing + ".")
