"""inventory: accelerator count, model and memory against the SKU; versions for homogeneity."""

from __future__ import annotations

from fleet.catalog import tpu
from validation.burnin.backends.base import Backend
from validation.burnin.checks._util import device_label, versions_of
from validation.burnin.context import CheckContext
from validation.burnin.models import model_matches
from validation.burnin.outcome import CheckOutcome, judge
from validation.burnin.registry import Check, Raw, register

# NVML reports usable memory: an "80 GB" H100 shows 79.6 GiB, a "141 GB" H200 140.4 GiB.
MEMORY_TOLERANCE = 0.95
# A cloud VM's MemTotal is below the instance's nominal memory (firmware and kernel reserve some).
HOST_MEMORY_TOLERANCE = 0.90


@register
class Inventory(Check):
    name = "inventory"
    description = (
        "accelerator count, model and memory vs the SKU; driver, CUDA, VBIOS, firmware, OFED versions"
    )
    order = 10
    timeouts = {"quick": 60.0, "standard": 60.0, "extended": 120.0}

    def collect(self, backend: Backend, ctx: CheckContext) -> Raw:
        return backend.inventory()

    def parse(self, raw: Raw, ctx: CheckContext) -> CheckOutcome:
        sku = ctx.sku
        host = raw.get("host") or {}
        devices = raw.get("devices") or []
        versions = versions_of(raw.get("versions") or {})
        metrics: dict[str, float] = {}
        per_device: dict[str, list[float]] = {}
        faults: list[str] = []
        notes: list[str] = []

        if sku.accelerators_per_node > 0:
            metrics["accelerator_count"] = len(devices)
            count_fault = _count_fault(len(devices), ctx)
            if count_fault:
                faults.append(count_fault)
            for d in devices:
                if not model_matches(sku.accelerator.model, str(d.get("name", ""))):
                    faults.append(
                        f"{device_label(sku, d['index'])} is {d.get('name')!r}, not a {sku.accelerator.model}"
                    )
            for d in devices:
                faults += [f"{device_label(sku, d['index'])}: NVML {p}" for p in d.get("nvml_errors") or []]
            faults += [f"NVML {p}" for p in raw.get("nvml_errors") or []]
            # Each device with its own figure: one that reports none is a fault of its own, and
            # must not shift the others' figures onto the wrong device.
            unread = [d for d in devices if not d.get("memory_bytes")]
            faults += [f"{device_label(sku, d['index'])}: memory size not reported" for d in unread]
            mem = [(d, float(d["memory_bytes"]) / 2**30) for d in devices if d.get("memory_bytes")]
            if mem:
                if not unread:
                    per_device["accelerator_memory_gib"] = [gib for _, gib in mem]
                metrics["accelerator_memory_gib"] = min(gib for _, gib in mem)
                want = sku.accelerator.memory_gib * MEMORY_TOLERANCE
                for d, gib in mem:
                    if gib < want:
                        faults.append(
                            f"{device_label(sku, d['index'])} has {gib:.1f} GiB; {sku.accelerator.model} has "
                            f"{sku.accelerator.memory_gib:g} (at least {want:.1f} expected)"
                        )
            for key in ("vbios", "firmware"):
                seen = sorted({str(d[key]) for d in devices if d.get(key)})
                if len(seen) > 1:
                    faults.append(f"mixed {key} versions within the node: {', '.join(seen)}")
                elif seen:
                    versions[key] = seen[0]
        elif devices:
            notes.append(f"{len(devices)} accelerators present on a {sku.sku} node; they are not measured")

        if host:
            # A figure that could not be read is left out and named, never recorded as 0.
            cpus, memory = _positive(host.get("cpus")), _positive(host.get("memory_bytes"))
            if cpus is None:
                faults.append("host CPU count not readable")
            else:
                metrics["host_cpus"] = cpus
            if memory is None:
                faults.append("host memory size not readable (MemTotal in /proc/meminfo)")
            else:
                metrics["host_memory_gib"] = memory / 2**30
            if sku.host is not None:
                if "host_cpus" in metrics and metrics["host_cpus"] < sku.host.vcpus:
                    faults.append(f"{metrics['host_cpus']:.0f} CPUs; {sku.sku} has {sku.host.vcpus}")
                if (
                    "host_memory_gib" in metrics
                    and metrics["host_memory_gib"] < sku.host.memory_gib * HOST_MEMORY_TOLERANCE
                ):
                    faults.append(
                        f"{metrics['host_memory_gib']:.0f} GiB host memory; {sku.sku} has {sku.host.memory_gib}"
                    )
            for key, label in (
                ("cpu_model", "cpu_model"),
                ("microcode", "microcode"),
                ("bios_version", "bios"),
            ):
                if host.get(key):
                    versions[label] = str(host[key])
            if sku.accelerator.kind == "cpu" and "firmware" not in versions:
                # A CPU node's firmware for the homogeneity rule: BIOS and CPU microcode.
                fw = "; ".join(f"{k} {versions[k]}" for k in ("bios", "microcode") if k in versions)
                if fw:
                    versions["firmware"] = fw
            if host.get("usable_cpus") and host["usable_cpus"] != host.get("cpus"):
                notes.append(
                    f"{host['usable_cpus']} of {host.get('cpus')} CPUs usable by this process (affinity)"
                )
        return judge(ctx, metrics, per_device=per_device, faults=faults, notes=notes, versions=versions)


def _positive(value: object) -> float | None:
    """A host figure as a number, or None when it was not read (missing, zero, not a number)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        return None
    return float(value)


def _count_fault(found: int, ctx: CheckContext) -> str | None:
    """What is wrong with the node's accelerator count, or None. The count the run was told (a TPU
    VM's chips follow its slice: the fleet spec says) must match exactly; untold, a TPU VM may have
    any count a VM of its generation has (v5e/v6e 1, 4 or 8; v5p 4), and any other SKU its own."""
    sku = ctx.sku
    if ctx.expected_accelerators is not None:
        if found == ctx.expected_accelerators:
            return None
        return (
            f"{found} accelerators found; each {sku.sku} VM of this fleet's slices has "
            f"{ctx.expected_accelerators}"
            if sku.is_tpu
            else f"{found} accelerators found; this {sku.sku} node should have {ctx.expected_accelerators}"
        )
    allowed = tpu.VM_CHIPS.get(sku.accelerator.generation, ()) if sku.is_tpu else ()
    allowed = allowed or (sku.accelerators_per_node,)
    if found in allowed:
        return None
    if len(allowed) == 1:
        return f"{found} accelerators found; {sku.sku} has {allowed[0]}"
    return (
        f"{found} accelerators found; a {sku.sku} VM has {', '.join(map(str, allowed[:-1]))} or "
        f"{allowed[-1]} (its slice decides: pass the fleet spec, --spec, to require that count)"
    )
