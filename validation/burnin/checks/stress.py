"""stress: sustained load for the level's duration while sampling clocks, throttle reasons,
temperatures and power. Thermal or hardware throttling under load fails the node.

Raw (load_and_sample): {"interval_s", "seconds", "samples": [{"t", "devices": [{"clock_mhz",
"max_clock_mhz", "temp_c", "power_w", "throttle_mask" (NVML bit mask) | "throttle_ms_by" and
"throttle_count_by" (CPU cumulative counters, each package and core once; "throttle_ms" and
"throttle_count" their sums), "energy_j"}]}], "work": [{"device", "flops",
"seconds", "windows_tflops"}], "power_source", "power_unavailable"}.
"""

from __future__ import annotations

from typing import Any

from validation.burnin.backends.base import Backend
from validation.burnin.checks._util import device_label, median
from validation.burnin.context import CheckContext
from validation.burnin.outcome import CheckOutcome, error, judge
from validation.burnin.parsers import throttle
from validation.burnin.registry import Check, Raw, register

# Samples in the first part of the run show the ramp to full clocks and power, not a steady state.
RAMP_FRACTION = 0.1
# Throughput windows a run needs: the first is dropped (ramp), the ratio wants three after it.
MIN_WINDOWS = 4


@register
class Stress(Check):
    name = "stress"
    description = "sustained load: clocks, throttle reasons, temperatures, power, throughput stability"
    order = 90
    timeouts = {"quick": 90.0, "standard": 420.0, "extended": 1500.0}
    level_params = {
        "quick": {"seconds": 5.0, "interval_s": 0.5},
        "standard": {"seconds": 120.0, "interval_s": 1.0},
        "extended": {"seconds": 900.0, "interval_s": 2.0},
    }

    def collect(self, backend: Backend, ctx: CheckContext) -> Raw:
        p = self.params(ctx)
        return backend.load_and_sample(float(p["seconds"]), float(p["interval_s"]))

    def parse(self, raw: Raw, ctx: CheckContext) -> CheckOutcome:
        work: list[dict[str, Any]] = raw.get("work") or []
        samples: list[dict[str, Any]] = raw.get("samples") or []
        if not work or not samples:
            return error("the load ran but produced no samples")
        interval = float(raw["interval_s"])
        # The parameters asked for, not the load's own duration: one GEMM on a busy node overruns the
        # deadline, and a run too short by its settings must be refused whatever the machine did.
        asked = float(self.params(ctx)["seconds"])
        if asked < MIN_WINDOWS * interval:
            return error(
                f"{asked:.3g} s of load in windows of {interval:g} s: the throughput ratio needs "
                f"at least {MIN_WINDOWS} windows (seconds >= {MIN_WINDOWS} x interval_s)"
            )
        steady = [s for s in samples if s["t"] >= RAMP_FRACTION * float(raw["seconds"])] or samples
        per: dict[str, list[float]] = {}
        faults: list[str] = []
        notes: list[str] = []
        seen: set[str] = set()
        # Every device the telemetry lists is judged, whether or not the load reached it: a GPU the
        # load did not see must still show its clocks and throttle reasons, or say why it cannot.
        telemetry = max((len(s["devices"]) for s in samples), default=0)
        for i in range(max(len(work), telemetry)):
            w: dict[str, Any] = work[i] if i < len(work) else {"device": i}
            who = device_label(ctx.sku, w.get("device"))
            series = [s["devices"][i] for s in steady if i < len(s["devices"])]
            every = [s["devices"][i] for s in samples if i < len(s["devices"])]
            problems = sorted({p for x in every for p in x.get("nvml_errors") or []})
            if problems:
                # NVML answering with an error (not "not supported") about a GPU under load: the GPU
                # is lost or its state unknown, and its silence must not read as a cool, fast GPU.
                failed = sum(1 for x in every if x.get("nvml_errors"))
                faults.append(f"{who}: NVML {'; '.join(problems)[:300]} in {failed} of {len(every)} samples")
            _clock(series, per, seen)
            _throttle(who, series, every, interval, per, faults, notes, seen)
            for key, metric in (("temp_c", "temperature_max_c"), ("power_w", "power_max_w")):
                values = [float(x[key]) for x in series if x.get(key) is not None]
                if values:
                    per.setdefault(metric, []).append(max(values))
                    seen.add(key)
            windows = [float(v) for v in (w.get("windows_tflops") or [])[1:]]
            if len(windows) >= 3 and median(windows) > 0:
                per.setdefault("stress_throughput_ratio", []).append(min(windows) / median(windows))
        metrics: dict[str, float] = {}
        for metric, values in per.items():
            worst_is_max = metric in {"stress_throttle_seconds", "temperature_max_c", "power_max_w"}
            metrics[metric] = max(values) if worst_is_max else min(values)
        missing = [k for k in ("clock", "throttle", "temp_c", "power_w") if k not in seen]
        if missing:
            notes.append(f"telemetry not exposed on this node: {', '.join(missing)}")
        notes.append(f"{float(raw['seconds']):.1f} s of load, {len(samples)} samples every {interval:g} s")
        per_device = {k: v for k, v in per.items() if len(v) > 1}
        return judge(ctx, metrics, per_device=per_device, faults=faults, notes=notes)


