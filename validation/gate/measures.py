"""Rules on measured values: absolute floors from the SKU and robust fleet-relative outliers.

Floors: limit = reference value x fraction (the catalog's fraction, or the spec's
`validation.thresholds.<metric>.fraction`); a spec `floor` replaces the computed limit outright.
For a lower-is-better metric (temperature, throttle seconds) the same limit is a ceiling.

Outliers, on a higher-is-better metric: a node is an outlier when it is below the fleet median by
more than k x MAD *and* by more than `min_relative_margin` x median (and, where the metric sets one,
by more than its least margin in its own unit: temperature). MAD is the median absolute
deviation scaled by 1.4826, so k reads as standard deviations for normal noise. The second
condition keeps a tight fleet (MAD near 0) from rejecting noise: with MAD = 0 the margin alone
decides. Lower-is-better metrics mirror this above the median. With a median of 0 and MAD of 0
there is no scale at all (typically error counters), so the relative rule is not applied to that
metric; the checks' own fail status covers those. Every node with a measurement counts towards
the median, rejected ones included: median and MAD shrug off a minority of bad nodes.

The fleet run's fabric metrics (fleet/metrics.py MULTINODE_METRIC and FABRIC_METRIC) exist only
where `fleetforge fleet burnin` ran its collectives: a catalog floor on one that no node measured
(a single-node burn-in, a fleet run without PyTorch) is not applied and a note says so, where any
other limited metric nobody measured rejects every node. The whole-fleet all-reduce gives every
member the same figure, so its floor cannot tell a slow host from a slow fleet: when the fleet run
also measured each host's pairs (FABRIC_METRIC), a whole-fleet figure below its floor is a note and
the hosts are judged on their pairs; without pair figures every member is held to it, as before.
A measured metric with no floor from the catalog or the spec is judged fleet-relative only, and its
statistics say so (for the fabric metrics a note too: most SKUs have no published multi-node figure).

A metric with a limit that some node measured is required of every node (a check that skipped or
measured nothing is no pass); so is the pair figure once any host has one. A metric with no limit
is required of a node when most of the fleet measured it. Nodes rejected as `unlisted` take no part.

Only metrics of the vocabulary (fleet/metrics.py) or named by the spec's thresholds are judged,
counted in the statistics and handed to the reports: any other name a record carries is taken out
of its node's figures, and one note names the first few and counts the rest (the results contract,
fleet/results.py, already bounds a record's names and their shape; this bounds what they cost).

The work is a node x metric matrix in numpy, so 10,000 nodes x 30 metrics is milliseconds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from fleet.catalog import Sku
from fleet.metrics import FABRIC_METRIC, MULTINODE_METRIC, Metric
from validation.gate.model import MAD_SCALE, GateInputError, GateSettings, MetricStats, NodeVerdict, Reason
from validation.gate.plausible import judge_plausibility

FloatArray = npt.NDArray[np.float64]


# Names of unknown metrics quoted in the one note that says they were ignored, before "and N more".
UNKNOWN_SHOWN = 10
# Metrics only a fleet run's collectives measure; see the module docstring.
FLEET_STAGE_METRICS = frozenset({MULTINODE_METRIC, FABRIC_METRIC})


@dataclass(frozen=True, slots=True)
class Limit:
    value: float
    source: str
    from_spec: bool = False  # the spec's validation.thresholds set it, not the catalog alone


def resolve_limits(sku: Sku | None, settings: GateSettings) -> dict[str, Limit]:
    limits: dict[str, Limit] = {}
    references = sku.reference if sku is not None else {}
    sku_name = sku.sku if sku is not None else ""
    for metric, ref in references.items():
        override = settings.thresholds.get(metric)
        if override is not None and override.floor is not None:
            limits[metric] = Limit(override.floor, f"spec validation.thresholds.{metric}.floor", True)
        elif override is not None and override.fraction is not None:
            limits[metric] = Limit(
                ref.value * override.fraction,
                f"{ref.value:g} ({ref.kind}) x {override.fraction:g} from spec validation.thresholds",
                True,
            )
        else:
            limits[metric] = Limit(
                ref.floor, f"{sku_name} reference {ref.value:g} ({ref.kind}) x {ref.fraction:g}"
            )
    for metric, override in settings.thresholds.items():
        if metric in limits:
            continue
        if override.floor is not None:
            limits[metric] = Limit(override.floor, f"spec validation.thresholds.{metric}.floor", True)
        elif override.fraction is not None:
            where = sku.sku if sku is not None else "the results' SKU"
            raise GateInputError(
                f"validation.thresholds.{metric}.fraction: {where} has no reference value for {metric} "
                f"to take a fraction of; give a floor instead"
            )
    return limits


def judge_measures(
    verdicts: Sequence[NodeVerdict],
    settings: GateSettings,
    limits: Mapping[str, Limit],
    vocabulary: Mapping[str, Metric],
    notes: list[str],
    sku: Sku | None = None,
) -> dict[str, MetricStats]:
    """Add floor, outlier, implausible and missing-metric reasons to `verdicts`; return the stats.

    A metric with a limit (the SKU's reference or the spec's threshold) that no node measured
    rejects every node as `missing`: the gate cannot accept a fleet on a figure nobody took.
    """
    _set_aside_unknown(verdicts, {*vocabulary, *limits, *settings.thresholds}, notes)
    # A node no list of the fleet names is rejected already; were its figures counted, files left by
    # hosts no longer in the fleet would move the median, the quorum and the majorities.
    judged = [v for v in verdicts if v.run_id is not None and v.level is not None and not v.unlisted]
    limits = _fleet_stage_limits(judged, limits, notes)
    names = sorted({m for v in judged for m in v.metrics} | set(limits))
    unknown = [m for m in names if m not in vocabulary and m not in limits]
    if unknown:
        notes.append(
            f"metrics not in fleet/metrics.py are shown but not judged (direction unknown): {', '.join(unknown)}"
        )
    if not names:
        return {}
    index = {m: j for j, m in enumerate(names)}
    values = np.full((len(judged), len(names)), np.nan)
    for i, v in enumerate(judged):
        row = values[i]
        for metric, x in v.metrics.items():
            row[index[metric]] = x
    _non_finite(judged, names, values)
    measured = ~np.isnan(values)
    measured_count = measured.sum(axis=0)
    judge_plausibility(judged, names, values, vocabulary, sku)
    present = ~np.isnan(values)
    count = present.sum(axis=0)
    higher = np.array([vocabulary[m].higher_is_better if m in vocabulary else True for m in names])
    judged_metric = np.array([m in vocabulary or m in limits for m in names])
    floor_margin = np.array([vocabulary[m].min_outlier_margin if m in vocabulary else 0.0 for m in names])
    limit = np.array([limits[m].value if m in limits else np.nan for m in names])

    fleet_ok = len(judged) >= settings.min_fleet
    if not fleet_ok and judged:
        notes.append(
            f"fleet of {len(judged)} node(s) with results: fewer than {settings.min_fleet} needed for "
            f"fleet statistics, so only the absolute rules apply (floors, versions, checks)"
        )
    median = np.full(len(names), np.nan)
    mad = np.full(len(names), np.nan)
    threshold = np.full(len(names), np.nan)
    stats: dict[str, MetricStats] = {}
    k, margin = settings.mad_k, settings.min_relative_margin
    for j, metric in enumerate(names):
        col = values[present[:, j], j]
        note = None
        if col.size:
            median[j] = med = float(np.median(col))
            mad[j] = spread = float(np.median(np.abs(col - med))) * MAD_SCALE
            if not judged_metric[j]:
                note = "not in the metric vocabulary: not judged"
            elif not fleet_ok:
                note = "too few nodes for fleet statistics"
            elif col.size < settings.min_fleet:
                note = f"measured on {col.size} node(s), fewer than {settings.min_fleet}: no outlier rule"
            elif med == 0 and spread == 0:
                note = "median and MAD are 0: no scale for a relative rule"
            elif not _fleet_relative(settings, metric):
                note = f"floor only (validation.thresholds.{metric}.fleet_relative: false): no outlier rule"
            elif higher[j]:
                threshold[j] = min(med - k * spread, med - margin * abs(med), med - floor_margin[j])
            else:
                threshold[j] = max(med + k * spread, med + margin * abs(med), med + floor_margin[j])
            if not np.isnan(threshold[j]) and metric not in limits:
                note = _fleet_relative_only(metric, sku, notes)
        elif metric in limits and measured_count[j] == 0:
            note = "no node reported it: every node is rejected as missing it"
            notes.append(
                f"{metric}: no node reported it, so no node can be held to its limit "
                f"({_bound(higher[j], limit[j])}); every node is rejected as missing it"
            )
            _unmeasured_everywhere(judged, metric, limits[metric])
        elif metric in limits:
            note = "no plausible value on any node: its limit was not applied"
        metric_def = vocabulary.get(metric)
        stats[metric] = MetricStats(
            metric=metric,
            unit=metric_def.unit if metric_def else "",
            higher_is_better=bool(higher[j]),
            n=int(count[j]),
            median=_opt(median[j]),
            mad=_opt(mad[j]),
            limit=_opt(limit[j]),
            limit_source=limits[metric].source if metric in limits else None,
            outlier_threshold=_opt(threshold[j]),
            note=note,
        )
    with np.errstate(invalid="ignore"):
        below_limit = np.where(higher, values < limit, values > limit)
        outlier = np.where(higher, values < threshold, values > threshold)
    if MULTINODE_METRIC in index and FABRIC_METRIC in index:
        j = index[MULTINODE_METRIC]
        # Only a host with pair figures of its own is judged on them instead.
        own_pairs = present[:, index[FABRIC_METRIC]]
        if (below_limit[:, j] & own_pairs).any():
            below_limit[own_pairs, j] = False
            notes.append(
                f"{MULTINODE_METRIC}: the whole-fleet all-reduce measured {median[j]:.4g} (median), below "
                f"its floor {limit[j]:.4g} ({limits[MULTINODE_METRIC].source}); every member measures the "
                f"same figure, so it names no host: each host is judged on its own pairs ({FABRIC_METRIC})"
            )
    # Required of every node once any node measured it: a metric with a limit (a node whose check
    # measured nothing, or skipped, would otherwise pass as a minority without its floor applied)
    # and the fleet run's pair figure (the rounds pair every host). Other metrics: of the majority.
    required = np.array([(m in limits and m not in FLEET_STAGE_METRICS) or m == FABRIC_METRIC for m in names])
    _floor_reasons(judged, names, values, below_limit, higher, limits)
    least = [
        f"{floor_margin[j]:g} {vocabulary[m].unit}" if floor_margin[j] else "" for j, m in enumerate(names)
    ]
    _outlier_reasons(judged, names, values, outlier, higher, median, mad, threshold, least, settings)
    _missing_metric_reasons(judged, names, measured, measured_count, required)
    if fleet_ok:
        _pace(judged, values, higher, median, judged_metric)
    return stats


def _set_aside_unknown(verdicts: Sequence[NodeVerdict], known: AbstractSet[str], notes: list[str]) -> None:
    """Take the metrics neither the vocabulary nor the spec's thresholds name out of every verdict,
    and say so in one note with a capped list.

    Such a name has no direction and no limit, so it was never judged; what it cost was a column of
    statistics, a plot and a Prometheus series per name, which a node could multiply at will.
    """
    unknown: set[str] = set()
    nodes: list[str] = []
    for v in verdicts:
        if v.metrics.keys() <= known:  # the usual case: one set comparison per node
            continue
        extra = [m for m in v.metrics if m not in known]
        for metric in extra:
            del v.metrics[metric]
            v.metric_checks.pop(metric, None)
        unknown.update(extra)
        nodes.append(v.node)
    if not unknown:
        return
    names = sorted(unknown)
    shown = ", ".join(_clipped(m) for m in names[:UNKNOWN_SHOWN])
    more = f" and {len(names) - UNKNOWN_SHOWN} more" if len(names) > UNKNOWN_SHOWN else ""
    on = ", ".join(_clipped(n) for n in nodes[:UNKNOWN_SHOWN])
    on_more = f" and {len(nodes) - UNKNOWN_SHOWN} more" if len(nodes) > UNKNOWN_SHOWN else ""
    notes.append(
        f"{len(names)} metric name(s) in neither fleet/metrics.py nor the spec's validation.thresholds "
        f"were ignored (not judged, plotted or exported): {shown}{more}; reported by {on}{on_more}"
    )


def _clipped(name: str, limit: int = 40) -> str:
    return name if len(name) <= limit else name[:limit] + "..."


def _fleet_stage_limits(
    judged: Sequence[NodeVerdict], limits: Mapping[str, Limit], notes: list[str]
) -> dict[str, Limit]:
    """Drop the catalog's floor on a fleet-stage metric that no node took (see the module docstring)."""
    kept = dict(limits)
    for metric in sorted(FLEET_STAGE_METRICS & set(limits)):
        lim = limits[metric]
        if lim.from_spec or any(metric in v.metrics for v in judged):
            continue
        del kept[metric]
        notes.append(
            f"{metric}: not measured in these results (measured only by `fleetforge fleet burnin` on 2+ "
            f"hosts with PyTorch), so its floor {lim.value:.4g} ({lim.source}) was not applied"
        )
    return kept


