"""Prometheus text exposition format (for node_exporter's textfile collector or a pushgateway).

Per node: accepted (1/0), reject reasons by rule, every measured metric the gate reports on (those
of fleet/metrics.py and the spec's thresholds; GateResult.reported); per metric: the fleet
median, scaled MAD, the absolute limit and the outlier threshold; per fleet: node counts, when
the gate ran and, with a spec, whether the fleet is ready. Every series is labelled with `fleet`
and `sku`, so several fleets' files in one collector folder never collide. Series with no value (no limit, no threshold) are left
out rather than written as NaN, which alerting rules would have to special-case.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import get_args

from validation.gate import GateResult, Rule


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(labels: Mapping[str, str]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items()) + "}"


def _number(x: float) -> str:
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "+Inf" if x > 0 else "-Inf"
    return repr(float(x)) if not float(x).is_integer() else str(int(x))


class _Exposition:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def family(self, name: str, help_text: str, samples: Iterable[tuple[Mapping[str, str], float]]) -> None:
        rows = [f"{name}{_labels(labels)} {_number(value)}" for labels, value in samples]
        if not rows:
            return
        self.lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge", *rows]


def render_prometheus(result: GateResult, generated_at: float | None = None) -> str:
    """The exposition for one gate run. Every series carries `fleet` (the spec's name, empty
    without a spec) and `sku`, so the files of several fleets in one textfile-collector folder
    compose without clashing; `generated_at` (Unix seconds, default now) feeds the staleness gauge."""
    f = result.fleet
    base = {"fleet": f.name or "", "sku": f.sku or ""}

    def labels(**extra: str) -> dict[str, str]:
        return {**base, **extra}

    x = _Exposition()
    x.family(
        "fleetforge_gate_timestamp_seconds",
        "Unix time this gate run decided; alert when it is older than the burn-in cadence.",
        [(labels(), time.time() if generated_at is None else generated_at)],
    )
    x.family(
        "fleetforge_node_accepted",
        "1 if the gate accepted the node, 0 if it rejected it.",
        ((labels(node=v.node), 1.0 if v.accepted else 0.0) for v in result.nodes),
    )
    x.family(
        "fleetforge_node_reject_reasons",
        f"Reasons the gate rejected the node, counted by rule ({', '.join(get_args(Rule))}).",
        (
            (labels(node=v.node, rule=rule), float(n))
            for v in result.nodes
            for rule, n in sorted(Counter(r.rule for r in v.reasons).items())
        ),
    )
    x.family(
        "fleetforge_node_role",
        "1 for the role the fleet verdict gave an accepted node: job or spare.",
        ((labels(node=v.node, role=v.role), 1.0) for v in result.nodes if v.role is not None),
    )
    # Only the metrics the gate reports on (GateResult.reported): one series per node and metric of
    # the vocabulary or the spec, never one per name a node made up.
    x.family(
        "fleetforge_metric",
        "Burn-in measurement of the node; the metric label's suffix names the unit (e.g. _gbps).",
        (
            (labels(node=v.node, metric=m), value)
            for v in result.nodes
            for m, value in sorted(v.metrics.items())
            if result.reported(m)
        ),
    )
    stats = [(s.metric, s) for s in result.reported_stats()]
    x.family(
        "fleetforge_metric_median",
        "Fleet median of the metric over the nodes that measured it.",
        ((labels(metric=m), s.median) for m, s in stats if s.median is not None),
    )
    x.family(
        "fleetforge_metric_mad",
        "Fleet median absolute deviation of the metric, scaled by 1.4826.",
        ((labels(metric=m), s.mad) for m, s in stats if s.mad is not None),
    )
    x.family(
        "fleetforge_metric_limit",
        "Absolute limit from the SKU reference or the spec: a floor, or a ceiling for "
        "lower-is-better metrics (the kind label says which).",
        (
            (labels(metric=m, kind="floor" if s.higher_is_better else "ceiling"), s.limit)
            for m, s in stats
            if s.limit is not None
        ),
    )
    x.family(
        "fleetforge_metric_outlier_threshold",
        "Fleet-relative outlier threshold: a node below it (above it, for lower-is-better "
        "metrics) is rejected.",
        ((labels(metric=m), s.outlier_threshold) for m, s in stats if s.outlier_threshold is not None),
    )
    counts = {"judged": f.judged, "accepted": len(f.accepted), "rejected": len(f.rejected)}
    if f.required is not None:
        counts |= {"required": f.required, "job": len(f.job), "spare": len(f.spare)}
    x.family(
        "fleetforge_fleet_nodes",
        "Nodes of this gate run by state.",
        ((labels(state=state), float(n)) for state, n in counts.items()),
    )
    if f.ready is not None:
        x.family(
            "fleetforge_fleet_ready",
            "1 if at least the spec's `nodes` nodes were accepted, so the job can land; 0 if not.",
            [(labels(), 1.0 if f.ready else 0.0)],
        )
    return "\n".join(x.lines) + "\n"
