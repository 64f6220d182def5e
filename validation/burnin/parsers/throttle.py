"""NVML clock event ("throttle") reasons: a bit mask, decoded into names."""

from __future__ import annotations

# Values of nvmlClocksEventReason* (nvml.h).
BITS: dict[int, str] = {
    0x1: "gpu_idle",
    0x2: "applications_clocks",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clocks",
}
# Under sustained load these mean the part is too hot or its power delivery is faulty: a finding
# that fails the node. The software power cap is how a healthy GPU runs at full load (it holds
# the board at its power limit), so it is noted, not failed.
FAULTS = frozenset({"hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"})
NOTES = frozenset({"sw_power_cap"})


def decode(mask: int) -> list[str]:
    return [name for bit, name in BITS.items() if mask & bit]
