"""The gate's vocabulary: reasons, per-node verdicts, fleet statistics and the fleet verdict.

Everything here is plain data with an `as_dict()` that the JSON report prints as is, so the
document `fleetforge gate --json` emits and the objects the tests assert on are the same thing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

from fleet.metrics import METRICS
from fleet.spec import FleetSpec, Host, ThresholdOverride, ValidationSettings

Rule = Literal[
    "floor", "outlier", "version", "missing", "error", "fail", "unreadable", "implausible", "unlisted"
]
# Rules that mean "the gate could not see a measurement" rather than "it saw a bad one".
INCOMPLETE_RULES: frozenset[str] = frozenset({"missing", "error", "unreadable"})
Outcome = Literal["ok", "rejected", "incomplete"]
Role = Literal["job", "spare"]
CheckState = Literal["pass", "fail", "error", "skip", "missing"]

# MAD x 1.4826 estimates the standard deviation of normally distributed data, so k reads as "sigmas".
MAD_SCALE = 1.4826

_DEFAULTS = ValidationSettings()


class GateInputError(ValueError):
    """The results cannot be judged as asked (mixed SKUs, unknown SKU, unusable threshold)."""


@dataclass(frozen=True, slots=True)
class Reason:
    rule: Rule
    check: str | None
    metric: str | None
    measured: float | str | None
    expected: float | str | None
    message: str

    def as_dict(self) -> dict[str, object]:
        return {
            "check": self.check,
            "metric": self.metric,
            "measured": self.measured,
            "expected": self.expected,
            "rule": self.rule,
            "message": self.message,
        }


class CheckVerdict(NamedTuple):
    """What one check of a node's run came to, for the JUnit report (a tuple: one per node x check)."""

    check: str
    state: CheckState
    detail: str | None
    duration_s: float


@dataclass(slots=True)
class NodeVerdict:
    node: str
    reasons: list[Reason] = field(default_factory=list)
    run_id: str | None = None
    started: str | None = None
    level: str | None = None
    files: tuple[str, ...] = ()
    checks: dict[str, CheckVerdict] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    # metric -> the check whose record carried it (reasons and JUnit testcases name it)
    metric_checks: dict[str, str] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    role: Role | None = None
    pace: float | None = None

    @property
    def accepted(self) -> bool:
        return not self.reasons

    @property
    def verdict(self) -> Literal["accept", "reject"]:
        return "accept" if self.accepted else "reject"

    @property
    def incomplete(self) -> bool:
        return any(r.rule in INCOMPLETE_RULES for r in self.reasons)

    @property
    def unmeasured(self) -> bool:
        """Rejected only because nothing of it could be read (missing, unreadable, error): it may
        be a healthy machine whose results did not arrive."""
        return bool(self.reasons) and all(r.rule in INCOMPLETE_RULES for r in self.reasons)

    @property
    def unlisted(self) -> bool:
        """No list of the fleet's hosts names it: its figures and versions never shape the fleet's."""
        return any(r.rule == "unlisted" for r in self.reasons)

    def as_dict(self) -> dict[str, object]:
        return {
            "node": self.node,
            "verdict": self.verdict,
            "role": self.role,
            "reasons": [r.as_dict() for r in self.reasons],
            "run_id": self.run_id,
            "started": self.started,
            "level": self.level,
            "files": list(self.files),
            "checks": {c.check: c.state for c in self.checks.values()},
            "metrics": self.metrics,
            "versions": self.versions,
            "pace": self.pace,
        }


@dataclass(frozen=True, slots=True)
class MetricStats:
    metric: str
    unit: str
    higher_is_better: bool
    n: int
    median: float | None
    mad: float | None  # scaled: 1.4826 x median absolute deviation
    limit: float | None  # absolute floor (higher is better) or ceiling (lower is better)
    limit_source: str | None
    outlier_threshold: float | None  # None when the fleet-relative rule was not applied
    note: str | None

    @property
    def rules(self) -> tuple[str, ...]:
        """How this metric was judged: its absolute limit, the fleet-relative rule, both or neither."""
        bound = ("floor" if self.higher_is_better else "ceiling",) if self.limit is not None else ()
        return bound + (("outlier",) if self.outlier_threshold is not None else ())

    def as_dict(self) -> dict[str, object]:
        higher = self.higher_is_better
        return {
            "rules": list(self.rules),
            "unit": self.unit,
            "higher_is_better": higher,
            "n": self.n,
            "median": self.median,
            "mad": self.mad,
            "floor": self.limit if higher else None,
            "ceiling": None if higher else self.limit,
            "limit_source": self.limit_source,
            "outlier_below": self.outlier_threshold if higher else None,
            "outlier_above": None if higher else self.outlier_threshold,
            "note": self.note,
        }


@dataclass(frozen=True, slots=True)
class FileReport:
    path: str
    records: int
    bad_lines: tuple[tuple[int, str], ...]

    def as_dict(self) -> dict[str, object]:
        return {
            "path": self.path,
            "records": self.records,
            "bad_lines": [{"line": n, "problem": p} for n, p in self.bad_lines],
        }