def _fleet_relative_only(metric: str, sku: Sku | None, notes: list[str]) -> str:
    """The statistics' note for a metric with no floor; for a fabric metric the report's note too."""
    whose = f"{sku.sku} has no catalog reference for it" if sku is not None else "no SKU reference"
    note = f"fleet-relative only: no floor ({whose} and the spec sets no threshold)"
    if metric in FLEET_STAGE_METRICS:
        notes.append(
            f"{metric}: judged fleet-relative only: {whose} (no published multi-node all-reduce figure "
            f"for its fabric) and the spec sets no validation.thresholds.{metric}"
        )
    return note


def _non_finite(judged: Sequence[NodeVerdict], names: Sequence[str], values: FloatArray) -> None:
    """NaN or infinity is no measurement: an `error` reason, and the value leaves the statistics."""
    sizes = np.fromiter((len(v.metrics) for v in judged), dtype=np.int64, count=len(judged))
    suspects = np.nonzero(np.isfinite(values).sum(axis=1) < sizes)[0]  # rows holding NaN or inf
    for i in suspects.tolist():
        v = judged[i]
        for metric in [m for m, x in v.metrics.items() if not np.isfinite(x)]:
            x = v.metrics.pop(metric)
            check = v.metric_checks.get(metric)
            v.reasons.append(
                Reason(
                    "error",
                    check,
                    metric,
                    str(x),
                    "a finite number",
                    f"{check}: {metric} = {x} is not a measurement",
                )
            )
            values[i, names.index(metric)] = np.nan


