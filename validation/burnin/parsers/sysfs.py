"""Values read from sysfs: InfiniBand port state and rate, link speeds."""

from __future__ import annotations

import re

_RATE = re.compile(r"^\s*(?P<value>[0-9]+(?:\.[0-9]+)?)\s*Gb/sec")
_STATE = re.compile(r"^\s*(?P<code>\d+)\s*:\s*(?P<name>\S+)")


def ib_rate_gbitps(text: str) -> float | None:
    """'400 Gb/sec (4X NDR)' -> 400.0; anything unreadable -> None."""
    m = _RATE.match(text)
    return float(m["value"]) if m else None


def ib_state(text: str) -> str:
    """'4: ACTIVE' -> 'ACTIVE'; 'LinkUp' style without a code passes through."""
    m = _STATE.match(text)
    return (m["name"] if m else text.strip()).upper() or "UNKNOWN"
