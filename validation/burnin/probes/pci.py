"""Which accelerators a node shows in sysfs and /dev, without loading a vendor library.

Cheap enough to ask before importing NVML or PyTorch, and true as long as the hardware is there:
a GPU's PCI function exists whether or not its driver loaded.
"""

from __future__ import annotations

import glob
from collections.abc import Iterator
from pathlib import Path

NVIDIA_PCI_VENDOR = "0x10de"
AMD_PCI_VENDOR = "0x1002"
# VGA, 3D and other display controllers: every GPU. NVSwitch bridges (0x0680) are not GPUs.
DISPLAY_CLASS = "0x03"


def read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return ""


def gpu_functions(sysfs: Path, vendors: tuple[str, ...]) -> Iterator[tuple[Path, str]]:
    """(PCI function, its class) for each display-class function of one of `vendors`, in order."""
    for vendor_file in sorted(glob.glob(str(sysfs / "bus/pci/devices/*/vendor"))):
        function = Path(vendor_file).parent
        pci_class = read(function / "class").lower()
        if read(Path(vendor_file)).lower() in vendors and pci_class.startswith(DISPLAY_CLASS):
            yield function, pci_class


def torch_gpu_evidence(sysfs: Path = Path("/sys"), dev: Path = Path("/dev")) -> bool:
    """Whether torch.cuda could count a GPU here: an NVIDIA or AMD GPU function (ROCm builds of
    PyTorch answer through torch.cuda too), or their device nodes (/dev/nvidiaN, /dev/kfd)."""
    if next(gpu_functions(sysfs, (NVIDIA_PCI_VENDOR, AMD_PCI_VENDOR)), None) is not None:
        return True
    return bool(glob.glob(str(dev / "nvidia[0-9]*"))) or (dev / "kfd").exists()
