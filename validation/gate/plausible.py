"""Plausibility: values no healthy measurement can take reject the node as `implausible`.

A burn-in that reports a negative count, a fault counter above zero in a `pass`, a ratio above 1
or ten times what the hardware can do is broken or lying; either way the number cannot be
compared with anything, so it leaves the fleet statistics and the node is rejected with the
value measured and the bound it broke. The rules run over the gate's node x metric matrix, so
checking 10,000 nodes costs a few vectorised comparisons.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from fleet.catalog import ReferenceFigure, Sku
from fleet.metrics import Metric
from validation.gate.model import NodeVerdict, Reason

FloatArray = npt.NDArray[np.float64]

# A value beyond this multiple of the SKU's reference figure is no measurement of that hardware.
CEILING_FACTOR = 10.0
# Counters the health check raises a fault for whenever they are above zero, so a `pass` carrying
# one contradicts itself. xid_errors is not among them: application XIDs are counted but only noted.
FAULT_COUNTERS = frozenset(
    {
        "ecc_uncorrectable",
        "remapped_rows_pending",
        "remapped_rows_failed",
        "mce_errors",
        "pcie_degraded_links",
        "nvlink_down_links",
        "gpu_fault_events",  # SXid, fallen off the bus, RmInitAdapter failed: each a health fault
        "dcgm_diag_failed_tests",  # each failed diagnostic test is a fault of the DCGM check
    }
)
RATIO_MAX = 1.0
# Units that can go below zero on real hardware (degrees Celsius), down to their physical floor;
# every other quantity cannot go below zero.
_SIGNED_UNITS = {"C": -273.15}


@dataclass(frozen=True, slots=True)
class _Bound:
    low: float
    high: float
    what: str  # why the bound exists, for the reason's message


def _bounds(names: Sequence[str], vocabulary: Mapping[str, Metric], sku: Sku | None) -> list[_Bound]:
    references = sku.reference if sku is not None else {}
    out = []
    for name in names:
        metric = vocabulary.get(name)
        low, high, what = -np.inf, np.inf, ""
        if metric is not None and metric.unit in _SIGNED_UNITS:
            low, what = _SIGNED_UNITS[metric.unit], f"no {metric.unit} value is below absolute zero"
        elif metric is not None:
            low, what = 0.0, f"a {metric.unit} value cannot be negative"
        if metric is not None and metric.unit == "ratio":
            high, what = RATIO_MAX, f"a ratio is at most {RATIO_MAX:g}"
        ref = references.get(name)
        if ref is not None and _pins_hardware(sku, ref) and ref.value * CEILING_FACTOR < high:
            high = ref.value * CEILING_FACTOR
            what = f"{CEILING_FACTOR:g} x the {sku.sku if sku else ''} reference {ref.value:g} ({ref.kind})"
        out.append(_Bound(low, high, what))
    return out


def _pins_hardware(sku: Sku | None, ref: ReferenceFigure) -> bool:
    """Whether the reference bounds what a node of this SKU can measure. A datasheet figure is a
    peak; an accelerator SKU is one model of hardware, so its measured or threshold figures are
    too. The generic `cpu` SKU is any machine without an accelerator: its references were measured
    on one small machine (low floors), and a large server legitimately measures ten times more."""
    return ref.kind == "datasheet" or (sku is not None and sku.accelerator.kind != "cpu")


def judge_plausibility(
    judged: Sequence[NodeVerdict],
    names: Sequence[str],
    values: FloatArray,
    vocabulary: Mapping[str, Metric],
    sku: Sku | None,
) -> None:
    """Add `implausible` reasons and blank the offending values (NaN) out of `values` in place."""
    if not names or not judged:
        return
    bounds = _bounds(names, vocabulary, sku)
    low = np.array([b.low for b in bounds])
    high = np.array([b.high for b in bounds])
    with np.errstate(invalid="ignore"):
        out_of_range = (values < low) | (values > high)
    hits: list[tuple[int, int, str, str]] = []
    for i, j in zip(*np.nonzero(out_of_range), strict=True):
        b = bounds[j]
        allowed = f">= {b.low:g}" if values[i, j] < b.low else f"<= {b.high:.6g}"
        hits.append((int(i), int(j), allowed, b.what))
    counters = [j for j, name in enumerate(names) if name in FAULT_COUNTERS]
    if counters:
        with np.errstate(invalid="ignore"):
            raised = values[:, counters] > 0
        for i, k in zip(*np.nonzero(raised), strict=True):
            j = counters[k]
            v = judged[i]
            check = v.metric_checks.get(names[j])
            outcome = v.checks.get(check) if check is not None else None
            if outcome is not None and outcome.state == "pass":
                hits.append((int(i), j, "0 in a pass", "the check passed while its fault counter is raised"))
    for i, j, allowed, what in hits:
        v, metric = judged[i], names[j]
        x = float(values[i, j])
        if np.isnan(x):
            continue  # already reported by an earlier rule on the same value
        check = v.metric_checks.get(metric)
        v.reasons.append(
            Reason(
                "implausible",
                check,
                metric,
                x,
                allowed,
                f"{check}: {metric} = {x:g} is implausible (allowed {allowed}: {what})",
            )
        )
        values[i, j] = np.nan
