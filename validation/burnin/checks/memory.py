"""memory: device memory copy bandwidth per device (bytes read + written)."""

from __future__ import annotations

from validation.burnin.backends.base import Backend
from validation.burnin.checks._util import device_label
from validation.burnin.context import CheckContext
from validation.burnin.outcome import CheckOutcome, judge
from validation.burnin.registry import Check, Raw, register


@register
class Memory(Check):
    name = "memory"
    description = "device memory copy bandwidth per device, bytes read + written"
    order = 40
    timeouts = {"quick": 120.0, "standard": 300.0, "extended": 900.0}
    level_params = {
        "quick": {"seconds": 1.0},
        "standard": {"seconds": 5.0},
        "extended": {"seconds": 20.0},
    }
    size_params = {"bytes": 2**20}

    def collect(self, backend: Backend, ctx: CheckContext) -> Raw:
        p = self.params(ctx)
        return backend.mem_copy(p.get("bytes"), float(p["seconds"]))

    def parse(self, raw: Raw, ctx: CheckContext) -> CheckOutcome:
        devices = raw.get("devices") or []
        faults = [
            f"{device_label(ctx.sku, d.get('device'))}: copied data differs from its source"
            for d in devices
            if d.get("intact") is False
        ]
        metrics: dict[str, float] = {}
        per_device: dict[str, list[float]] = {}
        if devices:
            values = [float(d["gbps"]) for d in devices]
            metrics["mem_copy_gbps"] = min(values)
            if len(values) > 1:
                per_device["mem_copy_gbps"] = values
        notes = [f"{devices[0].get('bytes', 0) / 2**20:.0f} MiB buffers"] if devices else []
        if raw.get("threads"):
            notes.append(f"copy threads: {raw['threads']}")
        return judge(
            ctx, metrics, per_device=per_device, faults=faults, notes=notes, required=["mem_copy_gbps"]
        )
