"""Kernel log lines: NVIDIA XID events and machine-check / EDAC hardware errors."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

# What collect keeps from the kernel log; parse applies the precise patterns below.
RELEVANT = re.compile(r"NVRM: Xid|\[Hardware Error\]|EDAC|\bmce:|Machine [Cc]heck")

# dmesg:   [ 1234.567890] NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.
# journal: 2026-11-29T10:01:02+0000 node kernel: NVRM: Xid (PCI:0000:3b:00): 63, pid=..., Row Remapper: ...
_XID = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<bus>(?:[0-9A-Fa-f]{4,8}:)?[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?)\): "
    r"(?P<code>\d+)(?:,\s*(?P<rest>.*))?"
)

# XIDs NVIDIA's XID catalogue attributes first to the application (bad kernel, page fault, stopped
# processing, preemptive cleanup after a killed job). They are reported, but do not fail the node:
# every other XID does (ECC/DBE 48, row remap 63/64, NVLink 74, fallen off the bus 79, 92, 94, 95,
# GSP 119/120, ...).
APPLICATION_XIDS = frozenset({13, 31, 43, 45})

_UNCORRECTED = re.compile(r"uncorrect|\bUE\b|fatal|Machine Check Exception|panic", re.IGNORECASE)
_HW = re.compile(r"\[Hardware Error\]|EDAC|\bmce:", re.IGNORECASE)


@dataclass(frozen=True)
class Xid:
    bus: str  # normalised "3b:00": bus and device, lower case, no domain or function
    code: int
    text: str


def normalise_bus(bus: str) -> str:
    """'0000:3b:00', '00000000:3B:00.0' and '3b:00' all name the same device: '3b:00'."""
    parts = bus.lower().split(":")
    return ":".join([parts[-2], parts[-1].split(".")[0]])


def parse_xids(lines: Iterable[str]) -> list[Xid]:
    found = []
    for line in lines:
        m = _XID.search(line)
        if m:
            found.append(Xid(normalise_bus(m["bus"]), int(m["code"]), (m["rest"] or "").strip()))
    return found


def parse_machine_checks(lines: Iterable[str]) -> tuple[list[str], list[str]]:
    """(uncorrected, corrected) hardware-error lines: MCE and EDAC reports."""
    uncorrected: list[str] = []
    corrected: list[str] = []
    for line in lines:
        if not _HW.search(line):
            continue
        (uncorrected if _UNCORRECTED.search(line) else corrected).append(line.strip())
    return uncorrected, corrected
