"""host_device: pinned host-to-device and device-to-host copy bandwidth, one device at a time."""

from __future__ import annotations

from fleet.catalog import Sku
from validation.burnin.backends.base import Backend
from validation.burnin.context import CheckContext
from validation.burnin.outcome import CheckOutcome, judge
from validation.burnin.registry import Check, Raw, register


@register
class HostDevice(Check):
    name = "host_device"
    description = "pinned H2D / D2H copy bandwidth per device"
    order = 50
    timeouts = {"quick": 180.0, "standard": 300.0, "extended": 900.0}
    level_params = {
        "quick": {"seconds": 0.5},
        "standard": {"seconds": 2.0},
        "extended": {"seconds": 10.0},
    }
    size_params = {"bytes": 2**20}

    def applies_to(self, sku: Sku) -> str | None:
        if sku.accelerators_per_node == 0:
            return f"{sku.sku} has no accelerator: host-device copies do not exist"
        return None

    def collect(self, backend: Backend, ctx: CheckContext) -> Raw:
        p = self.params(ctx)
        return backend.host_device(p.get("bytes"), float(p["seconds"]))

    def parse(self, raw: Raw, ctx: CheckContext) -> CheckOutcome:
        devices = raw.get("devices") or []
        metrics: dict[str, float] = {}
        per_device: dict[str, list[float]] = {}
        for key in ("h2d_gbps", "d2h_gbps"):
            values = [float(d[key]) for d in devices if d.get(key) is not None]
            if values:
                metrics[key] = min(values)
                per_device[key] = values
        notes = [f"{raw['bytes'] / 2**20:.0f} MiB pinned buffers"] if raw.get("bytes") else []
        return judge(ctx, metrics, per_device=per_device, notes=notes, required=["h2d_gbps", "d2h_gbps"])
