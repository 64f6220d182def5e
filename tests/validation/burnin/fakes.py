"""Injected stand-ins for pynvml and torch, so the GPU backend's code paths run without a GPU.

FakeNvml answers from per-device dicts with pynvml's own error classes (a missing key is "not
supported"; {"error": code} raises that NVML error). FakeTorch implements the slice of torch
the backend uses on numpy arrays, with CUDA events timed by the host clock.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import numpy as np
import pynvml


class FakeNvml:
    NVMLError = pynvml.NVMLError
    NVML_ERROR_NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED
    NVML_ERROR_INVALID_ARGUMENT = pynvml.NVML_ERROR_INVALID_ARGUMENT
    NVML_ERROR_GPU_IS_LOST = pynvml.NVML_ERROR_GPU_IS_LOST
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    NVML_VOLATILE_ECC = pynvml.NVML_VOLATILE_ECC
    NVML_AGGREGATE_ECC = pynvml.NVML_AGGREGATE_ECC
    NVML_NVLINK_MAX_LINKS = pynvml.NVML_NVLINK_MAX_LINKS
    NVML_FEATURE_ENABLED = pynvml.NVML_FEATURE_ENABLED
    NVML_TEMPERATURE_GPU = pynvml.NVML_TEMPERATURE_GPU
    NVML_TEMPERATURE_THRESHOLD_SLOWDOWN = pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN
    NVML_CLOCK_SM = pynvml.NVML_CLOCK_SM

    def __init__(self, devices: list[dict[str, Any]], driver: str = "550.90.07", cuda: int = 12040) -> None:
        self.devices = devices
        self.driver, self.cuda = driver, cuda
        self.initialised = 0

    def _get(self, h: int, key: str) -> Any:
        dev = self.devices[h]
        if key not in dev:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        value = dev[key]
        if isinstance(value, dict) and "error" in value:
            raise pynvml.NVMLError(value["error"])
        return value

    def nvmlInit(self) -> None:
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        self.initialised -= 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.driver

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return self.cuda

    def nvmlDeviceGetName(self, h: int) -> bytes:
        return str(self._get(h, "name")).encode()

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return f"GPU-{h:08d}-fake"

    def nvmlDeviceGetSerial(self, h: int) -> str:
        return f"16542{h:05d}"

    def nvmlDeviceGetPciInfo(self, h: int) -> Any:
        return SimpleNamespace(busId=str(self._get(h, "bus_id")).encode())

    def nvmlDeviceGetMemoryInfo(self, h: int) -> Any:
        return SimpleNamespace(total=int(self._get(h, "memory_bytes")))

    def nvmlDeviceGetVbiosVersion(self, h: int) -> str:
        return str(self._get(h, "vbios"))

    def nvmlDeviceGetInforomImageVersion(self, h: int) -> str:
        return str(self._get(h, "inforom"))

    def nvmlDeviceGetCudaComputeCapability(self, h: int) -> tuple[int, int]:
        return (9, 0)

    def nvmlDeviceGetTotalEccErrors(self, h: int, kind: int, counter: int) -> int:
        return int(self._get(h, "ecc_volatile" if counter == pynvml.NVML_VOLATILE_ECC else "ecc_aggregate"))

    def nvmlDeviceGetEccMode(self, h: int) -> list[int]:
        return list(self._get(h, "ecc_mode"))

    def nvmlDeviceGetRemappedRows(self, h: int) -> tuple[int, int, int, int]:
        return tuple(self._get(h, "remapped"))  # type: ignore[return-value]

    def nvmlDeviceGetRetiredPagesPendingStatus(self, h: int) -> int:
        return int(self._get(h, "retired_pending"))

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h: int) -> int:
        return int(self._get(h, "pcie")[0])

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h: int) -> int:
        return int(self._get(h, "pcie")[1])

    def nvmlDeviceGetGpuMaxPcieLinkGeneration(self, h: int) -> int:
        return int(self._get(h, "pcie")[2])

    def nvmlDeviceGetCurrPcieLinkWidth(self, h: int) -> int:
        return int(self._get(h, "pcie")[3])

    def nvmlDeviceGetMaxPcieLinkWidth(self, h: int) -> int:
        return int(self._get(h, "pcie")[4])

    def nvmlDeviceGetNvLinkState(self, h: int, link: int) -> int:
        links = self._get(h, "nvlink")
        if link >= len(links):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return int(links[link])

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        return int(self._get(h, "temp"))

    def nvmlDeviceGetTemperatureThreshold(self, h: int, kind: int) -> int:
        return 87

    def nvmlDeviceGetClockInfo(self, h: int, kind: int) -> int:
        return int(self._get(h, "clock"))

    def nvmlDeviceGetMaxClockInfo(self, h: int, kind: int) -> int:
        return 1980

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        return int(self._get(h, "power_mw"))

    def nvmlDeviceGetTotalEnergyConsumption(self, h: int) -> int:
        # Energy grows at the device's power while the test runs: mJ = mW x s.
        return int(self._get(h, "power_mw") * time.monotonic())

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: int) -> int:
        return int(self._get(h, "reasons"))


def h100(i: int, **over: Any) -> dict[str, Any]:
    dev: dict[str, Any] = {
        "name": "NVIDIA H100 80GB HBM3",
        "bus_id": f"00000000:{0x18 + 0x10 * i:02X}:00.0",
        "memory_bytes": 85520809984,
        "vbios": "96.00.99.00.01",
        "inforom": "G520.0200.00.05",
        "ecc_volatile": 0,
        "ecc_aggregate": 0,
        "ecc_mode": (1, 1),  # current, pending: on, and staying on
        "remapped": (0, 0, 0, 0),
        "pcie": (5, 5, 5, 16, 16),
        "nvlink": [1] * 18,
        "temp": 33,
        "clock": 1980,
        "power_mw": 690000,
        "reasons": 0x4,
    }
    dev.update(over)
    return dev


# ---------------------------------------------------------------------------- torch


@dataclass(frozen=True)
class DType:
    name: str
    np: Any


class FakeTensor:
    def __init__(self, a: Any, device: str = "cpu") -> None:
        self.a = np.asarray(a)
        self.device = device

    def _wrap(self, a: Any) -> FakeTensor:
        return FakeTensor(a, self.device)

    @staticmethod
    def _raw(x: Any) -> Any:
        return x.a if isinstance(x, FakeTensor) else x

    def to(self, dtype: DType) -> FakeTensor:
        return self._wrap(self.a.astype(dtype.np))

    def t(self) -> FakeTensor:
        return self._wrap(self.a.T)

    def contiguous(self) -> FakeTensor:
        return self._wrap(np.ascontiguousarray(self.a))

    def __getitem__(self, key: Any) -> FakeTensor:
        return self._wrap(self.a[self._raw(key)])

    def __matmul__(self, other: FakeTensor) -> FakeTensor:
        return self._wrap(self.a @ other.a)

    def __sub__(self, other: Any) -> FakeTensor:
        return self._wrap(self.a - self._raw(other))

    def __add__(self, other: Any) -> FakeTensor:
        return self._wrap(self.a + self._raw(other))

    def __truediv__(self, other: Any) -> FakeTensor:
        return self._wrap(self.a / self._raw(other))

    def __invert__(self) -> FakeTensor:
        return self._wrap(~self.a)

    def __eq__(self, other: object) -> FakeTensor:  # type: ignore[override]
        return self._wrap(self.a == self._raw(other))

    def abs(self) -> FakeTensor:
        return self._wrap(np.abs(self.a))

    def clamp_min(self, v: float) -> FakeTensor:
        return self._wrap(np.maximum(self.a, v))

    def max(self) -> FakeTensor:
        return self._wrap(self.a.max())

    def sum(self) -> FakeTensor:
        return self._wrap(self.a.sum())

    def all(self) -> FakeTensor:
        return self._wrap(self.a.all())

    def item(self) -> Any:
        return self.a.item()

    def copy_(self, src: FakeTensor, non_blocking: bool = False) -> FakeTensor:
        np.copyto(self.a, src.a.astype(self.a.dtype))
        return self

    def fill_(self, v: float) -> FakeTensor:
        self.a.fill(v)
        return self

    def view(self, *shape: int) -> FakeTensor:
        return self._wrap(self.a.reshape(shape))

    def expand(self, *shape: int) -> FakeTensor:
        return self._wrap(np.broadcast_to(self.a, (shape[0], self.a.shape[-1])))


class _Event:
    def __init__(self, enable_timing: bool = False) -> None:
        self.t = 0.0

    def record(self) -> None:
        self.t = time.perf_counter()

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, end: _Event) -> float:
        return max(end.t - self.t, 1e-7) * 1000


class _Generator:
    def __init__(self, device: str = "cpu") -> None:
        self.rng = np.random.default_rng(0)

    def manual_seed(self, seed: int) -> _Generator:
        self.rng = np.random.default_rng(seed)
        return self


class FakeTorch:
    """The slice of `torch` TorchCuda uses, on numpy. `corrupt` names a device whose GEMMs are
    wrong in one column (a bad multiplier); `pinned` counts pinned host allocations."""

    __version__ = "2.13.0+fake"
    float32 = DType("float32", np.float32)
    float64 = DType("float64", np.float64)
    float16 = DType("float16", np.float16)
    bfloat16 = DType("bfloat16", np.float32)  # numpy has no bf16; values stay float32
    float8_e4m3fn = DType("float8_e4m3fn", np.float32)
    uint8 = DType("uint8", np.uint8)

    def __init__(self, devices: int = 2, corrupt: int | None = None) -> None:
        self.corrupt = corrupt
        self.pinned = 0
        self.Generator = _Generator
        self.backends = SimpleNamespace(cuda=SimpleNamespace(matmul=SimpleNamespace(allow_tf32=True)))
        self.cuda = SimpleNamespace(
            is_available=lambda: True,
            device_count=lambda: devices,
            get_device_capability=lambda d: (9, 0),
            Event=_Event,
            device=self._device,
            synchronize=lambda d=None: None,
            empty_cache=lambda: None,
        )

    @contextlib.contextmanager
    def _device(self, d: int) -> Iterator[None]:
        yield

    def _spoil(self, out: Any, device: str) -> Any:
        if self.corrupt is not None and device == f"cuda:{self.corrupt}":
            out[:, 0] += 1000.0
        return out

    def randn(
        self, *shape: int, device: str = "cpu", generator: _Generator | None = None, dtype: DType = float32
    ) -> FakeTensor:
        rng = generator.rng if generator else np.random.default_rng(0)
        return FakeTensor(rng.standard_normal(shape).astype(dtype.np), device)

    def rand(self, count: int, device: str = "cpu") -> FakeTensor:
        return FakeTensor(np.random.default_rng(1).random(count, dtype=np.float32), device)

    def randint(self, low: int, high: int, shape: tuple[int, ...], dtype: DType = uint8) -> FakeTensor:
        return FakeTensor(np.random.default_rng(2).integers(low, high, shape).astype(dtype.np))

    def randperm(self, n: int, device: str = "cpu", generator: _Generator | None = None) -> FakeTensor:
        rng = generator.rng if generator else np.random.default_rng(0)
        return FakeTensor(rng.permutation(n), device)

    def empty(
        self, *shape: int, dtype: DType = float32, device: str = "cpu", pin_memory: bool = False
    ) -> FakeTensor:
        self.pinned += int(pin_memory)
        return FakeTensor(np.zeros(shape, dtype=dtype.np), device)

    def empty_like(self, t: FakeTensor) -> FakeTensor:
        return FakeTensor(np.empty_like(t.a), t.device)

    def ones(self, shape: tuple[int, ...], device: str = "cpu", dtype: DType = float32) -> FakeTensor:
        return FakeTensor(np.ones(shape, dtype=dtype.np), device)

    def matmul(self, a: FakeTensor, b: FakeTensor, out: FakeTensor) -> FakeTensor:
        np.matmul(a.a, b.a, out=out.a)
        self._spoil(out.a, a.device)
        return out

    def _scaled_mm(
        self, a: FakeTensor, b: FakeTensor, scale_a: FakeTensor, scale_b: FakeTensor, out_dtype: DType
    ) -> FakeTensor:
        out = (a.a @ b.a) * scale_a.a * scale_b.a
        return FakeTensor(self._spoil(out.astype(out_dtype.np), a.device), a.device)

    def isfinite(self, t: FakeTensor) -> FakeTensor:
        return FakeTensor(np.isfinite(t.a), t.device)

    def equal(self, a: FakeTensor, b: FakeTensor) -> bool:
        return bool(np.array_equal(a.a, b.a))
