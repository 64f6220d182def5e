"""fabric on EFA nodes: EFA devices are known by their kernel driver, never by name.

The kernel names EFA devices efa_N; rdma-core's udev rules rename them on AWS to PCI-path names
(rdmap115s0 for 0000:73:00.0). The fixtures are sysfs trees laid out like the kernel's:
class/infiniband/<dev> links into the PCI device's tree, <dev>/device links to the PCI function,
whose driver links to bus/pci/drivers/efa.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

from tests.validation.burnin.helpers import ctx, fixture_json, materialize
from validation.burnin.checks import REGISTRY
from validation.burnin.outcome import CheckOutcome
from validation.burnin.probes.host import HostProbe

P5EN = "p5en.48xlarge"  # 16 EFA x 200 Gb/s


def tree(name: str) -> dict[str, Any]:
    return copy.deepcopy(fixture_json(f"sysfs/{name}.json"))


def pci_function(tree: dict[str, Any], device: str) -> str:
    """The PCI function directory an RDMA device's device link points to, in the fixture tree."""
    return str(tree[f"class/infiniband/{device}/device"]["->"])


def with_driver(tree: dict[str, Any], device: str, driver: str) -> dict[str, Any]:
    tree[f"{pci_function(tree, device)}/driver"] = {"->": f"bus/pci/drivers/{driver}"}
    return tree


def only(tree: dict[str, Any], *devices: str) -> dict[str, Any]:
    """The part of the tree that belongs to these RDMA devices and their PCI functions."""
    keep = [f"class/infiniband/{d}" for d in devices] + [pci_function(tree, d) for d in devices]
    return {k: v for k, v in tree.items() if any(k == w or k.startswith(w + "/") for w in keep)}


def probe_raw(root: Path) -> dict[str, Any]:
    probe = HostProbe(sysfs_root=root)
    return {"ports": probe.fabric_ports(), "net": probe.net_interfaces(), "loopback": [], "perftest": None}


def fabric(root: Path, sku: str = P5EN) -> CheckOutcome:
    return REGISTRY.get("fabric").parse(probe_raw(root), ctx(sku))


def break_driver_link(root: Path, tree: dict[str, Any], device: str) -> None:
    """Leave the device's driver link dangling: the driver cannot be read."""
    link = root / pci_function(tree, device) / "driver"
    link.unlink()
    os.symlink(root / "bus/pci/drivers/gone-efa", link)


def test_host_probe_reads_each_rdma_devices_driver_from_its_device_link(tmp_path: Path) -> None:
    t = with_driver(tree("efa_p5en"), "rdmap116s0", "mlx5_core")
    root = materialize(t, tmp_path / "sys")
    break_driver_link(root, t, "rdmap130s0")
    ports = {p["device"]: p for p in HostProbe(sysfs_root=root).fabric_ports()}
    assert len(ports) == 16
    assert ports["rdmap115s0"]["driver"] == "efa"
    assert ports["rdmap115s0"]["port"] == 1 and ports["rdmap115s0"]["state"] == "ACTIVE"
    assert ports["rdmap116s0"]["driver"] == "mlx5_core"
    assert ports["rdmap130s0"]["driver"] is None


def test_aws_renamed_efa_devices_count_by_driver(tmp_path: Path) -> None:
    out = fabric(materialize(tree("efa_p5en"), tmp_path / "sys"))
    assert out.status == "pass", out.findings
    assert out.metrics == {"fabric_ports_active": 16, "fabric_port_rate_gbitps": 200}


def test_kernel_efa_n_names_count_too_when_the_driver_is_efa(tmp_path: Path) -> None:
    # Without rdma-core's udev rename the kernel's own names stay; the driver is the same.
    raw = probe_raw(materialize(tree("efa_p5en_legacy_names"), tmp_path / "sys"))
    assert {(p["device"], p["driver"]) for p in raw["ports"]} == {(f"efa_{i}", "efa") for i in range(16)}
    out = REGISTRY.get("fabric").parse(raw, ctx(P5EN))
    assert out.status == "pass", out.findings
    assert out.metrics["fabric_ports_active"] == 16


def test_a_device_named_efa_with_another_driver_is_not_an_efa_port(tmp_path: Path) -> None:
    t = with_driver(tree("efa_p5en_legacy_names"), "efa_0", "mlx5_core")
    out = fabric(materialize(t, tmp_path / "sys"))
    assert out.status == "fail"
    assert out.metrics["fabric_ports_active"] == 15
    assert "15 of 16 expected EFA ports ACTIVE at 200 Gb/s (15 active)" in out.findings
    # Alone on the node, it is no EFA port at all; the reason says what was seen.
    out = fabric(materialize(only(t, "efa_0"), tmp_path / "only"))
    assert out.status == "error"
    assert out.reason == (
        "no EFA ports found; p5en.48xlarge has 16 x 200 Gb/s; "
        "1 RDMA device seen, none with driver efa: efa_0 (driver mlx5_core)"
    )


def test_a_device_whose_driver_cannot_be_read_is_not_counted(tmp_path: Path) -> None:
    t = tree("efa_p5en_legacy_names")
    root = materialize(t, tmp_path / "sys")
    break_driver_link(root, t, "efa_3")
    out = fabric(root)
    assert out.status == "fail"
    assert out.metrics["fabric_ports_active"] == 15
    assert "efa_3: driver not readable, not counted as an EFA port" in out.findings


def test_no_efa_driver_anywhere_names_the_devices_and_their_drivers(tmp_path: Path) -> None:
    t = with_driver(tree("efa_p5en"), "rdmap115s0", "mlx5_core")
    t = only(t, "rdmap115s0", "rdmap116s0")
    root = materialize(t, tmp_path / "sys")
    break_driver_link(root, t, "rdmap116s0")
    out = fabric(root)
    assert out.status == "error"
    assert out.reason == (
        "no EFA ports found; p5en.48xlarge has 16 x 200 Gb/s; 2 RDMA devices seen, none with driver "
        "efa: rdmap115s0 (driver mlx5_core), rdmap116s0 (driver not readable)"
    )
    empty = REGISTRY.get("fabric").parse({"ports": [], "net": [], "loopback": []}, ctx(P5EN))
    assert empty.reason == (
        "no EFA ports found; p5en.48xlarge has 16 x 200 Gb/s; no RDMA devices under /sys/class/infiniband"
    )


def test_infiniband_and_roce_still_go_by_link_layer_whatever_the_driver(tmp_path: Path) -> None:
    # mlx5 HCAs named like nothing in particular still count by link layer, not driver.
    ib = fabric(materialize(tree("ib_ndr_good"), tmp_path / "ib"), sku="hgx-h100-8")
    assert ib.status == "pass" and ib.metrics["fabric_ports_active"] == 8
    roce = fabric(materialize(tree("roce_a3_ultra"), tmp_path / "roce"), sku="a3-ultragpu-8g")
    assert roce.status == "pass" and roce.metrics["fabric_port_rate_gbitps"] == 400
    # An EFA SKU does not take InfiniBand HCAs for EFA, and says what it found instead.
    wrong = fabric(materialize(tree("ib_ndr_good"), tmp_path / "ib2"))
    assert wrong.status == "error"
    assert "no EFA ports found; p5en.48xlarge has 16 x 200 Gb/s; 9 RDMA devices seen" in (wrong.reason or "")
    assert "mlx5_0 (driver not readable)" in (wrong.reason or "")
