"""fabric: high-speed NIC ports vs the SKU (state and link rate from sysfs), and loopback write
bandwidth per port with perftest's ib_write_bw when it is installed.

InfiniBand, RoCE (GCP RDMA) and EFA ports are RDMA devices under /sys/class/infiniband; GCP's
GPUDirect-TCPX/TCPXO NICs are gVNIC interfaces under /sys/class/net. A node passes when at least
the SKU's NIC count is ACTIVE at the catalog's line rate; down or slow ports beyond that count
(a storage NIC's unused second port) are noted, not failed.

InfiniBand and RoCE ports are told apart by link layer, EFA ports by their device's kernel driver
(efa), never by name: the kernel names them efa_N, but rdma-core's udev rules rename them to
PCI-path names (rdmap115s0 for 0000:73:00.0) on AWS.
"""

from __future__ import annotations

from typing import Any

from fleet.catalog import Sku
from validation.burnin.backends.base import Backend
from validation.burnin.context import CheckContext
from validation.burnin.outcome import CheckOutcome, error, judge
from validation.burnin.parsers.perftest import bw_average_gbitps
from validation.burnin.registry import Check, Raw, register

# Link rates are exact (400, 200, 100 Gb/s); allow float noise from sysfs "Gb/sec" parsing.
_RATE_SLACK = 0.99
# The kernel driver of an EFA device: what its sysfs device/driver link resolves to.
_EFA_DRIVER = "efa"


@register
class Fabric(Check):
    name = "fabric"
    description = "InfiniBand / EFA / RoCE / gVNIC ports: state, rate and count vs the SKU; perftest loopback"
    order = 70
    timeouts = {"quick": 180.0, "standard": 300.0, "extended": 600.0}
    level_params = {
        "quick": {"loopback_seconds": 2.0},
        "standard": {"loopback_seconds": 5.0},
        "extended": {"loopback_seconds": 10.0},
    }

    def applies_to(self, sku: Sku) -> str | None:
        if sku.fabric.nics == 0:
            return f"{sku.sku} has no high-speed fabric NICs"
        if sku.fabric.kind == "ici":
            return "TPU ICI links are not visible to the host; the collectives check exercises them"
        return None

    def collect(self, backend: Backend, ctx: CheckContext) -> Raw:
        return backend.fabric(float(self.params(ctx)["loopback_seconds"]))

    def parse(self, raw: Raw, ctx: CheckContext) -> CheckOutcome:
        fabric = ctx.sku.fabric
        ports, expected, label = _candidates(raw, ctx.sku)
        if not ports:
            return error(
                f"no {label} found; {ctx.sku.sku} has {fabric.nics} x {fabric.gbps_per_nic:g} Gb/s"
                + (f"; {_rdma_devices_seen(raw)}" if fabric.kind == "efa" else "")
            )
        active = [p for p in ports if p["state"] == "ACTIVE"]
        full = [p for p in active if (p["rate_gbitps"] or 0) >= fabric.gbps_per_nic * _RATE_SLACK]
        faults: list[str] = []
        notes: list[str] = []
        problems = [_describe(p, fabric.gbps_per_nic) for p in ports if p not in full]
        if fabric.kind == "efa":
            # What could not be read is not a pass; say so beside a shortfall it may explain.
            problems += [
                f"{dev}: driver not readable, not counted as an EFA port"
                for dev, driver in _rdma_devices(raw).items()
                if driver is None
            ]
        if len(full) < expected:
            faults.append(
                f"{len(full)} of {expected} expected {label} ACTIVE at {fabric.gbps_per_nic:g} Gb/s "
                f"({len(active)} active)"
            )
            faults += problems
        else:
            notes += [f"beyond the SKU's {expected}: {p}" for p in problems]
        metrics: dict[str, float] = {"fabric_ports_active": float(len(active))}
        per_device: dict[str, list[float]] = {}
        rates = sorted(
            (float(p["rate_gbitps"]) for p in active if p["rate_gbitps"] is not None), reverse=True
        )
        if rates:
            # The slowest of the ports the SKU counts on; extra slower ports do not drag it down.
            metrics["fabric_port_rate_gbitps"] = rates[min(expected, len(rates)) - 1]
            per_device["fabric_port_rate_gbitps"] = rates
        elif active:
            notes.append(f"{label}: link rate not reported")
        loop = _loopback(raw, faults, notes)
        if loop:
            metrics["fabric_loopback_gbitps"] = min(loop)
            per_device["fabric_loopback_gbitps"] = loop
        return judge(ctx, metrics, per_device=per_device, faults=faults, notes=notes)


