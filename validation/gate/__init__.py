"""The fleet gate: per-node accept / reject with every reason, and the fleet verdict.

Pure decision logic: callers read the result files (fleet.results.read_results) and hand
them to `decide`; the reports (validation.reports) and the CLI (fleetforge gate) do the I/O.
"""

from validation.gate.decide import decide
from validation.gate.model import (
    INCOMPLETE_RULES,
    MAD_SCALE,
    CheckVerdict,
    FileReport,
    FleetPlan,
    FleetVerdict,
    GateInputError,
    GateResult,
    GateSettings,
    MetricStats,
    NodeVerdict,
    Outcome,
    Reason,
    Rule,
    natural_key,
)

__all__ = [
    "INCOMPLETE_RULES",
    "MAD_SCALE",
    "CheckVerdict",
    "FileReport",
    "FleetPlan",
    "FleetVerdict",
    "GateInputError",
    "GateResult",
    "GateSettings",
    "MetricStats",
    "NodeVerdict",
    "Outcome",
    "Reason",
    "Rule",
    "decide",
    "natural_key",
]