@dataclass(frozen=True, slots=True)
class FleetVerdict:
    sku: str | None
    judged: int
    accepted: tuple[str, ...]  # ordered: best pace first (see validation/gate/fleet.py)
    rejected: tuple[str, ...]
    required: int | None  # spec.nodes; None without a spec
    spares: int | None  # spec.spares
    ready: bool | None  # None without a spec
    job: tuple[str, ...]
    spare: tuple[str, ...]
    name: str | None = None

    def as_dict(self) -> dict[str, object]:
        shortfall = None if self.required is None else max(0, self.required - len(self.accepted))
        return {
            "name": self.name,
            "sku": self.sku,
            "judged": self.judged,
            "accepted_count": len(self.accepted),
            "rejected_count": len(self.rejected),
            "required": self.required,
            "spares": self.spares,
            "ready": self.ready,
            "shortfall": shortfall,
            "accepted": list(self.accepted),
            "rejected": list(self.rejected),
            "job": list(self.job),
            "spare": list(self.spare),
        }


@dataclass(frozen=True)
class GateSettings:
    """The knobs of the rules; defaults are FleetSpec's `validation` defaults."""

    mad_k: float = _DEFAULTS.mad_k
    min_relative_margin: float = _DEFAULTS.min_relative_margin
    min_fleet: int = 3  # fewer nodes than this: no fleet statistics, absolute rules only
    thresholds: Mapping[str, ThresholdOverride] = field(default_factory=dict)
    pinned_versions: Mapping[str, str] = field(default_factory=dict)
    level: str | None = None  # the spec's burn-in level: a run at a lower level misses checks
    # Checks every node's run must hold (--expect-checks); also what lets a partial run pass.
    expect_checks: tuple[str, ...] | None = None

    @classmethod
    def from_spec(
        cls, spec: FleetSpec | None, min_fleet: int = 3, expect_checks: tuple[str, ...] | None = None
    ) -> GateSettings:
        if spec is None:
            return cls(min_fleet=min_fleet, expect_checks=expect_checks)
        v = spec.validation
        return cls(
            mad_k=v.mad_k,
            min_relative_margin=v.min_relative_margin,
            min_fleet=min_fleet,
            thresholds=dict(v.thresholds),
            pinned_versions=dict(v.pinned_versions),
            level=v.level,
            expect_checks=expect_checks,
        )

    def as_dict(self) -> dict[str, object]:
        return {
            "mad_k": self.mad_k,
            "mad_scale": MAD_SCALE,
            "min_relative_margin": self.min_relative_margin,
            "min_fleet": self.min_fleet,
            "pinned_versions": dict(self.pinned_versions),
            "level": self.level,
            "expect_checks": list(self.expect_checks) if self.expect_checks is not None else None,
        }


@dataclass(frozen=True)
class FleetPlan:
    """What the spec says the fleet should be: how many nodes the job needs, and its hosts."""

    name: str
    required: int
    spares: int
    hosts: tuple[Host, ...] = ()

    @classmethod
    def from_spec(cls, spec: FleetSpec) -> FleetPlan:
        return cls(spec.name, spec.nodes, spec.spares, tuple(spec.hosts or ()))


@dataclass
class GateResult:
    nodes: list[NodeVerdict]
    fleet: FleetVerdict
    stats: dict[str, MetricStats]
    notes: list[str]
    files: list[FileReport]
    settings: GateSettings

    def reported(self, metric: str) -> bool:
        """Whether a report may plot or export `metric`: one of the vocabulary (fleet/metrics.py),
        one the spec's thresholds name, or one held to a limit. How many there are is bounded by
        those lists, never by what a node chose to write."""
        if metric in METRICS or metric in self.settings.thresholds:
            return True
        stats = self.stats.get(metric)
        return stats is not None and stats.limit is not None

    def reported_stats(self) -> list[MetricStats]:
        """The statistics of the metrics a report may plot or export (`reported`), in name order."""
        return [s for m, s in sorted(self.stats.items()) if self.reported(m)]

    def node(self, name: str) -> NodeVerdict:
        for v in self.nodes:
            if v.node == name:
                return v
        raise KeyError(name)

    def outcome(self, strict: bool = False) -> Outcome:
        """ok / rejected / incomplete; the CLI maps these onto exit codes 0 / 1 / 2.

        Without a spec (or with --strict) incomplete results outrank rejects: a node the gate
        could not see may be the worse one, and the fix (rerun its burn-in) comes first. With a
        spec the question is only whether the job can land on `nodes` healthy nodes.
        """
        plain: Outcome = "ok"
        if any(v.incomplete for v in self.nodes):
            plain = "incomplete"
        elif any(not v.accepted for v in self.nodes):
            plain = "rejected"
        if self.fleet.ready is None:
            return plain
        if strict:
            return plain if plain != "ok" or self.fleet.ready else "rejected"
        return "ok" if self.fleet.ready else "rejected"

    def as_dict(self) -> dict[str, object]:
        return {
            "nodes": [v.as_dict() for v in self.nodes],
            "fleet": self.fleet.as_dict(),
            "stats": {m: s.as_dict() for m, s in self.stats.items()},
            "notes": list(self.notes),
            "files": [f.as_dict() for f in self.files if f.bad_lines],
            "rules": self.settings.as_dict(),
        }


_DIGITS = re.compile(r"(\d+)")


def natural_key(name: str) -> tuple[tuple[int, int | str], ...]:
    """node2 before node10: digit runs compare as numbers. isdecimal, not isdigit: `\\d` matches only
    decimal digits, and a superscript 2 is a digit that int() refuses (a crash on a node name)."""
    return tuple((1, int(p)) if p.isdecimal() else (0, p) for p in _DIGITS.split(name) if p)
