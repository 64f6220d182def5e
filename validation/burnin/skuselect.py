"""`--sku auto`: which catalog SKU is this node?

GPUs through NVML (model name and memory -> catalog models), narrowed by the cloud's DMI facts
(AWS puts the instance type in product_name; the vendor names the cloud). TPUs through JAX's
device kind. No accelerator at all: the `cpu` SKU. When more than one SKU fits, the error
lists them so the operator passes `--sku`.

Never demote: a node that shows an accelerator in sysfs or /dev (an NVIDIA display/3D PCI
function, /dev/nvidiaN; a TPU's /dev/accelN or Google PCI function) but whose library cannot see
it (pynvml missing, NVML failing, driver not loaded, JAX without a TPU backend) is an
AcceleratorUnreadable error naming the cause. Burning such a node in as `cpu` would pass a GPU
node that measured no GPU.
"""

from __future__ import annotations

import glob
from pathlib import Path
from typing import Any

from fleet.catalog import Sku, all_skus, get_sku
from validation.burnin.models import model_matches
from validation.burnin.probes.pci import NVIDIA_PCI_VENDOR, gpu_functions, read

_VENDOR_CLOUD = {"amazon ec2": "aws", "google": "gcp", "microsoft corporation": "azure"}
_GOOGLE_PCI_VENDOR = "0x1ae0"
_PCI_NOT_TPU = ("0x01", "0x02")  # mass storage and network controllers
# Where detection looks by default; resolved at call time so tests can point them at a fake tree.
SYSFS_ROOT = Path("/sys")
DEV_ROOT = Path("/dev")


class AutoSkuError(Exception):
    def __init__(self, message: str, candidates: list[str]) -> None:
        super().__init__(message)
        self.candidates = candidates


class AcceleratorUnreadable(AutoSkuError):
    """An accelerator is present but the library that measures it cannot see it."""

    def __init__(self, message: str) -> None:
        super().__init__(message, [])


class _NvmlUnavailable(Exception):
    """NVML could not be asked (pynvml missing, library or driver absent); the text says why."""


def _nvml_devices(nvml: Any) -> list[tuple[str, float]]:
    """(name, memory GiB) per GPU; _NvmlUnavailable when NVML cannot start (the caller decides
    whether that matters); AcceleratorUnreadable when NVML started but failed part way."""
    if nvml is None:
        try:
            import pynvml
        except ImportError:
            raise _NvmlUnavailable("pynvml is not installed (install the gpu extra)") from None
        nvml = pynvml
    nvml_error: type[BaseException] = getattr(nvml, "NVMLError", Exception)
    try:
        nvml.nvmlInit()
    except nvml_error as exc:
        raise _NvmlUnavailable(f"NVML cannot start: {exc}") from None
    try:
        found = []
        for i in range(nvml.nvmlDeviceGetCount()):
            h = nvml.nvmlDeviceGetHandleByIndex(i)
            name = nvml.nvmlDeviceGetName(h)
            name = name.decode() if isinstance(name, bytes) else str(name)
            found.append((name, float(nvml.nvmlDeviceGetMemoryInfo(h).total) / 2**30))
        return found
    except nvml_error as exc:
        # NVML started, so a driver is loaded: a GPU that cannot be listed is not a cpu node.
        raise AcceleratorUnreadable(f"NVML started but cannot list the GPUs: {exc}; pass --sku") from None
    finally:
        nvml.nvmlShutdown()


def _nvidia_evidence(sysfs: Path, dev: Path) -> str | None:
    """What shows an NVIDIA GPU without asking NVML, or None."""
    for function, pci_class in gpu_functions(sysfs, (NVIDIA_PCI_VENDOR,)):
        return f"PCI device {function.name} is an NVIDIA GPU (class {pci_class})"
    nodes = sorted(glob.glob(str(dev / "nvidia[0-9]*")))
    return f"{nodes[0]} exists" if nodes else None


