"""What parse() returns, and the one place a status is decided from measurements.

`judge()` turns measured metrics plus health faults into a status: a fault or a metric below its
floor is `fail`; measurements with no fault are `pass`; nothing measured is `error`, never a pass.
Floors come from the SKU's reference (value x fraction) with the fleet spec's overrides applied.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from fleet.metrics import METRICS
from fleet.results import Status
from validation.burnin.context import CheckContext

# A finding list in `reason` is cut here; the full list stays in `findings`.
_REASON_ITEMS = 3


@dataclass(frozen=True)
class CheckOutcome:
    status: Status
    metrics: dict[str, float] = field(default_factory=dict)
    per_device: dict[str, list[float]] = field(default_factory=dict)
    findings: list[str] = field(default_factory=list)
    reason: str | None = None
    versions: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # The same rule the record enforces, checked where the outcome is made so a broken
        # check fails in its own worker with a clear message.
        if self.status == "pass" and not self.metrics:
            raise ValueError("a check cannot pass without metrics it measured")
        if self.status != "pass" and not self.reason:
            raise ValueError(f"a {self.status} outcome must carry a reason")
        for name, value in self.metrics.items():
            if not math.isfinite(value):
                raise ValueError(f"metric {name} is not a finite number: {value!r}")


def skip(reason: str) -> CheckOutcome:
    return CheckOutcome(status="skip", reason=reason)


def error(reason: str, findings: Iterable[str] = ()) -> CheckOutcome:
    return CheckOutcome(status="error", reason=reason, findings=list(findings))


@dataclass(frozen=True)
class Floor:
    metric: str
    limit: float
    # True: the metric must be >= limit. False (counts, temperatures): it must be <= limit.
    at_least: bool
    how: str


def floor_for(ctx: CheckContext, metric: str) -> Floor | None:
    """The floor (or, for lower-is-better metrics, the ceiling) a metric is judged against."""
    ref = ctx.sku.reference.get(metric)
    override = ctx.thresholds.get(metric)
    known = METRICS.get(metric)
    at_least = known.higher_is_better if known else True
    if override is not None and override.floor is not None:
        return Floor(metric, override.floor, at_least, f"spec floor {override.floor:g}")
    if ref is None:
        return None
    fraction = ref.fraction
    how = f"reference {ref.value:g} x {ref.fraction:g}"
    if override is not None and override.fraction is not None:
        fraction = override.fraction
        how = f"reference {ref.value:g} x spec fraction {fraction:g}"
    return Floor(metric, ref.value * fraction, at_least, how)


def floor_faults(ctx: CheckContext, metrics: Mapping[str, float]) -> list[str]:
    faults = []
    for name, value in sorted(metrics.items()):
        floor = floor_for(ctx, name)
        if floor is None:
            continue
        if floor.at_least and value < floor.limit:
            faults.append(f"{name} {value:.4g} below floor {floor.limit:.4g} ({floor.how})")
        elif not floor.at_least and value > floor.limit:
            faults.append(f"{name} {value:.4g} above limit {floor.limit:.4g} ({floor.how})")
    return faults


def judge(
    ctx: CheckContext,
    metrics: Mapping[str, float],
    *,
    per_device: Mapping[str, list[float]] | None = None,
    faults: Iterable[str] = (),
    notes: Iterable[str] = (),
    required: Iterable[str] = (),
    versions: Mapping[str, str] | None = None,
) -> CheckOutcome:
    """Decide pass / fail / error from what was measured.

    `faults` are health findings that fail the node on their own; `notes` are observations that
    do not; `required` names metrics the SKU expects this check to measure: a missing one is a
    fault, because a measurement that did not happen must never read as healthy.
    """
    metrics = {k: float(v) for k, v in metrics.items()}
    all_faults = list(faults)
    for name in required:
        if name not in metrics:
            all_faults.append(f"{name}: the SKU has a reference for it but it was not measured")
    all_faults += floor_faults(ctx, metrics)
    findings = all_faults + list(notes)
    if not metrics:
        why = "; ".join(all_faults[:_REASON_ITEMS]) or "nothing was measured"
        return CheckOutcome(status="error", reason=why, findings=findings, versions=dict(versions or {}))
    reason: str | None = None
    status: Status = "pass"
    if all_faults:
        more = len(all_faults) - _REASON_ITEMS
        reason = "; ".join(all_faults[:_REASON_ITEMS]) + (f"; and {more} more" if more > 0 else "")
        status = "fail"
    return CheckOutcome(
        status=status,
        metrics=metrics,
        per_device={k: [float(x) for x in v] for k, v in (per_device or {}).items()},
        findings=findings,
        reason=reason,
        versions=dict(versions or {}),
    )
