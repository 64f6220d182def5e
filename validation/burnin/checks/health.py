"""health: ECC, remapped rows / retired pages, XIDs and machine checks in the kernel log, PCIe
link generation and width, NVLink state, temperatures.

It runs twice: first (`health`), before any load, so a broken node fails fast; and last
(`health_after_load`), after the compute, memory, collectives and stress checks, to read what
their load raised. An uncorrectable ECC error, a pending row remap or an XID the load caused leaves
the GPU still running work ("a pending remapping won't affect future work on the GPU", NVML's
nvmlDeviceGetRemappedRows), so only a second read finds it. Both judge the same way; counts only
grow, and the gate keeps the worse of two figures of one metric.

Raw shape (every backend): {"devices": [per-device NVML facts], "kernel_log": {...},
"edac": {...}, "thermal": [...]}. Per-device facts a backend cannot read are None and are
simply not judged. The kernel log is mandatory on every node: without it XIDs (accelerator nodes)
and machine checks (every node) cannot be ruled out, so health is an `error` (not measured; a
`--resume` reads it again), or a `fail` when what was read found a fault anyway. What was measured
stays in the record either way.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from validation.burnin.backends.base import Backend
from validation.burnin.checks._util import device_label
from validation.burnin.context import CheckContext
from validation.burnin.outcome import CheckOutcome, judge
from validation.burnin.parsers.kernlog import (
    APPLICATION_XIDS,
    normalise_bus,
    parse_gpu_faults,
    parse_machine_checks,
    parse_xids,
)
from validation.burnin.registry import Check, Raw, register

# The kernel log can hold thousands of repeats of one fault; list a few, count all.
_MAX_LISTED = 10


@register
class Health(Check):
    name = "health"
    description = "ECC, remapped rows, XIDs / machine checks, PCIe links, NVLink, temperatures"
    order = 20
    timeouts = {"quick": 90.0, "standard": 90.0, "extended": 180.0}
    when = "at idle"

    def collect(self, backend: Backend, ctx: CheckContext) -> Raw:
        return backend.health()

    def parse(self, raw: Raw, ctx: CheckContext) -> CheckOutcome:
        faults: list[str] = []
        notes: list[str] = []
        metrics: dict[str, float] = {}
        per_device: dict[str, list[float]] = {}
        devices: list[dict[str, Any]] = raw.get("devices") or []
        if devices:
            _devices(ctx, devices, metrics, per_device, faults, notes, self.when)
        blind = _kernel_log(ctx, raw.get("kernel_log") or {}, devices, metrics, faults, notes)
        _host(raw, metrics, faults, notes)
        outcome = judge(ctx, metrics, per_device=per_device, faults=faults, notes=notes)
        if blind is None:
            return outcome
        if outcome.status == "fail":  # a fault found is an answer, whatever could not be read
            return replace(outcome, findings=[*outcome.findings, blind])
        reason = blind if outcome.status == "pass" else f"{blind}; {outcome.reason}"
        return replace(outcome, status="error", reason=reason[:500], findings=[blind, *outcome.findings])


@register
class HealthAfterLoad(Health):
    name = "health_after_load"
    description = "health read again after the load checks: what their load raised"
    order = 110
    when = "after the load checks"
    reads_the_run = True


def _devices(
    ctx: CheckContext,
    devices: list[dict[str, Any]],
    metrics: dict[str, float],
    per_device: dict[str, list[float]],
    faults: list[str],
    notes: list[str],
    when: str,
) -> None:
    sku = ctx.sku
    ecc_total = 0.0
    ecc_read = False
    pending = failed = degraded = down = 0
    temps: list[float] = []
    for d in devices:
        who = device_label(sku, d.get("index"))
        ecc = d.get("ecc") or {}
        vol, agg = ecc.get("volatile_uncorrected"), ecc.get("aggregate_uncorrected")
        if vol is not None:
            ecc_read = True
            ecc_total += vol
            if vol > 0:
                faults.append(f"{who}: {vol:g} uncorrectable ECC errors since the driver loaded")
        if agg is not None and agg > (vol or 0):
            notes.append(f"{who}: {agg:g} uncorrectable ECC errors over its lifetime (aggregate)")
        mode = d.get("ecc_mode")
        if mode is not None and not mode.get("current"):
            # A data-centre GPU runs with ECC on; off, a flipped bit in HBM corrupts training silently.
            faults.append(f"{who}: ECC is disabled (nvidia-smi -e 1, then a GPU reset)")
        elif mode is not None and not mode.get("pending"):
            notes.append(f"{who}: ECC is set to turn off at the next GPU reset")
        rows = d.get("remapped_rows")
        if rows is not None:
            if rows.get("pending"):
                pending += 1
                faults.append(f"{who}: row remapping pending (reset the GPU to apply it)")
            if rows.get("failure"):
                failed += 1
                faults.append(f"{who}: row remapping failed (no spare rows left: replace the GPU)")
            if rows.get("uncorrectable"):
                notes.append(f"{who}: {rows['uncorrectable']} rows remapped after uncorrectable errors")
        elif d.get("retired_pages_pending"):
            pending += 1
            faults.append(f"{who}: retired pages pending (reset the GPU to retire them)")
        degraded += _pcie(who, d.get("pcie"), faults, notes)
        if "nvlink" in d:
            links = d["nvlink"] or []
            for link in links:
                if not link.get("up"):
                    down += 1
                    faults.append(f"{who}: NVLink {link.get('link')} is down")
            if sku.nvswitch and not links:
                down += 1
                faults.append(f"{who}: no NVLink reported on an NVSwitch SKU")
        for problem in d.get("nvml_errors") or []:
            faults.append(f"{who}: NVML {problem}")
        temp = d.get("temp_c")
        if temp is not None:
            temps.append(float(temp))
            limit = d.get("slowdown_temp_c")
            if limit and temp >= limit:
                faults.append(f"{who}: {temp:g} C {when}, at or above its slowdown temperature {limit:g} C")
    if ecc_read:
        metrics["ecc_uncorrectable"] = ecc_total
    if any(d.get("remapped_rows") is not None or d.get("retired_pages_pending") is not None for d in devices):
        metrics["remapped_rows_pending"] = float(pending)
        metrics["remapped_rows_failed"] = float(failed)
    if any(d.get("pcie") for d in devices):
        metrics["pcie_degraded_links"] = float(degraded)
    if any("nvlink" in d for d in devices) and (sku.nvswitch or any(d.get("nvlink") for d in devices)):
        metrics["nvlink_down_links"] = float(down)
    if temps:
        metrics["temperature_max_c"] = max(temps)
        if len(temps) == len(devices):
            per_device["temperature_max_c"] = temps


def _pcie(who: str, link: dict[str, Any] | None, faults: list[str], notes: list[str]) -> int:
    """Judge one device's PCIe link; returns 1 when it is degraded."""
    if not link:
        return 0
    bad = False
    # GPUs narrow the link and drop its generation when idle to save power ("may be reduced when the
    # GPU is not in use", nvidia-smi --help-query-gpu on pcie.link.width.current): only a link that
    # stays narrow or slow while the device is busy is downtrained.
    width, max_width = link.get("cur_width"), link.get("max_width")
    if width and max_width and width < max_width:
        if link.get("under_load"):
            faults.append(f"{who}: PCIe link x{width} under load, maximum x{max_width} (downtrained)")
            bad = True
        else:
            notes.append(f"{who}: PCIe link x{width} at idle (maximum x{max_width}); not judged without load")
    gen, max_gen, gpu_max = link.get("cur_gen"), link.get("max_gen"), link.get("gpu_max_gen")
    if max_gen and gpu_max and max_gen < gpu_max:
        faults.append(f"{who}: the slot limits PCIe to gen {max_gen}; the device supports gen {gpu_max}")
        bad = True
    if gen and max_gen and gen < max_gen:
        if link.get("under_load"):
            faults.append(f"{who}: PCIe gen {gen} under load, maximum gen {max_gen} (downtrained)")
            bad = True
        else:
            notes.append(f"{who}: PCIe gen {gen} at idle (maximum {max_gen}); not judged without load")
    return 1 if bad else 0


