"""health without a readable kernel log: machine checks (and XIDs) cannot be ruled out on any SKU,
so it never passes; what was read stays in the outcome, and a fault found anyway still fails."""

from __future__ import annotations

from typing import Any

import pytest

from tests.validation.burnin.helpers import ctx
from validation.burnin.checks import REGISTRY
from validation.burnin.outcome import CheckOutcome

UNREADABLE: dict[str, Any] = {
    "source": None,
    "lines": [],
    "error": "no readable kernel log (journalctl, dmesg, kern.log)",
}
ZONE = {"zone": "thermal_zone0", "type": "x86_pkg_temp", "temp_c": 48.0}


def parse(raw: dict[str, Any], sku: str = "cpu", check: str = "health") -> CheckOutcome:
    return REGISTRY.get(check).parse(raw, ctx(sku))


@pytest.mark.parametrize("check", ["health", "health_after_load"])
@pytest.mark.parametrize("zones", [[ZONE], []], ids=["thermal-zone", "no-thermal-zone"])
def test_cpu_health_without_a_kernel_log_is_an_error_not_a_pass(check: str, zones: list[Any]) -> None:
    raw = {"devices": [], "kernel_log": UNREADABLE, "edac": {"controllers": []}, "thermal": zones}
    out = parse(raw, check=check)
    assert out.status == "error"
    assert "machine-check errors cannot be ruled out" in (out.reason or "")
    assert "no readable kernel log" in (out.reason or "")
    # The temperature read is kept, not thrown away with the verdict.
    assert out.metrics == ({"temperature_max_c": 48.0} if zones else {})


def test_a_fault_found_without_the_kernel_log_still_fails_and_names_both() -> None:
    raw = {
        "devices": [],
        "kernel_log": UNREADABLE,
        "edac": {"controllers": [{"mc": "mc0", "ue_count": 2, "ce_count": 0}]},
        "thermal": [ZONE],
    }
    out = parse(raw)
    assert out.status == "fail" and "2 uncorrectable ECC errors" in (out.reason or "")
    assert any("machine-check errors cannot be ruled out" in f for f in out.findings)


def test_a_readable_empty_kernel_log_passes_a_cpu_host() -> None:
    raw = {"devices": [], "kernel_log": {"source": "dmesg", "lines": []}, "edac": {}, "thermal": [ZONE]}
    out = parse(raw)
    assert out.status == "pass" and out.metrics == {"mce_errors": 0.0, "temperature_max_c": 48.0}