def _candidates(raw: Raw, sku: Sku) -> tuple[list[dict[str, Any]], int, str]:
    """The ports that carry this SKU's fabric, how many the SKU expects, and what to call them."""
    fabric = sku.fabric
    if fabric.kind in {"gpudirect-tcpx", "gpudirect-tcpxo", "ethernet"}:
        driver = "gve" if fabric.nic_kind == "gvnic" else None
        nics = [n for n in raw.get("net") or [] if driver is None or n.get("driver") == driver]
        ports = [
            {
                "name": n["name"],
                "state": "ACTIVE"
                if n.get("operstate") == "up"
                else str(n.get("operstate", "unknown")).upper(),
                "phys_state": "",
                "rate_gbitps": n["speed_mbitps"] / 1000 if (n.get("speed_mbitps") or 0) > 0 else None,
            }
            for n in nics
        ]
        # GPUDirect-TCPX(O) counts the host gVNIC beside the GPU NICs; all carry the same driver.
        return ports, fabric.nics + (fabric.host_nics if driver else 0), f"{driver or 'ethernet'} NICs"
    layer = {"infiniband": "InfiniBand", "gpudirect-rdma": "Ethernet"}.get(fabric.kind)
    ports = []
    for p in raw.get("ports") or []:
        if fabric.kind == "efa":
            if p.get("driver") != _EFA_DRIVER:
                continue
        elif p.get("link_layer") != layer:
            continue
        ports.append({**p, "name": f"{p['device']} port {p['port']}"})
    label = {"efa": "EFA ports", "infiniband": "InfiniBand ports", "gpudirect-rdma": "RoCE ports"}[
        fabric.kind
    ]
    return ports, fabric.nics, label


def _rdma_devices(raw: Raw) -> dict[str, str | None]:
    """Each RDMA device the probe saw and its kernel driver (None: not readable)."""
    devices: dict[str, str | None] = {}
    for p in raw.get("ports") or []:
        driver = p.get("driver")
        devices.setdefault(str(p["device"]), str(driver) if driver else None)
    return devices


def _rdma_devices_seen(raw: Raw) -> str:
    devices = _rdma_devices(raw)
    if not devices:
        return "no RDMA devices under /sys/class/infiniband"
    drivers = ", ".join(f"{dev} (driver {driver or 'not readable'})" for dev, driver in devices.items())
    count = f"{len(devices)} RDMA device{'s' if len(devices) != 1 else ''}"
    return f"{count} seen, none with driver {_EFA_DRIVER}: {drivers}"


def _describe(port: dict[str, Any], want: float) -> str:
    parts = [f"{port['name']}: state {port['state']}"]
    if port.get("phys_state"):
        parts.append(f"physical {port['phys_state']}")
    rate = port.get("rate_gbitps")
    parts.append(f"rate {rate:g} Gb/s (want {want:g})" if rate is not None else "rate unknown")
    return ", ".join(parts)


def _loopback(raw: Raw, faults: list[str], notes: list[str]) -> list[float]:
    perftest = raw.get("perftest")
    if not raw.get("loopback"):
        if perftest and not str(perftest).startswith("/"):
            notes.append(str(perftest))
        return []
    values = []
    for run in raw["loopback"]:
        where = f"{run['device']} port {run['port']}"
        if run.get("rc") != 0:
            faults.append(
                f"{where}: ib_write_bw loopback failed: {str(run.get('output', ''))[-200:].strip()}"
            )
            continue
        try:
            values.append(bw_average_gbitps(run["output"]))
        except ValueError as exc:
            faults.append(f"{where}: {exc}")
    return values
