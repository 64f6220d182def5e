"""NVML through nvidia-ml-py (`pynvml`): inventory, versions, ECC, remapped rows, PCIe links,
NVLink state, clocks, throttle reasons, temperature, power and energy.

The module handle is injectable: tests pass a fake built on captured values. "Not supported"
answers become None (the fact does not exist on this part, e.g. remapped rows before Ampere);
any other NVML error is kept in the device's `nvml_errors`, which health turns into a fault
(a GPU that has fallen off the bus answers with errors, not with zeros).

Functions NVML renamed are called by their new name first and, where the driver's library has
only the old one, by the old name (`Nvml._renamed`): the project supports drivers from R470 up.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from validation.burnin.backends.base import MissingDependencyError, Raw


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def cuda_version(code: int) -> str:
    """nvmlSystemGetCudaDriverVersion's 12040 -> '12.4'."""
    return f"{code // 1000}.{(code % 1000) // 10}"


# nvml.h's NVML_ERROR_FUNCTION_NOT_FOUND: "local version of NVML doesn't implement this function".
# pynvml raises it when the loaded libnvidia-ml lacks the symbol it looks up on the call.
_FUNCTION_NOT_FOUND = 13


def _import_pynvml() -> Any:
    try:
        import pynvml
    except ImportError:
        raise MissingDependencyError(
            "pynvml is not installed: install the gpu extra (pip install 'fleetforge[gpu]')"
        ) from None
    return pynvml


