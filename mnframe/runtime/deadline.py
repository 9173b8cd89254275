"""The collective deadline: how long one communication operation may take before the job is
declared hung (``MNFRAME_COLLECTIVE_TIMEOUT``, or ``set_deadline``). One value, read by the
watchdog that enforces it and by the guard, whose agreed exits wait as long as a collective
would; kept apart from both so neither imports the other for it."""

from mnframe.runtime import settings

ENV_TIMEOUT = "MNFRAME_COLLECTIVE_TIMEOUT"

_state = {"deadline": None}  # seconds, 0.0 disabled; None: not read from the environment yet


def set_deadline(seconds):
    """Set the deadline (seconds) of every communication operation; None or 0 disables it."""
    if seconds is not None and seconds < 0:
        raise ValueError(f"deadline must be positive seconds (or None to disable), got {seconds}")
    _state["deadline"] = float(seconds) if seconds else 0.0


def get_deadline():
    """The deadline in seconds (0.0: disabled)."""
    if _state["deadline"] is None:
        _state["deadline"] = settings.parse(ENV_TIMEOUT)
    return _state["deadline"]