def _unmeasured_everywhere(judged: Sequence[NodeVerdict], metric: str, limit: Limit) -> None:
    for v in judged:
        v.reasons.append(
            Reason(
                "missing",
                None,
                metric,
                None,
                limit.value,
                f"{metric}: no node of the fleet measured it, and it has a limit ({limit.source}); "
                f"a figure nobody took cannot be accepted",
            )
        )


def _floor_reasons(
    judged: Sequence[NodeVerdict],
    names: Sequence[str],
    values: FloatArray,
    mask: npt.NDArray[np.bool_],
    higher: npt.NDArray[np.bool_],
    limits: Mapping[str, Limit],
) -> None:
    for i, j in zip(*np.nonzero(mask), strict=True):
        v, metric = judged[i], names[j]
        x, lim = float(values[i, j]), limits[metric]
        check = v.metric_checks.get(metric)
        side = "below the floor" if higher[j] else "above the ceiling"
        v.reasons.append(
            Reason(
                "floor",
                check,
                metric,
                x,
                lim.value,
                f"{check}: {metric} {x:.4g} is {side} {lim.value:.4g} ({lim.source})",
            )
        )


def _outlier_reasons(
    judged: Sequence[NodeVerdict],
    names: Sequence[str],
    values: FloatArray,
    mask: npt.NDArray[np.bool_],
    higher: npt.NDArray[np.bool_],
    median: FloatArray,
    mad: FloatArray,
    threshold: FloatArray,
    least: Sequence[str],
    settings: GateSettings,
) -> None:
    for i, j in zip(*np.nonzero(mask), strict=True):
        v, metric = judged[i], names[j]
        x, med, spread = float(values[i, j]), float(median[j]), float(mad[j])
        pct = 100 * abs(x - med) / abs(med) if med else float("inf")
        side = "below" if higher[j] else "above"
        check = v.metric_checks.get(metric)
        v.reasons.append(
            Reason(
                "outlier",
                check,
                metric,
                x,
                float(threshold[j]),
                f"{check}: {metric} {x:.4g} is {pct:.1f} % {side} the fleet median {med:.4g}: more than "
                f"{settings.mad_k:g} x MAD ({settings.mad_k * spread:.4g}) and more than "
                f"{settings.min_relative_margin:.0%} of the median"
                + (f" and more than {least[j]}" if least[j] else ""),
            )
        )


