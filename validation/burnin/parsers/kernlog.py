"""Kernel log lines: NVIDIA XID events, other GPU / NVSwitch faults, and machine-check / EDAC /
APEI hardware-error records.

Every parser here searches within a line, so the prefix a log source adds does not matter:
dmesg ("[ 12.3]"), dmesg -T ("[Sun Feb 23 16:24:18 2025]"), dmesg --decode --time-format iso
("kern  :warn  : 2025-01-21T04:41:44,283302+00:00"), journalctl / syslog ("host kernel: ..."),
/dev/kmsg records ("6,3964,206764307,-;") and dmesg -r ("<6>[ 13.86]").
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

# What collect keeps from the kernel log; the parsers below apply the precise patterns.
RELEVANT = re.compile(
    r"NVRM: Xid|SXid|NVRM: The NVIDIA GPU|fallen off the bus|RmInitAdapter failed"
    r"|\[Hardware Error\]|EDAC|\bmce:|Machine [Cc]heck|Hardware event\. This is not a software error"
    r"|\bSTATUS [0-9a-fA-F]+ MCGSTATUS|Kernel panic|Memory failure: |hardware memory error"
)

# A PCI address as the driver prints it: optional domain (4 hex digits in NVRM lines, 8 in NVML's
# bus id), bus, device, optional function.
_PCI = r"(?:[0-9A-Fa-f]{4,8}:)?[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?"

# dmesg:   [ 1234.567890] NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.
# journal: 2026-11-29T10:01:02+0000 node kernel: NVRM: Xid (PCI:0000:3b:00): 63, pid=..., Row Remapper: ...
_XID = re.compile(rf"NVRM: Xid \((?:PCI:)?(?P<bus>{_PCI})\): (?P<code>\d+)(?:,\s*(?P<rest>.*))?")

# XIDs NVIDIA's XID catalogue attributes first to the application (bad kernel, page fault, stopped
# processing, preemptive cleanup after a killed job). They are reported, but do not fail the node:
# every other XID does (ECC/DBE 48, row remap 63/64, NVLink 74, fallen off the bus 79, 92, 94, 95,
# GSP 119/120, ...).
APPLICATION_XIDS = frozenset({13, 31, 43, 45})
FALLEN_OFF_BUS_XID = 79

# nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32 egress non-posted PRIV error (First)
# A fatal SXid is followed by "SXid (...): 20034, Data {...}" lines: part of the same record.
_SXID = re.compile(
    rf"nvidia-nvswitch(?P<switch>\d+): SXid \((?:PCI:)?(?P<bus>{_PCI})\): (?P<code>\d+),\s*(?P<rest>.*)"
)
# Newer drivers spread "GPU has fallen off the bus" over three lines without an XID:
#   NVRM: The NVIDIA GPU 0000:b3:00.0 / NVRM: (PCI ID: 10de:26b5) installed in this system has /
#   NVRM: fallen off the bus and is not responding to commands.
_GPU_NAMED = re.compile(rf"NVRM: The NVIDIA GPU (?P<bus>{_PCI})")
_FALLEN_TAIL = re.compile(r"NVRM: fallen off the bus and is not responding")
# Older drivers print it on one line next to XID 79: "NVRM: GPU 0000:1b:00.0: GPU has fallen off the bus."
_FALLEN_ONE_LINE = re.compile(rf"NVRM: GPU (?P<bus>{_PCI}): GPU has fallen off the bus")
# NVRM: GPU 0000:98:00.0: RmInitAdapter failed! (0x62:0x65:1792); drivers before ~2017 omit the GPU.
_RM_INIT = re.compile(rf"NVRM: (?:GPU (?P<bus>{_PCI}): )?RmInitAdapter failed!")

# Machine checks. A record opens at one of these headers ...
_MCE_LOGGED = re.compile(r"Machine check events logged")
_MCELOG_HEADER = re.compile(r"Hardware event\. This is not a software error")
_GHES_HEADER = re.compile(
    r"\{(?P<id>\d+)\}\[Hardware Error\]: Hardware error from APEI Generic Hardware Error Source"
)
# ... and its severity is read from these fields, never from wording:
# the MCi_STATUS register as the kernel, the AMD decoder and mcelog print it,
_MCI_STATUS = re.compile(
    r"Bank \d+: (?P<a>[0-9a-fA-F]{1,16})\b"  # mce: CPU 0: Machine Check: 0 Bank 4: a600000000020408
    r"|MC\d+_STATUS\[[^\]]*\]: 0x(?P<b>[0-9a-fA-F]{1,16})\b"  # [Hardware Error]: CPU:1 ... MC17_STATUS[...]: 0x...
    r"|\bSTATUS (?P<c>[0-9a-fA-F]{1,16}) MCGSTATUS"  # mcelog: STATUS fa00000000400405 MCGSTATUS 0
)
# the APEI/GHES (CPER) event severity,
_GHES_SEVERITY = re.compile(r"event severity: (?P<sev>\w+)")
# the EDAC memory-controller count line (driver start-up lines carry no count),
_EDAC_COUNT = re.compile(r"EDAC (?:\S+ )?MC\d+: (?P<n>\d+) (?P<kind>CE|UE)\b")
# and a panic on a machine check.
_MCE_PANIC = re.compile(r"Kernel panic - not syncing: .*[Mm]achine check")
# A page the hardware poisoned, however it was handled: mm/memory-failure.c prefixes every line
# about one with "Memory failure: <pfn>:" (recovered or not), and x86 prints "Uncorrected hardware
# memory error in user-access at <address>" when a process consumed it. On a machine without EDAC
# (most cloud VMs) these may be the only lines an uncorrected memory error leaves.
_MEMORY_FAILURE = re.compile(r"Memory failure: (?P<pfn>0x[0-9a-fA-F]+):")
_UNCORRECTED_MEMORY = re.compile(r"Uncorrected hardware memory error in [\w-]+ at (?P<address>[0-9a-fA-F]+)")

# MCi_STATUS bits (Intel SDM vol. 3B 16.3.2.2; AMD uses the same positions).
_VAL, _UC, _PCC = 1 << 63, 1 << 61, 1 << 57
# CPER severities a GHES record prints: recoverable and fatal errors were not corrected.
_GHES_UNCORRECTED = frozenset({"recoverable", "fatal"})


@dataclass(frozen=True)
class Xid:
    bus: str  # full PCI address "0000:3b:00": domain, bus, device (see normalise_bus)
    code: int
    text: str


@dataclass(frozen=True)
class GpuFault:
    kind: str  # "sxid" | "fallen_off_bus" | "rm_init_failed"
    bus: str | None  # full PCI address, None where the line names no device
    code: int | None  # the SXid number
    text: str


@dataclass(frozen=True)
class MachineCheck:
    severity: str  # "uncorrected" | "corrected" | "undecoded"
    evidence: str  # which field decided the severity
    text: str  # the record's first line


def normalise_bus(bus: str) -> str:
    """One spelling per PCI device: '00000000:3B:00.0' (NVML), '0000:3b:00' (NVRM) -> '0000:3b:00'.

    The domain is kept: on multi-domain hosts (POWER, Grace, some clouds) '0002:01:00' and
    '0003:01:00' are different GPUs. An address without a domain is in domain 0.
    """
    parts = bus.strip().lower().split(":")
    if len(parts) < 2:
        raise ValueError(f"not a PCI address: {bus!r}")
    domain = int(parts[-3], 16) if len(parts) >= 3 else 0
    return f"{domain:04x}:{parts[-2]}:{parts[-1].split('.')[0]}"


def parse_xids(lines: Iterable[str]) -> list[Xid]:
    found = []
    for line in lines:
        m = _XID.search(line)
        if m:
            found.append(Xid(normalise_bus(m["bus"]), int(m["code"]), (m["rest"] or "").strip()))
    return found


def parse_gpu_faults(lines: Iterable[str]) -> list[GpuFault]:
    """GPU and NVSwitch faults the driver reports without an XID: SXid, fallen off the bus, failed init.

    A fall off the bus that the same log also reports as XID 79 for that GPU is left to the XID.
    """
    lines = list(lines)
    xid79 = {x.bus for x in parse_xids(lines) if x.code == FALLEN_OFF_BUS_XID}
    found: list[GpuFault] = []
    named: str | None = None  # the GPU a multi-line "fallen off the bus" record started with
    for line in lines:
        if m := _SXID.search(line):
            if not m["rest"].startswith("Data {"):
                found.append(GpuFault("sxid", normalise_bus(m["bus"]), int(m["code"]), _tail(line, m)))
        elif m := _GPU_NAMED.search(line):
            named = normalise_bus(m["bus"])
        elif m := _FALLEN_TAIL.search(line):
            if named not in xid79:
                found.append(GpuFault("fallen_off_bus", named, None, "fallen off the bus, no XID"))
            named = None
        elif m := _FALLEN_ONE_LINE.search(line):
            bus = normalise_bus(m["bus"])
            if bus not in xid79:
                found.append(GpuFault("fallen_off_bus", bus, None, _tail(line, m)))
        elif m := _RM_INIT.search(line):
            named_gpu = normalise_bus(m["bus"]) if m["bus"] else None
            found.append(GpuFault("rm_init_failed", named_gpu, None, _tail(line, m)))
    return found


def _tail(line: str, m: re.Match[str]) -> str:
    return line[m.start() :].strip()


@dataclass
class _Record:
    first: str
    status: int | None = None
    ghes: str | None = None  # the GHES record id {N}
    ghes_severity: str | None = None
    edac: str | None = None  # "CE" | "UE"
    panic: bool = False
    poisoned_pfn: int | None = None  # a page memory_failure() handled
    evidence: list[str] = field(default_factory=list)

    def severity(self) -> tuple[str, str]:
        uncorrected: list[str] = []
        seen: list[str] = []
        if self.status is not None:
            bits = [name for bit, name in ((_UC, "UC"), (_PCC, "PCC")) if self.status & bit]
            seen.append(f"MCi_STATUS {self.status:016x}")
            if bits:
                uncorrected.append(f"MCi_STATUS {self.status:016x} ({'|'.join(bits)})")
        if self.ghes_severity is not None:
            seen.append(f"APEI severity {self.ghes_severity}")
            if self.ghes_severity in _GHES_UNCORRECTED:
                uncorrected.append(f"APEI severity {self.ghes_severity}")
        if self.edac is not None:
            seen.append(f"EDAC {self.edac}")
            if self.edac == "UE":
                uncorrected.append("EDAC UE")
        if self.panic:
            uncorrected.append("kernel panic on a machine check")
        if self.poisoned_pfn is not None:
            uncorrected.append(f"memory failure at pfn {self.poisoned_pfn:#x}")
        if uncorrected:
            return "uncorrected", "; ".join(uncorrected)
        if seen:
            return "corrected", "; ".join(seen)
        return "undecoded", "no bank status, APEI severity or EDAC count in the log"


def parse_machine_checks(lines: Iterable[str]) -> list[MachineCheck]:
    """Hardware-error records, each counted once however many lines it spans.

    Severity comes from the MCi_STATUS UC (bit 61) and PCC (bit 57) bits, the APEI/GHES event
    severity (recoverable and fatal are uncorrected) or the EDAC CE/UE count, never from words
    such as "error" or "fatal" elsewhere in the text. EDAC driver start-up lines and module lists
    that name an EDAC driver are not records. A record that only says "Machine check events
    logged" (the details went to mcelog / rasdaemon) is "undecoded". A page the kernel's memory
    failure handler took (recovered or not) is an uncorrected record of its own, once per page.
    """
    records: list[_Record] = []
    current: _Record | None = None
    poisoned: set[int] = set()  # one record per poisoned page, however many lines name it

    def opened(line: str) -> _Record:
        nonlocal current
        current = _Record(line.strip())
        records.append(current)
        return current

    for line in lines:
        if _MCE_LOGGED.search(line) or _MCELOG_HEADER.search(line):
            opened(line)
            continue
        if m := _GHES_HEADER.search(line):
            opened(line).ghes = m["id"]
        if (m := _GHES_SEVERITY.search(line)) and "[Hardware Error]" in line:
            if current is None or current.ghes is None or current.ghes_severity is not None:
                opened(line)
            assert current is not None
            current.ghes_severity = m["sev"].lower()
        if m := _MCI_STATUS.search(line):
            status = int(m["a"] or m["b"] or m["c"], 16)
            if status & _VAL:
                # One bank status per record: a second one (or one after the EDAC summary) is a new event.
                if current is None or current.ghes is not None or current.status is not None or current.edac:
                    opened(line)
                assert current is not None
                current.status = status
        if m := _EDAC_COUNT.search(line):
            if current is None or current.ghes is not None or current.edac is not None:
                opened(line)
            assert current is not None
            current.edac = m["kind"]
        if _MCE_PANIC.search(line):
            (current or opened(line)).panic = True
        if m := _MEMORY_FAILURE.search(line):
            pfn: int | None = int(m["pfn"], 16)
        elif m := _UNCORRECTED_MEMORY.search(line):
            pfn = int(m["address"], 16) >> 12  # 4 KiB pages: the pfn memory_failure() then names
        else:
            pfn = None
        if pfn is not None and pfn not in poisoned:
            poisoned.add(pfn)
            opened(line).poisoned_pfn = pfn
    return [MachineCheck(*r.severity(), r.first) for r in records]
