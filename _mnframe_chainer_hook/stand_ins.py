"""Stand-ins for the parts of ``numpy.distutils`` and ``pkg_resources`` that Chainer 7.8.1 uses.

Each function returns ``{module name: module}``; ``provide_for_chainer`` puts
them in ``sys.modules`` only while a Chainer module executes. Found by reading
Chainer 7.8.1: ``chainer/_environment_check.py`` calls
``numpy.distutils.system_info.get_info('blas_opt')`` (macOS only) and
``pkg_resources.require`` / ``get_distribution`` / ``DistributionNotFound`` /
``VersionConflict``; ``chainer/testing/helper.py`` and ``doctest_helper.py`` call
``pkg_resources.WorkingSet().require`` and catch ``ResolutionError``.
"""

import importlib.metadata
import re
import sys
import types


def numpy_distutils(numpy):
    """``numpy.distutils.system_info.get_info``, answered from NumPy's build configuration."""

    def get_info(name, notfound_action=0):  # noqa: ARG001 - numpy.distutils' signature, callers pass it by keyword
        """Only what Chainer asks: whether NumPy's BLAS is Accelerate (it then warns on macOS)."""
        config = getattr(getattr(numpy, "__config__", None), "CONFIG", None) or {}
        blas = config.get("Build Dependencies", {}).get("blas", {}).get("name", "")
        if name.startswith(("blas", "lapack")) and "accelerate" in str(blas).lower():
            return {"extra_link_args": ["-Wl,-framework", "-Wl,Accelerate"]}
        return {}

    doc = "mnframe's stand-in: only what Chainer 7.8.1 uses (see _mnframe_chainer_hook)"
    package = types.ModuleType("numpy.distutils", doc)
    package.__path__ = []
    system_info = types.ModuleType("numpy.distutils.system_info", doc)
    system_info.get_info = get_info
    package.system_info = system_info
    return {"numpy.distutils": package, "numpy.distutils.system_info": system_info}


def pkg_resources():
    """A ``pkg_resources`` module holding this module's public names below."""
    module = types.ModuleType(
        "pkg_resources", "mnframe's stand-in: only what Chainer 7.8.1 uses (see _mnframe_chainer_hook)"
    )
    for name in (
        "ResolutionError",
        "DistributionNotFound",
        "VersionConflict",
        "Distribution",
        "get_distribution",
        "require",
        "WorkingSet",
    ):
        setattr(module, name, getattr(sys.modules[__name__], name))
    return {"pkg_resources": module}


# -- the pkg_resources names ------------------------------------------------------
# Requirements are "name[extras] specifiers"; the dependencies of a distribution
# are not resolved (Chainer only asks "is it installed, which version").


class ResolutionError(Exception):
    """A requirement cannot be met."""


class DistributionNotFound(ResolutionError):
    """The distribution is not installed."""


class VersionConflict(ResolutionError):
    """The installed version does not satisfy the requirement."""


class Distribution:
    def __init__(self, project_name, version):
        self.project_name, self.key, self.version = project_name, project_name.lower(), version

    def __repr__(self):
        return f"{self.project_name} {self.version}"


def get_distribution(name):
    name = _split(name)[0]
    try:
        return Distribution(name, importlib.metadata.version(name))
    except importlib.metadata.PackageNotFoundError:
        raise DistributionNotFound(name) from None


def require(*requirements):
    found = []
    for requirement in requirements:
        for line in [requirement] if isinstance(requirement, str) else requirement:
            name, clauses = _split(line)
            dist = get_distribution(name)
            if not all(satisfies(dist.version, op, want) for op, want in clauses):
                raise VersionConflict(dist, line)
            found.append(dist)
    return found


class WorkingSet:
    def require(self, *requirements):
        return require(*requirements)


# -- requirement and version parsing (PEP 440, the common forms) --------------------

_REQUIREMENT = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*([^;]*)")
_CLAUSE = re.compile(r"\s*(~=|===|==|!=|<=|>=|<|>)\s*([^\s,]+)\s*")
_VERSION = re.compile(
    r"v?(\d+(?:\.\d+)*)(?:[-_.]?(a|b|c|rc|alpha|beta|pre|preview)[-_.]?(\d*))?"
    r"(?:-(\d+)|[-_.]?(?:post|rev|r)[-_.]?(\d*))?(?:[-_.]?dev[-_.]?(\d*))?",
    re.I,
)
_WIDTH = 8  # release segments compared


def _split(line):
    """'name[extra] >=1, <2 ; marker' -> ('name', [('>=', '1'), ('<', '2')])."""
    match = _REQUIREMENT.match(line)
    spec = match.group(2).strip() if match else ""
    clauses = [_CLAUSE.fullmatch(part) for part in spec.split(",") if part.strip()]
    if match is None or not all(clauses):
        raise ValueError(f"invalid requirement {line!r}")
    return match.group(1), [c.groups() for c in clauses]


def version_key(version):
    """A sortable key: release (zero-padded), then dev < pre-release < final < post."""
    match = _VERSION.match(version.strip())
    if match is None:
        return ((0,) * _WIDTH, 0, 0)
    release = tuple(int(p) for p in match.group(1).split("."))[:_WIDTH]
    release += (0,) * (_WIDTH - len(release))
    pre, pre_n, post_a, post_b, dev = match.group(2, 3, 4, 5, 6)
    if pre:
        phase, n = -1, int(pre_n or 0)
    elif post_a or post_b is not None:
        phase, n = 1, int(post_a or post_b or 0)
    elif dev is not None:
        phase, n = -2, int(dev or 0)
    else:
        phase, n = 0, 0
    return (release, phase, n)


def satisfies(version, op, want):
    """Whether ``version`` meets the clause ``op want`` (e.g. '>=', '7.7.0')."""
    if op == "===":
        return version == want
    have = version_key(version)
    if want.endswith(".*"):  # ==X.Y.* / !=X.Y.*
        prefix = tuple(int(p) for p in want[:-2].split("."))
        same = have[0][: len(prefix)] == prefix
        return same if op == "==" else not same
    need = version_key(want)
    if op == "~=":
        prefix = need[0][: len(_VERSION.match(want).group(1).split(".")) - 1]
        return have >= need and have[0][: len(prefix)] == prefix
    return {
        "==": have == need,
        "!=": have != need,
        "<=": have <= need,
        ">=": have >= need,
        "<": have < need,
        ">": have > need,
    }[op]