def _kernel_log(
    ctx: CheckContext,
    log: dict[str, Any],
    devices: list[dict[str, Any]],
    metrics: dict[str, float],
    faults: list[str],
    notes: list[str],
) -> str | None:
    """Judge the kernel log; returns what could not be ruled out when it was not readable."""
    if not log.get("source"):
        message = log.get("error") or "kernel log not readable"
        if ctx.sku.accelerator.kind == "gpu":
            return f"{message}: XID errors and machine checks cannot be ruled out"
        return f"{message}: machine-check errors cannot be ruled out"
    lines = log.get("lines") or []
    _machine_checks(lines, str(log["source"]), metrics, faults, notes)
    if ctx.sku.accelerator.kind != "gpu":
        return None
    # Full PCI addresses (domain included): on multi-domain hosts 0002:01:00 and 0003:01:00 are
    # different GPUs.
    by_bus = {normalise_bus(str(d["bus_id"])): d.get("index") for d in devices if d.get("bus_id")}

    def who(bus: str | None) -> str:
        if bus is None:
            return "a GPU (the line names none)"
        index = by_bus.get(bus)
        return f"{device_label(ctx.sku, index)} ({bus})" if index is not None else f"PCI {bus}"

    xids = parse_xids(lines)
    metrics["xid_errors"] = float(len(xids))
    listed = 0
    for x in xids:
        text = f"{who(x.bus)}: XID {x.code}" + (f" {x.text[:120]}" if x.text else "")
        if x.code in APPLICATION_XIDS:
            notes.append(text + " (usually an application error)")
        elif listed < _MAX_LISTED:
            faults.append(text)
            listed += 1
    hardware = sum(1 for x in xids if x.code not in APPLICATION_XIDS)
    if hardware > listed:
        faults.append(f"... {hardware - listed} more XID errors")
    gpu_faults = parse_gpu_faults(lines)
    metrics["gpu_fault_events"] = float(len(gpu_faults))
    for f in gpu_faults[:_MAX_LISTED]:
        if f.kind == "sxid":
            faults.append(f"NVSwitch PCI {f.bus}: SXid {f.code} {f.text[-120:]}")
        elif f.kind == "fallen_off_bus":
            faults.append(f"{who(f.bus)}: fell off the bus (no XID logged)")
        else:
            faults.append(f"{who(f.bus)}: the driver could not initialise it (RmInitAdapter failed)")
    if len(gpu_faults) > _MAX_LISTED:
        faults.append(f"... {len(gpu_faults) - _MAX_LISTED} more GPU / NVSwitch faults")
    return None


