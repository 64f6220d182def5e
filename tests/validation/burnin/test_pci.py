"""Accelerators seen in sysfs and /dev without a vendor library (validation/burnin/probes/pci.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.validation.burnin.helpers import materialize
from validation.burnin.probes.pci import NVIDIA_PCI_VENDOR, gpu_functions, torch_gpu_evidence


def pci(tmp_path: Path, *functions: tuple[str, str]) -> Path:
    """A sysfs tree with these (vendor, class) PCI functions, and a virtio NIC beside them."""
    tree = {"bus/pci/devices/0000:00:02.0/vendor": "0x1af4", "bus/pci/devices/0000:00:02.0/class": "0x020000"}
    for i, (vendor, pci_class) in enumerate(functions):
        tree[f"bus/pci/devices/0000:{0x1B + i:02x}:00.0/vendor"] = vendor
        tree[f"bus/pci/devices/0000:{0x1B + i:02x}:00.0/class"] = pci_class
    return materialize(tree, tmp_path / "sys")


@pytest.mark.parametrize(
    ("functions", "expected"),
    [
        ([("0x10de", "0x030200")], True),  # an NVIDIA 3D controller (H100, H200)
        ([("0x10de", "0x030000")], True),  # an NVIDIA VGA controller
        ([("0x1002", "0x038000")], True),  # an AMD Instinct display controller (ROCm)
        ([("0x1a03", "0x030000")], False),  # the BMC's ASPEED VGA on a CPU server
        ([("0x10de", "0x068000")], False),  # an NVSwitch bridge without its GPUs
        ([], False),
    ],
    ids=["nvidia-3d", "nvidia-vga", "amd", "aspeed-bmc", "nvswitch", "none"],
)
def test_only_a_gpu_function_is_evidence(
    tmp_path: Path, functions: list[tuple[str, str]], expected: bool
) -> None:
    dev = tmp_path / "dev"
    dev.mkdir()
    assert torch_gpu_evidence(pci(tmp_path, *functions), dev) is expected


@pytest.mark.parametrize("node", ["nvidia0", "kfd"])
def test_a_gpu_device_node_is_evidence_without_its_pci_function(tmp_path: Path, node: str) -> None:
    dev = tmp_path / "dev"
    dev.mkdir()
    (dev / node).touch()
    assert torch_gpu_evidence(pci(tmp_path), dev)
    (dev / node).unlink()
    (dev / "nvidiactl").touch()  # the control node alone is not a GPU
    assert not torch_gpu_evidence(pci(tmp_path), dev)


def test_gpu_functions_name_each_function_of_the_vendor_in_order(tmp_path: Path) -> None:
    sysfs = pci(tmp_path, ("0x10de", "0x030200"), ("0x1002", "0x038000"), ("0x10de", "0x030200"))
    found = [(f.name, c) for f, c in gpu_functions(sysfs, (NVIDIA_PCI_VENDOR,))]
    assert found == [("0000:1b:00.0", "0x030200"), ("0000:1d:00.0", "0x030200")]
