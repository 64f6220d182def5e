"""Host facts that could not be read are left out and named, never recorded as 0: an unreadable
/proc/meminfo is no 0 GiB machine that passes its inventory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.validation.burnin.helpers import ctx
from validation.burnin.checks import REGISTRY
from validation.burnin.probes.host import HostProbe


def inventory(host: dict[str, Any]) -> Any:
    return REGISTRY.get("inventory").parse({"host": host, "devices": [], "versions": {}}, ctx("cpu"))


def test_an_unreadable_meminfo_is_not_read_as_zero(tmp_path: Path) -> None:
    host = HostProbe(proc_root=tmp_path / "nonexistent").host_inventory()
    assert host["memory_bytes"] is None
    out = inventory(host)
    assert out.status == "fail"
    assert "host_memory_gib" not in out.metrics and out.metrics["host_cpus"] > 0
    assert "host memory size not readable (MemTotal in /proc/meminfo)" in (out.reason or "")


@pytest.mark.parametrize("meminfo", ["MemFree: 10 kB\n", "MemTotal:\n", "MemTotal: lots kB\n", ""])
def test_a_meminfo_without_a_memtotal_figure_is_not_read_as_zero(tmp_path: Path, meminfo: str) -> None:
    (tmp_path / "meminfo").write_text(meminfo)
    assert HostProbe(proc_root=tmp_path).host_inventory()["memory_bytes"] is None


def test_the_real_meminfo_is_read(tmp_path: Path) -> None:
    (tmp_path / "meminfo").write_text("MemTotal:       16318412 kB\nMemFree: 1 kB\n")
    assert HostProbe(proc_root=tmp_path).host_inventory()["memory_bytes"] == 16318412 * 1024


@pytest.mark.parametrize("cpus", [None, 0])
def test_an_unknown_cpu_count_is_named_not_judged_as_zero(cpus: int | None) -> None:
    out = inventory({"cpus": cpus, "memory_bytes": 64 * 2**30})
    assert out.status == "fail" and "host CPU count not readable" in (out.reason or "")
    assert "host_cpus" not in out.metrics and out.metrics["host_memory_gib"] == 64.0