class Nvml:
    def __init__(self, module: Any | None = None) -> None:
        self.nv: Any = module if module is not None else _import_pynvml()
        self.nv.nvmlInit()
        self.count = int(self.nv.nvmlDeviceGetCount())
        self.handles = [self.nv.nvmlDeviceGetHandleByIndex(i) for i in range(self.count)]
        # New name of a renamed function -> the one this driver answers to, once known.
        self._chosen: dict[str, Callable[..., Any]] = {}

    def close(self) -> None:
        self.nv.nvmlShutdown()

    def _q(self, errors: list[str], fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except self.nv.NVMLError as exc:
            return self._failed(errors, fn, exc)

    def _failed(self, errors: list[str], fn: Callable[..., Any], exc: BaseException) -> None:
        """An answer of "not supported", by the device or by a driver older than the function
        (FUNCTION_NOT_FOUND: nvidia-ml-py knows names the node's libnvidia-ml may not export), is an
        absent fact (None), left unjudged; any other error goes in `errors`."""
        absent = (
            self.nv.NVML_ERROR_NOT_SUPPORTED,
            getattr(self.nv, "NVML_ERROR_FUNCTION_NOT_FOUND", _FUNCTION_NOT_FOUND),
        )
        if getattr(exc, "value", None) not in absent:
            errors.append(f"{getattr(fn, '__name__', 'nvml')}: {exc}")

    def _renamed(self, errors: list[str], new: str, old: str, *args: Any) -> Any:
        """`_q` on a function NVML renamed, by whichever name this driver's library exports.

        nvidia-ml-py has both Python functions from the version that added the new name, but
        looks the C symbol up only when one is called: on a driver older than the rename the new
        one raises FUNCTION_NOT_FOUND. That answer moves to the old name; any other answer (a
        value or another error) shows the new name exists. The choice is kept for later calls.
        """
        nv = self.nv
        fn = self._chosen.get(new)
        if fn is None:
            fn = getattr(nv, new, None)
            fallback: Callable[..., Any] | None = getattr(nv, old, None)
            if fn is None:  # a pynvml older than the rename: only the old name exists
                fn = getattr(nv, old)
            elif fallback is not None:
                try:
                    value = fn(*args)
                except nv.NVMLError as exc:
                    if getattr(exc, "value", None) != getattr(
                        nv, "NVML_ERROR_FUNCTION_NOT_FOUND", _FUNCTION_NOT_FOUND
                    ):
                        self._chosen[new] = fn
                        return self._failed(errors, fn, exc)
                    fn = fallback
                else:
                    self._chosen[new] = fn
                    return value
            self._chosen[new] = fn
        return self._q(errors, fn, *args)

    # ---------------------------------------------------------------- inventory

    def inventory(self) -> Raw:
        nv = self.nv
        devices = []
        for i, h in enumerate(self.handles):
            errors: list[str] = []
            mem = self._q(errors, nv.nvmlDeviceGetMemoryInfo, h)
            pci = self._q(errors, nv.nvmlDeviceGetPciInfo, h)
            cc = self._q(errors, nv.nvmlDeviceGetCudaComputeCapability, h)
            devices.append(
                {
                    "index": i,
                    "name": _text(self._q(errors, nv.nvmlDeviceGetName, h) or ""),
                    "uuid": _text(self._q(errors, nv.nvmlDeviceGetUUID, h) or ""),
                    "serial": _text(self._q(errors, nv.nvmlDeviceGetSerial, h) or ""),
                    "bus_id": _text(pci.busId) if pci is not None else "",
                    "memory_bytes": float(mem.total) if mem is not None else None,
                    "vbios": _text(self._q(errors, nv.nvmlDeviceGetVbiosVersion, h) or ""),
                    "firmware": _text(self._q(errors, nv.nvmlDeviceGetInforomImageVersion, h) or ""),
                    "compute_capability": f"{cc[0]}.{cc[1]}" if cc else "",
                    "nvml_errors": errors,
                }
            )
        sys_errors: list[str] = []
        driver = self._q(sys_errors, nv.nvmlSystemGetDriverVersion)
        cuda = self._q(sys_errors, nv.nvmlSystemGetCudaDriverVersion)
        versions = {
            "driver": _text(driver) if driver else "",
            "cuda": cuda_version(int(cuda)) if cuda else "",
        }
        return {"devices": devices, "versions": versions, "nvml_errors": sys_errors}

    # ---------------------------------------------------------------- health

    def pcie(self, under_load: bool) -> list[Raw]:
        nv = self.nv
        links = []
        for h in self.handles:
            errors: list[str] = []
            links.append(
                {
                    "cur_gen": self._q(errors, nv.nvmlDeviceGetCurrPcieLinkGeneration, h),
                    "max_gen": self._q(errors, nv.nvmlDeviceGetMaxPcieLinkGeneration, h),
                    "gpu_max_gen": self._q(errors, nv.nvmlDeviceGetGpuMaxPcieLinkGeneration, h),
                    "cur_width": self._q(errors, nv.nvmlDeviceGetCurrPcieLinkWidth, h),
                    "max_width": self._q(errors, nv.nvmlDeviceGetMaxPcieLinkWidth, h),
                    "under_load": under_load,
                    "errors": errors,
                }
            )
        return links

    def health(self, pcie: list[Raw] | None = None) -> list[Raw]:
        nv = self.nv
        pcie = pcie if pcie is not None else self.pcie(under_load=False)
        devices = []
        for i, h in enumerate(self.handles):
            errors: list[str] = list(pcie[i].pop("errors", []))
            pci = self._q(errors, nv.nvmlDeviceGetPciInfo, h)
            unc = nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
            ecc = {
                "volatile_uncorrected": self._q(
                    errors, nv.nvmlDeviceGetTotalEccErrors, h, unc, nv.NVML_VOLATILE_ECC
                ),
                "aggregate_uncorrected": self._q(
                    errors, nv.nvmlDeviceGetTotalEccErrors, h, unc, nv.NVML_AGGREGATE_ECC
                ),
            }
            rows = self._q(errors, nv.nvmlDeviceGetRemappedRows, h)
            remapped = None
            retired = None
            if rows is not None:
                corr, uncorr, pending, failure = rows
                remapped = {
                    "correctable": corr,
                    "uncorrectable": uncorr,
                    "pending": bool(pending),
                    "failure": bool(failure),
                }
            else:  # before Ampere: dynamic page retirement instead of row remapping
                status = self._q(errors, nv.nvmlDeviceGetRetiredPagesPendingStatus, h)
                retired = None if status is None else bool(status)
            # With ECC off the error counters answer "not supported": the mode says why they are silent.
            mode = self._q(errors, nv.nvmlDeviceGetEccMode, h)
            devices.append(
                {
                    "index": i,
                    "bus_id": _text(pci.busId) if pci is not None else "",
                    "ecc": ecc,
                    "ecc_mode": None
                    if mode is None
                    else {"current": bool(mode[0]), "pending": bool(mode[1])},
                    "remapped_rows": remapped,
                    "retired_pages_pending": retired,
                    "pcie": pcie[i],
                    "nvlink": self._nvlink(h, errors),
                    "temp_c": self._q(errors, nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU),
                    "slowdown_temp_c": self._q(
                        errors,
                        nv.nvmlDeviceGetTemperatureThreshold,
                        h,
                        nv.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN,
                    ),
                    "nvml_errors": errors,
                }
            )
        return devices

    def _nvlink(self, h: Any, errors: list[str]) -> list[Raw] | None:
        """State of each NVLink the device has; None when it has none (PCIe cards)."""
        nv = self.nv
        links = []
        for link in range(int(nv.NVML_NVLINK_MAX_LINKS)):
            try:
                state = nv.nvmlDeviceGetNvLinkState(h, link)
            except nv.NVMLError as exc:
                # Links past the last one the part has answer "not supported" / "invalid argument".
                if getattr(exc, "value", None) in (
                    nv.NVML_ERROR_NOT_SUPPORTED,
                    nv.NVML_ERROR_INVALID_ARGUMENT,
                ):
                    continue
                errors.append(f"nvmlDeviceGetNvLinkState({link}): {exc}")
                continue
            links.append({"link": link, "up": state == nv.NVML_FEATURE_ENABLED})
        return links or None

    # ---------------------------------------------------------------- telemetry

    def sample(self) -> list[Raw]:
        """One telemetry sample per device (stress and efficiency call this on a timer)."""
        nv = self.nv
        out = []
        for h in self.handles:
            errors: list[str] = []
            power = self._q(errors, nv.nvmlDeviceGetPowerUsage, h)
            energy = self._q(errors, nv.nvmlDeviceGetTotalEnergyConsumption, h)
            out.append(
                {
                    "clock_mhz": self._q(errors, nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM),
                    "max_clock_mhz": self._q(errors, nv.nvmlDeviceGetMaxClockInfo, h, nv.NVML_CLOCK_SM),
                    "temp_c": self._q(errors, nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU),
                    "power_w": None if power is None else power / 1000,
                    "energy_j": None if energy is None else energy / 1000,
                    # R535 renamed ...ClocksThrottleReasons to ...ClocksEventReasons; the bits
                    # (nvmlClocksEventReason* / nvmlClocksThrottleReason*) are the same.
                    "throttle_mask": self._renamed(
                        errors,
                        "nvmlDeviceGetCurrentClocksEventReasons",
                        "nvmlDeviceGetCurrentClocksThrottleReasons",
                        h,
                    ),
                    "pcie_gen": self._q(errors, nv.nvmlDeviceGetCurrPcieLinkGeneration, h),
                    "nvml_errors": errors,
                }
            )
        return out