def _missing_metric_reasons(
    judged: Sequence[NodeVerdict],
    names: Sequence[str],
    present: npt.NDArray[np.bool_],
    count: npt.NDArray[np.int_],
    required: npt.NDArray[np.bool_],
) -> None:
    """A metric the fleet measured but this node did not: its check did not do its job."""
    majority = (count * 2 > len(judged)) | (required & (count > 0))
    mask = ~present & majority[np.newaxis, :]
    producer: dict[str, str] = {}
    for j in np.nonzero(mask.any(axis=0))[0].tolist():
        # Which check measures it: ask the first node that has it.
        first = judged[int(np.argmax(present[:, j]))]
        producer[names[j]] = first.metric_checks[names[j]]
    for i, j in zip(*np.nonzero(mask), strict=True):
        v, metric = judged[i], names[j]
        producing = producer.get(metric)
        outcome = v.checks.get(producing) if producing is not None else None
        if outcome is not None and outcome.state in {"missing", "error"}:
            continue  # already rejected for that check; one reason per cause
        state = outcome.state if outcome is not None else "not run"
        v.reasons.append(
            Reason(
                "missing",
                producing,
                metric,
                None,
                "measured",
                f"{producing}: {metric} was measured on {int(count[j])} of {len(judged)} nodes but not on "
                f"this one (check {state})",
            )
        )


def _pace(
    judged: Sequence[NodeVerdict],
    values: FloatArray,
    higher: npt.NDArray[np.bool_],
    median: FloatArray,
    judged_metric: npt.NDArray[np.bool_],
) -> None:
    """Each node's worst value / median over higher-is-better metrics: what paces a synchronized step."""
    cols = higher & judged_metric & (median > 0)
    if not cols.any():
        return
    ratio = values[:, cols] / median[cols]
    worst = np.where(np.isnan(ratio), np.inf, ratio).min(axis=1)
    for v, w in zip(judged, worst, strict=True):
        v.pace = round(float(w), 4) if np.isfinite(w) else None


def _opt(x: float) -> float | None:
    return None if np.isnan(x) else float(x)


def _bound(higher: bool, value: float) -> str:
    return f"{'>=' if higher else '<='} {value:.4g}"


def _fleet_relative(settings: GateSettings, metric: str) -> bool:
    override = settings.thresholds.get(metric)
    return override is None or override.fleet_relative