def _machine_checks(
    lines: list[str], source: str, metrics: dict[str, float], faults: list[str], notes: list[str]
) -> None:
    records = parse_machine_checks(lines)
    uncorrected = [r for r in records if r.severity == "uncorrected"]
    metrics["mce_errors"] = float(len(uncorrected))
    for r in uncorrected[:_MAX_LISTED]:
        faults.append(f"uncorrected hardware error ({r.evidence}): {r.text[-160:]}")
    if len(uncorrected) > _MAX_LISTED:
        faults.append(f"... {len(uncorrected) - _MAX_LISTED} more uncorrected hardware errors")
    corrected = sum(1 for r in records if r.severity == "corrected")
    if corrected:
        notes.append(f"{corrected} corrected hardware errors in the kernel log ({source})")
    # The kernel handed these to mcelog / rasdaemon without printing a bank status. Corrected
    # errors are routinely logged this way; an uncorrected one that the kernel could not recover
    # from panics instead, and a recovered one (SRAO/SRAR) prints its status.
    undecoded = sum(1 for r in records if r.severity == "undecoded")
    if undecoded:
        notes.append(
            f"{undecoded} machine-check events logged without a status in the kernel log ({source}): "
            "read them with mcelog or ras-mc-ctl"
        )


def _host(raw: Raw, metrics: dict[str, float], faults: list[str], notes: list[str]) -> None:
    controllers = (raw.get("edac") or {}).get("controllers") or []
    if controllers:
        ue = sum(float(c.get("ue_count") or 0) for c in controllers)
        ce = sum(float(c.get("ce_count") or 0) for c in controllers)
        metrics["ecc_uncorrectable"] = metrics.get("ecc_uncorrectable", 0.0) + ue
        if ue:
            faults.append(f"host memory: {ue:g} uncorrectable ECC errors (EDAC)")
        if ce:
            notes.append(f"host memory: {ce:g} corrected ECC errors (EDAC)")
    zones = raw.get("thermal") or []
    if zones and not raw.get("devices"):
        metrics["temperature_max_c"] = max(float(z["temp_c"]) for z in zones)
