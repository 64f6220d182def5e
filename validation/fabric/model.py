"""The fabric stage's vocabulary: pairs, rounds, measurements and what attribution concludes.

Pairs are unordered: `Pair.of(a, b)` stores the two hosts in natural order (node2 before node10),
so the same two hosts measured in two rounds, or written either way round, are one pair.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from validation.gate.model import natural_key

# The per-host figure the gate judges like any other metric (floor and fleet-relative outlier):
# the host's best completed pair. It is low only when the host is slow with every partner, so a
# healthy host that happened to be paired with a bad one keeps a healthy value.
HOST_METRIC = "fabric_pair_busbw_gbps"
BUSBW_UNIT = "GB/s"


@dataclass(frozen=True, order=True)
class Pair:
    a: str
    b: str

    @classmethod
    def of(cls, x: str, y: str) -> Pair:
        if x == y:
            raise ValueError(f"a host cannot be paired with itself: {x!r}")
        first, second = sorted((x, y), key=natural_key)
        return cls(first, second)

    def other(self, host: str) -> str:
        return self.b if host == self.a else self.a

    def __contains__(self, host: object) -> bool:
        return host in (self.a, self.b)


@dataclass(frozen=True)
class Round:
    """One parallel step: disjoint pairs measured at the same time; `idle` sat this round out."""

    index: int
    pairs: tuple[Pair, ...]
    idle: tuple[str, ...] = ()


@dataclass(frozen=True)
class Schedule:
    hosts: tuple[str, ...]
    rounds: tuple[Round, ...]
    requested_rounds: int
    seed: int | None = None

    def partners(self, host: str) -> list[str]:
        return [p.other(host) for r in self.rounds for p in r.pairs if host in p]


@dataclass(frozen=True)
class PairResult:
    """One pair's measurement: busbw in GB/s, or None when the pair did not complete (with why)."""

    pair: Pair
    busbw_gbps: float | None
    reason: str | None = None
    round: int | None = None

    def __post_init__(self) -> None:
        bw = self.busbw_gbps
        if bw is not None and (isinstance(bw, bool) or not math.isfinite(bw) or bw < 0):
            raise ValueError(f"busbw of {self.pair.a}-{self.pair.b} must be a finite number >= 0: {bw!r}")

    @property
    def completed(self) -> bool:
        return self.busbw_gbps is not None


# "round": below the limit, but so was every other pair measured in the same round: the slowness was
# common to that moment (load, a congested spine), evidence against no host and no link. Likewise a
# pair that failed in a round where every pair failed: what stopped them all was the round.
Verdict = Literal["ok", "slow", "failed", "round"]


@dataclass(frozen=True)
class JudgedPair:
    result: PairResult
    verdict: Verdict
    unit: str = BUSBW_UNIT  # what the figures are in: GB/s busbw, Gb/s ib_write_bw

    @property
    def bad(self) -> bool:
        return self.verdict in ("slow", "failed")

    def describe(self, host: str | None = None) -> str:
        """`partner 12.3 GB/s (slow)` from a host's side, or `a-b ...` without one."""
        p = self.result.pair
        who = p.other(host) if host is not None else f"{p.a}-{p.b}"
        if self.result.busbw_gbps is None:
            return f"{who} failed ({self.result.reason or 'no reason given'})"
        return f"{who} {self.result.busbw_gbps:.4g} {self.unit} ({self.verdict})"

    def as_dict(self) -> dict[str, object]:
        r = self.result
        return {
            "hosts": [r.pair.a, r.pair.b],
            "busbw_gbps": r.busbw_gbps,
            "reason": r.reason,
            "round": r.round,
            "verdict": self.verdict,
        }