def _clock(series: list[dict[str, Any]], per: dict[str, list[float]], seen: set[str]) -> None:
    clocks = [float(x["clock_mhz"]) for x in series if x.get("clock_mhz")]
    top = max((float(x["max_clock_mhz"]) for x in series if x.get("max_clock_mhz")), default=0.0)
    if clocks and top > 0:
        per.setdefault("stress_clock_ratio", []).append(median(clocks) / top)
        seen.add("clock")


def _throttle(
    who: str,
    series: list[dict[str, Any]],
    every: list[dict[str, Any]],
    interval: float,
    per: dict[str, list[float]],
    faults: list[str],
    notes: list[str],
    seen: set[str],
) -> None:
    masks = [int(x["throttle_mask"]) for x in series if x.get("throttle_mask") is not None]
    if masks:
        seen.add("throttle")
        bad = [set(throttle.decode(m)) & throttle.FAULTS for m in masks]
        seconds = sum(1 for b in bad if b) * interval
        per.setdefault("stress_throttle_seconds", []).append(seconds)
        reasons = sorted(set().union(*bad))
        if reasons:
            faults.append(f"{who}: {', '.join(reasons)} for {seconds:g} s under load")
        capped = sum(1 for m in masks if set(throttle.decode(m)) & throttle.NOTES)
        if capped:
            notes.append(
                f"{who}: at its software power cap in {capped} of {len(masks)} samples (normal at full load)"
            )
        return
    ms = _counter_deltas(every, "throttle_ms")
    counts = _counter_deltas(every, "throttle_count")
    if ms:
        seen.add("throttle")
        # Each counter is one core's or one package's time throttled: the longest of them is how
        # long the load ran throttled (a sum would count cores throttled together many times over).
        seconds = max(ms) / 1000
        per.setdefault("stress_throttle_seconds", []).append(seconds)
        if seconds > 0:
            faults.append(f"{who}: thermally throttled for {seconds:.2f} s under load (thermal_throttle)")
    elif counts:
        seen.add("throttle")
        events = sum(counts)
        if events > 0:
            # An event count says nothing of how long each lasted: no seconds are made up from it.
            faults.append(
                f"{who}: {events:g} thermal throttle events under load (thermal_throttle; the kernel "
                "counts events here, not their time)"
            )
        else:
            per.setdefault("stress_throttle_seconds", []).append(0.0)


def _counter_deltas(every: list[dict[str, Any]], key: str) -> list[float]:
    """How much each cumulative counter grew from the first sample to the last (never below 0).
    `<key>_by` holds each package's and core's counter once; a sample with the one figure `<key>`
    (captured before that) is read as a single counter."""
    keyed = [x[f"{key}_by"] for x in every if isinstance(x.get(f"{key}_by"), dict)]
    if len(keyed) >= 2:
        first, last = keyed[0], keyed[-1]
        return [max(0.0, float(last[k]) - float(first[k])) for k in first if k in last]
    single = [float(x[key]) for x in every if x.get(key) is not None]
    return [max(0.0, single[-1] - single[0])] if len(single) >= 2 else []
