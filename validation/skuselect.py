"""`--sku auto`: which catalog SKU is this node?

GPUs through NVML (model name and memory -> catalog models), narrowed by the cloud's DMI facts
(AWS puts the instance type in product_name; the vendor names the cloud). TPUs through JAX's
device kind. No accelerator at all: the `cpu` SKU. When more than one SKU fits, the error
lists them so the operator passes `--sku`.
"""

from __future__ import annotations

import glob
from pathlib import Path
from typing import Any

from fleet.catalog import Sku, all_skus, get_sku
from validation.models import model_matches

_VENDOR_CLOUD = {"amazon ec2": "aws", "google": "gcp", "microsoft corporation": "azure"}
_GOOGLE_PCI_VENDOR = "0x1ae0"


class AutoSkuError(Exception):
    def __init__(self, message: str, candidates: list[str]) -> None:
        super().__init__(message)
        self.candidates = candidates


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return ""


def _nvml_devices(nvml: Any) -> list[tuple[str, float]]:
    """(name, memory GiB) per GPU; empty when NVML or its driver is absent."""
    if nvml is None:
        try:
            import pynvml
        except ImportError:
            return []
        nvml = pynvml
    try:
        nvml.nvmlInit()
    except Exception:
        return []
    try:
        found = []
        for i in range(nvml.nvmlDeviceGetCount()):
            h = nvml.nvmlDeviceGetHandleByIndex(i)
            name = nvml.nvmlDeviceGetName(h)
            name = name.decode() if isinstance(name, bytes) else str(name)
            found.append((name, float(nvml.nvmlDeviceGetMemoryInfo(h).total) / 2**30))
        return found
    finally:
        nvml.nvmlShutdown()


def _cloud(sysfs: Path) -> tuple[str | None, str]:
    vendor = _read(sysfs / "class/dmi/id/sys_vendor").lower()
    product = _read(sysfs / "class/dmi/id/product_name")
    cloud = next((c for v, c in _VENDOR_CLOUD.items() if vendor.startswith(v)), None)
    return cloud, product


def _has_tpu(sysfs: Path, dev: Path) -> bool:
    if glob.glob(str(dev / "accel[0-9]*")):
        return True
    return any(
        _read(Path(v)) == _GOOGLE_PCI_VENDOR for v in glob.glob(str(sysfs / "bus/pci/devices/*/vendor"))
    )


def detect_sku(
    sysfs_root: Path = Path("/sys"), dev_root: Path = Path("/dev"), nvml: Any | None = None
) -> Sku:
    gpus = _nvml_devices(nvml)
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
    if _has_tpu(sysfs_root, dev_root):
        try:
            import jax
        except ImportError:
            raise AutoSkuError(
                "a TPU is present but JAX is not installed; install jax[tpu] or pass --sku", []
            ) from None
        kind = jax.devices()[0].device_kind
        fits = [
            s for s in all_skus() if s.accelerator.kind == "tpu" and model_matches(s.accelerator.model, kind)
        ]
        return _narrow(fits, cloud, product, f"{jax.local_device_count()} x {kind}", jax.local_device_count())
    return get_sku("cpu")


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
