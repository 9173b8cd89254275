"""The one table of mnframe's ``MNFRAME_*`` environment settings, and their validation.

``SETTINGS`` lists every variable the library reads: name, type, default and
meaning. ``validate()`` parses all of them at once; ``create_communicator``
calls it on every rank (before anything else is switched on), so a bad value
such as ``MNFRAME_COLLECTIVE_TIMEOUT=-1`` or ``=ten`` ends the job with status 2
and one message naming the variable and the accepted form, instead of being
discovered later inside a background thread. docs/reliability.md's settings
table is ``markdown_table()`` (a unit test checks that they agree).
"""

import dataclasses
import difflib
import os
import re
from typing import Any, Callable, Dict, Mapping, Optional

from mnframe.runtime.errors import ConfigError

_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(s|m|h)?\s*$", re.IGNORECASE)
_UNIT_S = {None: 1.0, "s": 1.0, "m": 60.0, "h": 3600.0}
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off", "")


def seconds(raw: str) -> float:
    """'600', '90s', '2.5m', '1h' -> seconds (>= 0)."""
    match = _DURATION_RE.match(raw)
    if match is None:
        raise ValueError(
            "expected a duration >= 0: a number of seconds with an optional unit s, m or h (e.g. 600, 90s, 10m, 1h)"
        )
    return float(match.group(1)) * _UNIT_S[(match.group(2) or "").lower() or None]


def flag(raw: str) -> bool:
    """'1', 'true', 'yes', 'on' -> True; '0', 'false', 'no', 'off', '' -> False."""
    value = raw.strip().lower()
    if value not in _TRUE + _FALSE:
        raise ValueError("expected 1 or 0 (also true/false, yes/no, on/off)")
    return value in _TRUE


def optional_flag(raw: str) -> Optional[bool]:
    """Like ``flag``, but unset or empty means 'decide automatically' (None)."""
    return None if raw.strip() == "" else flag(raw)


