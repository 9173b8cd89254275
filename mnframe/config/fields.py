"""Field types that several config sections share, stated once.

``PositiveInt`` is pydantic's own (``from pydantic import PositiveInt``).
"""

from typing import Literal

Unit = Literal["epoch", "iteration"]  # the unit of a trigger ``(N, unit)`` or an interval
