"""The fabric stage's controller side: pairing rounds, running them, and naming the guilty host.

Pure: nothing here starts a process or opens a connection. A fleet run supplies the measuring
(`stage.RoundRunner`), everything else is computed from what it returns.
"""

from validation.fabric.attribute import AttributionInputError, attribute, slow_rule
from validation.fabric.model import (
    HOST_METRIC,
    Attribution,
    HostFigures,
    HostFinding,
    JudgedPair,
    LinkFinding,
    Pair,
    PairResult,
    Round,
    Schedule,
    SlowRule,
)
from validation.fabric.schedule import DEFAULT_ROUNDS, ScheduleError, max_rounds, pairing_schedule

__all__ = [
    "DEFAULT_ROUNDS",
    "HOST_METRIC",
    "Attribution",
    "AttributionInputError",
    "HostFigures",
    "HostFinding",
    "JudgedPair",
    "LinkFinding",
    "Pair",
    "PairResult",
    "Round",
    "Schedule",
    "ScheduleError",
    "SlowRule",
    "attribute",
    "max_rounds",
    "pairing_schedule",
    "slow_rule",
]