def _cloud(sysfs: Path) -> tuple[str | None, str]:
    vendor = read(sysfs / "class/dmi/id/sys_vendor").lower()
    product = read(sysfs / "class/dmi/id/product_name")
    cloud = next((c for v, c in _VENDOR_CLOUD.items() if vendor.startswith(v)), None)
    return cloud, product


def _has_tpu(sysfs: Path, dev: Path) -> bool:
    if glob.glob(str(dev / "accel[0-9]*")):
        return True
    for vendor_file in glob.glob(str(sysfs / "bus/pci/devices/*/vendor")):
        pci_class = read(Path(vendor_file).parent / "class").lower()
        # Every GCE VM has Google PCI functions that are disks and NICs (NVMe, gVNIC): not TPUs.
        if read(Path(vendor_file)) == _GOOGLE_PCI_VENDOR and not pci_class.startswith(_PCI_NOT_TPU):
            return True
    return False


def detect_sku(sysfs_root: Path | None = None, dev_root: Path | None = None, nvml: Any | None = None) -> Sku:
    sysfs_root = sysfs_root or SYSFS_ROOT
    dev_root = dev_root or DEV_ROOT
    try:
        gpus = _nvml_devices(nvml)
        nvml_problem = "NVML lists no GPU"
    except _NvmlUnavailable as exc:
        gpus, nvml_problem = [], str(exc)
    cloud, product = _cloud(sysfs_root)
    if gpus:
        name, mem = gpus[0]
        fits = [
            s
            for s in all_skus()
            if s.accelerator.kind == "gpu"
            and model_matches(s.accelerator.model, name)
            and s.accelerator.memory_gib * 0.95 <= mem <= s.accelerator.memory_gib * 1.1
        ]
        return _narrow(fits, cloud, product, f"{len(gpus)} x {name} ({mem:.0f} GiB)", len(gpus))
    evidence = _nvidia_evidence(sysfs_root, dev_root)
    if evidence is not None:
        raise AcceleratorUnreadable(
            f"{evidence} but {nvml_problem}; fix the driver or pass --sku (this node is not a cpu node)"
        )
    if _has_tpu(sysfs_root, dev_root):
        return _detect_tpu(cloud, product, dev_root)
    return get_sku("cpu")


def _detect_tpu(cloud: str | None, product: str, dev_root: Path) -> Sku:
    import os

    from validation.burnin.backends.tpu import isolate_vm

    # Before JAX starts: on a VM of a multi-host slice it would wait for the other hosts.
    isolate_vm(os.environ, dev_root=dev_root)
    try:
        import jax
    except ImportError:
        raise AcceleratorUnreadable(
            "a TPU is present but JAX is not installed; install jax[tpu] or pass --sku"
        ) from None
    try:
        devices = jax.local_devices(backend="tpu")
    except RuntimeError as exc:  # JAX has no TPU backend here: it would fall back to the CPU
        raise AcceleratorUnreadable(f"a TPU is present but JAX cannot open it: {exc}; pass --sku") from None
    kind = devices[0].device_kind
    fits = [s for s in all_skus() if s.accelerator.kind == "tpu" and model_matches(s.accelerator.model, kind)]
    return _narrow(fits, cloud, product, f"{len(devices)} x {kind}", len(devices))


def _narrow(fits: list[Sku], cloud: str | None, product: str, seen: str, count: int) -> Sku:
    if not fits:
        models = sorted({s.accelerator.model for s in all_skus() if s.accelerator.kind != "cpu"})
        raise AutoSkuError(
            f"{seen} matches no catalog SKU (catalog models: {', '.join(models)}); pass --sku", []
        )
    exact = [s for s in fits if product and s.machine_type == product]
    if len(exact) == 1:
        return exact[0]
    in_cloud = [s for s in fits if s.cloud == (cloud or "onprem")]
    if len(in_cloud) > 1:
        in_cloud = [s for s in in_cloud if s.accelerators_per_node == count] or in_cloud
    if len(in_cloud) == 1:
        return in_cloud[0]
    names = [s.sku for s in (in_cloud or fits)]
    raise AutoSkuError(f"{seen} fits several SKUs: {', '.join(names)}; pass --sku one of them", names)
