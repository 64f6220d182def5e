"""compute: dense GEMM TFLOP/s per device and dtype, on random data in rotating buffers, with
the products checked against a float64 reference to catch silent data corruption.

Raw: {"results": [{"dtype", "n", "devices": [{"device", "tflops", "max_scaled_err",
"nonfinite", "checksum"?}]}], "unsupported": {dtype: reason}}. `max_scaled_err` is the largest
|C - ref| / sum_k |a_ik b_kj| over the sampled rows: rounding keeps it near the dtype's unit
round-off; a flipped bit or a bad multiplier lands far above the tolerance.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from validation.burnin.backends.base import Backend
from validation.burnin.checks._util import device_label
from validation.burnin.context import CheckContext
from validation.burnin.outcome import CheckOutcome, judge
from validation.burnin.registry import Check, Raw, register

DTYPE_ORDER = ("bf16", "fp16", "fp8", "fp32")
# Scaled-error tolerance per dtype: a few units of the output's round-off plus accumulation.
TOLERANCE = {"fp32": 1e-3, "bf16": 2e-2, "fp16": 5e-3, "fp8": 6e-2}


def metric_name(dtype: str) -> str:
    return f"gemm_{dtype}_tflops"


@register
class Compute(Check):
    name = "compute"
    description = "GEMM TFLOP/s per device at bf16 / fp16 / fp8 / fp32, results checked for corruption"
    order = 30
    timeouts = {"quick": 240.0, "standard": 600.0, "extended": 1800.0}
    level_params = {
        "quick": {"seconds": 1.0, "buffers": 4},
        "standard": {"seconds": 5.0, "buffers": 4},
        "extended": {"seconds": 30.0, "buffers": 8},
    }
    size_params = {"n": 256}

    def collect(self, backend: Backend, ctx: CheckContext) -> Raw:
        p = self.params(ctx)
        wanted = set(backend.gemm_dtypes()) | {d for d in DTYPE_ORDER if metric_name(d) in ctx.sku.reference}
        dtypes = [d for d in DTYPE_ORDER if d in wanted]
        return backend.gemm(dtypes, p.get("n"), float(p["seconds"]), int(p["buffers"]))

    def parse(self, raw: Raw, ctx: CheckContext) -> CheckOutcome:
        metrics: dict[str, float] = {}
        per_device: dict[str, list[float]] = {}
        faults: list[str] = []
        notes: list[str] = []
        for result in raw.get("results") or []:
            dtype = str(result["dtype"])
            devices: list[dict[str, Any]] = result.get("devices") or []
            if not devices:
                continue
            name = metric_name(dtype)
            values = [float(d["tflops"]) for d in devices]
            metrics[name] = min(values)
            if len(devices) > 1:
                per_device[name] = values
            tol = TOLERANCE.get(dtype, 2e-2)
            for d in devices:
                who = device_label(ctx.sku, d.get("device"))
                if d.get("nonfinite"):
                    faults.append(
                        f"{who} {dtype}: {d['nonfinite']} NaN/Inf values in a product of finite inputs"
                    )
                err = d.get("max_scaled_err")
                if err is None:
                    faults.append(f"{who} {dtype}: product was not verified")
                elif float(err) > tol:
                    faults.append(
                        f"{who} {dtype}: product differs from the float64 reference by {float(err):.2e} "
                        f"(tolerance {tol:.0e}): silent data corruption"
                    )
            faults += _peer_outliers(ctx, dtype, devices)
            notes.append(f"{dtype}: n={result.get('n')}, {len(devices)} device(s)")
        for dtype, why in (raw.get("unsupported") or {}).items():
            notes.append(f"{dtype} not measured: {why}")
        if raw.get("threads"):
            notes.append(f"BLAS threads: {raw['threads']}")
        required = [m for m in ctx.sku.reference if m.startswith("gemm_") and m.endswith("_tflops")]
        return judge(ctx, metrics, per_device=per_device, faults=faults, notes=notes, required=required)


def _peer_outliers(ctx: CheckContext, dtype: str, devices: list[dict[str, Any]]) -> list[str]:
    """Same seed, same shapes, same library: identical devices compute bit-identical products.
    A device whose checksum differs from a clear majority computed something else."""
    sums = [d.get("checksum") for d in devices]
    if len(devices) < 3 or any(s is None for s in sums):
        return []
    common, count = Counter(sums).most_common(1)[0]
    if count <= len(devices) // 2:
        return []  # no majority: the library was not deterministic here; nothing to judge
    return [
        f"{device_label(ctx.sku, d.get('device'))} {dtype}: product checksum {d['checksum']!r} differs from "
        f"{count} of {len(devices)} peers ({common!r})"
        for d in devices
        if d["checksum"] != common
    ]