@dataclass(frozen=True)
class SlowRule:
    """How a pair was judged slow: fleet-relative threshold and/or absolute floor."""

    median_gbps: float | None
    mad_gbps: float | None  # scaled: 1.4826 x median absolute deviation
    relative_limit_gbps: float | None  # None: too few completed pairs for the relative rule
    floor_gbps: float | None
    mad_k: float
    min_relative_margin: float
    notes: tuple[str, ...] = ()

    @property
    def limit_gbps(self) -> float | None:
        limits = [x for x in (self.relative_limit_gbps, self.floor_gbps) if x is not None]
        return max(limits) if limits else None

    def as_dict(self) -> dict[str, object]:
        return {
            "median_gbps": self.median_gbps,
            "mad_gbps": self.mad_gbps,
            "relative_limit_gbps": self.relative_limit_gbps,
            "floor_gbps": self.floor_gbps,
            "limit_gbps": self.limit_gbps,
            "mad_k": self.mad_k,
            "min_relative_margin": self.min_relative_margin,
            "notes": list(self.notes),
        }


@dataclass(frozen=True)
class HostFigures:
    """A host's own per-pair figures: what goes into its results for the gate."""

    host: str
    partners: int
    completed: int
    failed: int
    best_gbps: float | None
    median_gbps: float | None
    worst_gbps: float | None
    metric: str = HOST_METRIC  # the name the host's best pair goes into its results under

    def metrics(self) -> dict[str, float]:
        return {} if self.best_gbps is None else {self.metric: self.best_gbps}

    def as_dict(self) -> dict[str, object]:
        return {
            "host": self.host,
            "partners": self.partners,
            "completed": self.completed,
            "failed": self.failed,
            "best_gbps": self.best_gbps,
            "median_gbps": self.median_gbps,
            "worst_gbps": self.worst_gbps,
        }


HostKind = Literal["slow_with_every_partner", "failed_with_every_partner", "repeated_links"]
OpenKind = Literal["not_measured", "bad_only_with_bad_partners"]


@dataclass(frozen=True)
class HostFinding:
    host: str
    kind: HostKind | OpenKind
    reason: str
    evidence: tuple[JudgedPair, ...]

    def as_dict(self) -> dict[str, object]:
        return {
            "host": self.host,
            "kind": self.kind,
            "reason": self.reason,
            "evidence": [e.as_dict() for e in self.evidence],
        }


@dataclass(frozen=True)
class LinkFinding:
    """A pair bad only together: both hosts named, neither rejected on this alone."""

    pair: Pair
    evidence: tuple[JudgedPair, ...]

    @property
    def repeated(self) -> bool:
        return len(self.evidence) > 1

    def as_dict(self) -> dict[str, object]:
        return {
            "hosts": [self.pair.a, self.pair.b],
            "repeated": self.repeated,
            "evidence": [e.as_dict() for e in self.evidence],
        }


@dataclass(frozen=True)
class Attribution:
    hosts: tuple[str, ...]
    rule: SlowRule
    pairs: tuple[JudgedPair, ...]
    guilty: tuple[HostFinding, ...]
    suspect_links: tuple[LinkFinding, ...]
    inconclusive: tuple[HostFinding, ...]
    figures: dict[str, HostFigures] = field(default_factory=dict)
    metric: str = HOST_METRIC
    unit: str = BUSBW_UNIT

    @property
    def clean(self) -> bool:
        return not (self.guilty or self.suspect_links or self.inconclusive)

    @property
    def guilty_hosts(self) -> tuple[str, ...]:
        return tuple(f.host for f in self.guilty)

    def as_dict(self) -> dict[str, object]:
        return {
            "hosts": len(self.hosts),
            "pairs_measured": len(self.pairs),
            "rule": self.rule.as_dict(),
            "guilty": [f.as_dict() for f in self.guilty],
            "suspect_links": [f.as_dict() for f in self.suspect_links],
            "inconclusive": [f.as_dict() for f in self.inconclusive],
            "host_metric": self.metric,
            "unit": self.unit,
            "figures": [self.figures[h].as_dict() for h in self.hosts if h in self.figures],
        }
