"""efficiency: GEMM throughput per watt under a short sustained load. A node that needs more
power for the same work (or, in stress, runs hotter) is cooling or delivering power badly; the
fleet gate sees it against the other nodes' figures.

Raw: load_and_sample's (see stress). Power comes from energy counters when present (NVML total
energy, RAPL), else from the mean of instantaneous power samples.
"""

from __future__ import annotations

from typing import Any

from validation.burnin.backends.base import Backend
from validation.burnin.checks._util import device_label
from validation.burnin.context import CheckContext
from validation.burnin.outcome import CheckOutcome, error, judge, skip
from validation.burnin.registry import Check, Raw, register


@register
class Efficiency(Check):
    name = "efficiency"
    description = "GEMM TFLOP/s per watt drawn under load"
    order = 100
    timeouts = {"quick": 60.0, "standard": 180.0, "extended": 480.0}
    level_params = {
        "quick": {"seconds": 3.0, "interval_s": 0.25},
        "standard": {"seconds": 30.0, "interval_s": 0.5},
        "extended": {"seconds": 120.0, "interval_s": 1.0},
    }

    def collect(self, backend: Backend, ctx: CheckContext) -> Raw:
        p = self.params(ctx)
        return backend.load_and_sample(float(p["seconds"]), float(p["interval_s"]), need_power=True)

    def parse(self, raw: Raw, ctx: CheckContext) -> CheckOutcome:
        if raw.get("power_unavailable"):
            return skip(str(raw["power_unavailable"]))
        work: list[dict[str, Any]] = raw.get("work") or []
        samples: list[dict[str, Any]] = raw.get("samples") or []
        per: list[float] = []
        notes: list[str] = []
        telemetry = max((len(s["devices"]) for s in samples), default=0)
        if work and telemetry != len(work):
            # Work and power are paired by device index: with other counts a GPU's TFLOP/s would be
            # divided by another GPU's watts.
            return error(f"the load ran on {len(work)} device(s), the power telemetry lists {telemetry}")
        for i, w in enumerate(work):
            who = device_label(ctx.sku, w.get("device"))
            watts = _average_watts([s for s in samples if i < len(s["devices"])], i)
            if watts is None or watts <= 0:
                return error(f"{who}: no power reading during the load")
            tflops = float(w["flops"]) / float(w["seconds"]) / 1e12
            per.append(tflops / watts)
            notes.append(f"{who}: {tflops:.3g} TFLOP/s at {watts:.0f} W")
        if not per:
            return error("the load produced no work figures")
        metrics = {"gemm_tflops_per_watt": min(per)}
        per_device = {"gemm_tflops_per_watt": per} if len(per) > 1 else {}
        return judge(
            ctx, metrics, per_device=per_device, notes=[f"power from {raw.get('power_source')}", *notes]
        )


def _average_watts(samples: list[dict[str, Any]], i: int) -> float | None:
    energy = [
        (float(s["t"]), float(s["devices"][i]["energy_j"]))
        for s in samples
        if s["devices"][i].get("energy_j") is not None
    ]
    if len(energy) >= 2 and energy[-1][0] > energy[0][0]:
        return (energy[-1][1] - energy[0][1]) / (energy[-1][0] - energy[0][0])
    watts = [float(s["devices"][i]["power_w"]) for s in samples if s["devices"][i].get("power_w") is not None]
    return sum(watts) / len(watts) if watts else None