def positive_int(raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError("expected a positive integer")
    return value


def text(raw: str) -> str:
    return raw


MIN_KEY_CHARS = 16


def secret(raw: str) -> bytes:
    """A signing key given directly: at least MIN_KEY_CHARS characters."""
    if len(raw.strip()) < MIN_KEY_CHARS:
        raise ValueError(f"expected a key of at least {MIN_KEY_CHARS} characters (e.g. `openssl rand -hex 32`)")
    return raw.strip().encode("utf-8")


def secret_file(raw: str) -> bytes:
    """A signing key read from the file at ``raw`` (surrounding whitespace ignored)."""
    try:
        with open(os.path.expanduser(raw), "rb") as f:
            data = f.read(1 << 16).strip()
    except OSError as exc:
        raise ValueError(f"cannot read the key file: {exc.strerror or exc}") from None
    if len(data) < MIN_KEY_CHARS:
        raise ValueError(f"the key file must hold a key of at least {MIN_KEY_CHARS} bytes")
    return data


@dataclasses.dataclass(frozen=True)
class Setting:
    name: str
    type: str  # the accepted form, as documented
    default: str  # as documented ("unset" when absent means something)
    meaning: str
    parse: Callable[[str], Any]
    default_value: Any = None


SETTINGS = (
    Setting(
        "MNFRAME_COLLECTIVE_TIMEOUT",
        "duration (`600`, `90s`, `10m`, `1h`)",
        "600",
        "deadline of every communication operation; `0` disables it",
        seconds,
        600.0,
    ),
    Setting(
        "MNFRAME_EXIT_TIMEOUT",
        "duration",
        "the collective deadline",
        "how long a rank that reached the end of its script waits for the others before aborting "
        "the job (status 124); `0` waits forever",
        seconds,
        None,
    ),
    Setting(
        "MNFRAME_MPI_START_TIMEOUT",
        "duration",
        "600",
        "deadline of MPI's start (`MPI_Init`; under srun also Slurm's PMI exchange) and of MPI's end "
        "after the exit barrier (`MPI_Finalize`), kept by a process outside MPI that kills the stuck "
        "rank after one line; `0` disables it",
        seconds,
        600.0,
    ),
    Setting(
        "MNFRAME_EXIT_GRACE",
        "duration",
        "2",
        "a rank stuck in an operation this long after another rank exited aborts the job (status 1)",
        seconds,
        2.0,
    ),
    Setting(
        "MNFRAME_NO_GUARD",
        "flag (`1`/`0`)",
        "0",
        "switch off the abort guard, deadlines and exit handling (set it for every rank)",
        flag,
        False,
    ),
    Setting(
        "MNFRAME_DEBUG_COLLECTIVES",
        "flag",
        "0",
        "compare every collective's signature across ranks before it runs",
        flag,
        False,
    ),
    Setting(
        "MNFRAME_RUN_DIR",
        "path",
        "the working directory",
        "where timeout records go when no run directory was set",
        text,
        None,
    ),
    Setting(
        "MNFRAME_FORCE_ABORT_ON_EXCEPTION",
        "any non-empty value",
        "unset",
        "`global_except_hook._add_hook_if_enabled()` installs the abort hook (as ChainerMN's "
        "`CHAINERMN_FORCE_ABORT_ON_EXCEPTION`)",
        text,
        None,
    ),
    Setting(
        "MNFRAME_CUDA_AWARE", "flag", "unset (detected)", "whether the MPI library is CUDA-aware", optional_flag, None
    ),
    Setting(
        "MNFRAME_FAKE_NODE_SIZE",
        "positive integer",
        "unset",
        "testing: split one machine into fake nodes of this many ranks",
        positive_int,
        None,
    ),
    Setting(
        "MNFRAME_CHAINER_HOOK",
        "flag",
        "1",
        "`0`: the site-packages .pth does not install the Chainer import hook (`import mnframe` "
        "still does, see docs/numpy2.md)",
        flag,
        True,
    ),
    Setting(
        "MNFRAME_NATIVE_HALF",
        "flag",
        "1",
        "`0`: float16 conversions (a float16 wire) use NumPy table lookups instead of the CPU's F16C "
        "instructions, which mnframe builds with the C compiler at first use "
        '(docs/communicators.md, "float16 on the wire")',
        flag,
        True,
    ),
    Setting(
        "MNFRAME_UNSAFE_NO_LOCK",
        "flag",
        "0",
        "`1`: run even when the run directory's `.mnframe.lock` cannot be taken safely (a link, not a regular "
        "file, no `flock` on the file system); two jobs in one directory are then not prevented",
        flag,
        False,
    ),
    Setting(
        "MNFRAME_CHECKPOINT_KEY",
        "text, 16+ characters",
        "unset",
        "sign checkpoints with this key (HMAC-SHA256 in the manifest) and refuse to resume from one whose "
        "signature does not verify; never put it in the config",
        secret,
        None,
    ),
    Setting(
        "MNFRAME_CHECKPOINT_KEY_FILE",
        "path",
        "unset",
        "as `MNFRAME_CHECKPOINT_KEY`, the key read from this file (set one of the two)",
        secret_file,
        None,
    ),
)
BY_NAME = {s.name: s for s in SETTINGS}
# Read by scripts/setup.sh and the test-suite, not by the library: never warned about.
TOOL_VARIABLES = (
    "MNFRAME_NUMPY",
    "MNFRAME_VENV",
    "MNFRAME_SYSTEM_MPI",
    "MNFRAME_GPU_NAMES",
    "MNFRAME_MPI_SUITE_DIR",  # the test suite's launches (mnframe/testing/mpi_inner.py)
    "MNFRAME_MPI_SUITE_GRACE",
    "MNFRAME_SUITE_OUT",  # scripts/chainermn_suite.py
    "MNFRAME_SYSTEM_MPI_TESTS",  # tests/test_system_mpi.py
    "MNFRAME_SYSTEM_MPI_TEST_CFLAGS",
    "MNFRAME_GPU_CHECK_SECONDS",  # scripts/gpu_check.sh and the GPU tests
    "MNFRAME_GPU_MPI_TIMEOUT",
    "MNFRAME_WHEEL_DIR",  # scripts/fetch_gpu_wheels.sh, scripts/check_kernels.sh
    "MNFRAME_WHEEL_PYTHON",
    "MNFRAME_WHEEL_BUILD_VENV",
    "MNFRAME_KERNEL_VENV",
)

_values: Dict[str, Any] = {}


def parse(name: str, environ: Optional[Mapping[str, str]] = None) -> Any:
    """The parsed value of one setting (its default when unset); ConfigError when malformed."""
    setting = BY_NAME[name]
    raw = (os.environ if environ is None else environ).get(name)
    if raw is None:
        return setting.default_value
    try:
        return setting.parse(raw)
    except ValueError as exc:
        raise ConfigError(f"{name}={raw!r}: {exc} ({name}: {setting.meaning})") from None


def validate(environ: Optional[Mapping[str, str]] = None) -> Dict[str, Any]:
    """Parse every setting; raise one ConfigError naming every malformed variable.

    The values are remembered (``get``), so the watchdog thread never parses anything.
    """
    environ = os.environ if environ is None else environ
    values, problems = {}, []
    for setting in SETTINGS:
        try:
            values[setting.name] = parse(setting.name, environ)
        except ConfigError as exc:
            problems.append(str(exc))
    if problems:
        raise ConfigError(
            "invalid mnframe environment setting"
            + ("s" if len(problems) > 1 else "")
            + ":\n  "
            + "\n  ".join(problems)
            + "\nFix or unset the variable (the same on every rank)."
        )
    if environ is os.environ:
        _values.update(values)
    return values


def get(name: str) -> Any:
    """The validated value of ``name`` (parsed now if ``validate`` has not run)."""
    if name not in _values:
        _values[name] = parse(name)
    return _values[name]


def unknown(environ: Optional[Mapping[str, str]] = None):
    """[(name, closest known name or None)] for MNFRAME_* variables nothing reads (typos)."""
    environ = os.environ if environ is None else environ
    known = list(BY_NAME) + list(TOOL_VARIABLES)
    found = []
    for name in sorted(environ):
        if name.startswith("MNFRAME_") and name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            found.append((name, close[0] if close else None))
    return found


def markdown_table() -> str:
    """The settings as the Markdown table docs/reliability.md shows."""
    rows = ["| variable | type | default | meaning |", "| --- | --- | --- | --- |"]
    rows += [f"| `{s.name}` | {s.type} | {s.default} | {s.meaning} |" for s in SETTINGS]
    return "\n".join(rows)
