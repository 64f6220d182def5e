"""The GPU backend's code paths with injected NVML and torch stand-ins (no GPU here): what it
collects parses into the right verdicts, including a GPU that computes wrong answers."""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pynvml
import pytest

from tests.validation.burnin.fakes import FakeNvml, FakeTorch, h100
from tests.validation.burnin.helpers import ctx, materialize
from validation.burnin.backends.cpu import CpuBackend
from validation.burnin.backends.gpu import GpuBackend
from validation.burnin.checks import REGISTRY
from validation.burnin.probes.nvml import Nvml, cuda_version
from validation.burnin.probes.torch_cuda import TorchCuda


def backend(
    devices: list[dict[str, Any]], torch: FakeTorch | None = None, tmp: Path | None = None
) -> GpuBackend:
    c = ctx("hgx-h100-8", sysfs_root=tmp or Path("/nonexistent-sysfs"))
    b = GpuBackend(c, nvml=FakeNvml(devices), torch=torch or FakeTorch(devices=len(devices)))
    b.torch.pcie_probe_bytes = 2**16  # numpy stands in for the copies: keep them small
    return b


def parse(check: str, raw: dict[str, Any], **kw: Any) -> Any:
    return REGISTRY.get(check).parse(raw, ctx("hgx-h100-8", **kw))


def test_inventory_through_nvml() -> None:
    raw = backend([h100(i) for i in range(8)]).inventory()
    assert raw["versions"]["driver"] == "550.90.07" and raw["versions"]["cuda"] == "12.4"
    assert raw["devices"][3]["bus_id"] == "00000000:48:00.0"
    out = parse("inventory", raw)
    assert out.status == "pass", out.findings
    assert out.metrics["accelerator_count"] == 8
    assert out.metrics["accelerator_memory_gib"] == pytest.approx(79.65, abs=0.01)


def test_health_reads_pcie_under_load_and_passes_a_good_node() -> None:
    torch = FakeTorch(devices=8)
    raw = backend([h100(i) for i in range(8)], torch).health()
    assert torch.pinned == 8, "health queues pinned host-to-device copies to read the link under load"
    assert all(d["pcie"]["under_load"] for d in raw["devices"])
    assert raw["devices"][0]["nvlink"] == [{"link": i, "up": True} for i in range(18)]
    out = parse("health", raw)
    assert out.status == "pass", out.findings
    assert out.metrics["nvlink_down_links"] == 0 and out.metrics["pcie_degraded_links"] == 0


@pytest.mark.parametrize(
    ("override", "finding"),
    [
        (
            {"ecc_volatile": 4, "ecc_aggregate": 4},
            "GPU 2: 4 uncorrectable ECC errors since the driver loaded",
        ),
        ({"remapped": (0, 2, 1, 0)}, "GPU 2: row remapping pending (reset the GPU to apply it)"),
        ({"pcie": (4, 5, 5, 16, 16)}, "GPU 2: PCIe gen 4 under load, maximum gen 5 (downtrained)"),
        ({"pcie": (5, 4, 5, 16, 16)}, "GPU 2: the slot limits PCIe to gen 4; the device supports gen 5"),
        ({"nvlink": [1] * 9 + [0] + [1] * 8}, "GPU 2: NVLink 9 is down"),
        (
            {"ecc_volatile": {"error": pynvml.NVML_ERROR_GPU_IS_LOST}},
            "GPU 2: NVML nvmlDeviceGetTotalEccErrors: GPU is lost",
        ),
        # ECC off: the error counters answer "not supported", so only the mode tells.
        (
            {
                "ecc_mode": (0, 0),
                "ecc_volatile": {"error": pynvml.NVML_ERROR_NOT_SUPPORTED},
                "ecc_aggregate": {"error": pynvml.NVML_ERROR_NOT_SUPPORTED},
            },
            "GPU 2: ECC is disabled (nvidia-smi -e 1, then a GPU reset)",
        ),
    ],
)
def test_health_faults_read_through_nvml(override: dict[str, Any], finding: str) -> None:
    devices = [h100(i) for i in range(8)]
    devices[2].update(override)
    out = parse("health", backend(devices).health())
    assert out.status == "fail"
    assert finding in out.findings, out.findings


def test_pre_ampere_parts_report_retired_pages_instead_of_remapped_rows() -> None:
    devices = [h100(i) for i in range(8)]
    for d in devices:
        del d["remapped"]
        d["retired_pending"] = 0
    devices[5]["retired_pending"] = 1
    raw = backend(devices).health()
    assert raw["devices"][5]["remapped_rows"] is None and raw["devices"][5]["retired_pages_pending"] is True
    out = parse("health", raw)
    assert (
        out.status == "fail" and "GPU 5: retired pages pending (reset the GPU to retire them)" in out.findings
    )


def test_nvml_helpers() -> None:
    assert cuda_version(12040) == "12.4" and cuda_version(13000) == "13.0"
    nvml = Nvml(FakeNvml([h100(0)]))
    assert nvml.sample()[0]["throttle_mask"] == 0x4 and nvml.sample()[0]["power_w"] == 690.0
    nvml.close()


def test_torch_gemm_verifies_products_and_catches_a_bad_gpu() -> None:
    good = TorchCuda(FakeTorch(devices=3), seed=7)
    assert good.gemm_dtypes() == ["bf16", "fp16", "fp8", "fp32"]
    raw = good.gemm(["bf16", "fp16", "fp8", "fp32"], n=64, seconds=0.02, buffers=2)
    assert [r["dtype"] for r in raw["results"]] == ["bf16", "fp16", "fp8", "fp32"]
    for result in raw["results"]:
        for d in result["devices"]:
            assert d["tflops"] > 0 and d["nonfinite"] == 0 and d["max_scaled_err"] < 1e-2
        assert len({d["checksum"] for d in result["devices"]}) == 1  # same seed: same products
    floors_off = {m: {"floor": 0} for m in ("gemm_bf16_tflops", "gemm_fp16_tflops", "gemm_fp8_tflops")}
    assert parse("compute", raw, thresholds=floors_off).status == "pass"

    bad = TorchCuda(FakeTorch(devices=3, corrupt=1), seed=7).gemm(
        ["bf16", "fp8"], n=64, seconds=0.02, buffers=2
    )
    out = parse("compute", bad, thresholds=floors_off)
    assert out.status == "fail"
    assert any(f.startswith("GPU 1 bf16: product differs from the float64 reference") for f in out.findings)
    assert any(
        f.startswith("GPU 1 fp8: product checksum") and "differs from 2 of 3 peers" in f for f in out.findings
    )
    assert not any(f.startswith("GPU 0") for f in out.findings)


def test_torch_memory_and_host_device_copies() -> None:
    torch = FakeTorch(devices=2)
    t = TorchCuda(torch)
    mem = t.mem_copy(2**20, seconds=0.02)
    assert [d["intact"] for d in mem["devices"]] == [True, True] and all(
        d["gbps"] > 0 for d in mem["devices"]
    )
    hd = t.host_device(2**20, seconds=0.02)
    assert torch.pinned == 2 and all(d["h2d_gbps"] > 0 and d["d2h_gbps"] > 0 for d in hd["devices"])
    assert torch.backends.cuda.matmul.allow_tf32 is False  # fp32 means fp32


def test_stress_samples_nvml_while_torch_loads_every_gpu() -> None:
    devices = [h100(i, clock=1755) for i in range(2)]
    devices[1]["reasons"] = 0x40 | 0x4
    b = backend(devices)
    b.torch.load_n = 48
    raw = b.load_and_sample(seconds=0.6, interval_s=0.1)
    assert len(raw["samples"]) >= 3 and len(raw["work"]) == 2
    assert all(w["flops"] > 0 and w["windows_tflops"] for w in raw["work"])
    out = parse("stress", raw)
    assert (
        out.status == "fail"
        and out.reason is not None
        and out.reason.startswith("GPU 1: hw_thermal_slowdown for")
    )
    assert out.metrics["stress_clock_ratio"] == pytest.approx(1755 / 1980)
    eff = parse("efficiency", raw)
    assert eff.status == "pass" and eff.metrics["gemm_tflops_per_watt"] > 0


def test_torch_seeing_fewer_gpus_than_nvml_is_an_error_not_a_smaller_node(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # CUDA_VISIBLE_DEVICES=0 on an 8-GPU node: compute would report GPU 0 alone as the node.
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    c = ctx("hgx-h100-8")
    b = GpuBackend(c, nvml=FakeNvml([h100(i) for i in range(8)]), torch=FakeTorch(devices=1))
    with pytest.raises(
        RuntimeError, match=r"PyTorch sees 1 CUDA device\(s\) and NVML 8 GPU\(s\) \(CUDA_VISIBLE_DEVICES=0\)"
    ):
        b.gemm(["bf16"], 64, 0.01, 1)
    # Health still reads NVML (its PCIe reading falls back to the idle link).
    assert len(b.health()["devices"]) == 8


def test_one_gpu_left_on_a_multi_gpu_sku_is_no_reason_to_skip_the_all_reduce() -> None:
    b = GpuBackend(ctx("hgx-h100-8"), nvml=FakeNvml([h100(0)]), torch=FakeTorch(devices=1))
    with pytest.raises(RuntimeError, match=r"NVML lists 1 GPU\(s\) on a SKU with 8"):
        b.allreduce(None, 1)


# ---------------------------------------------------------------- the real pynvml on old drivers


class StandInLibNvml:
    """Stands in for libnvidia-ml.so.1 under the real pynvml: the C functions pynvml looks up by
    name, answering through their ctypes out-parameters. A driver's library lacks the symbols it
    predates, so pynvml's own lookup raises FUNCTION_NOT_FOUND for them."""

    def __init__(self, masks: list[int], event_reasons: bool) -> None:
        self.masks = masks
        self.calls: list[str] = []
        self.missing: list[str] = []
        functions: dict[str, Callable[..., int]] = {
            "nvmlInitWithFlags": lambda flags: 0,
            "nvmlShutdown": lambda: 0,
            "nvmlDeviceGetCount_v2": lambda out: self._put(out, len(masks)),
            "nvmlDeviceGetHandleByIndex_v2": self._handle,
            "nvmlDeviceGetClockInfo": lambda h, kind, out: self._put(out, 1755),
            "nvmlDeviceGetMaxClockInfo": lambda h, kind, out: self._put(out, 1980),
            "nvmlDeviceGetTemperature": lambda h, sensor, out: self._put(out, 61),
            "nvmlDeviceGetPowerUsage": lambda h, out: self._put(out, 690_000),
            "nvmlDeviceGetTotalEnergyConsumption": lambda h, out: self._put(out, 5_000_000),
            "nvmlDeviceGetCurrPcieLinkGeneration": lambda h, out: self._put(out, 5),
            "nvmlDeviceGetMaxPcieLinkGeneration": lambda h, out: self._put(out, 5),
            "nvmlDeviceGetCurrPcieLinkWidth": lambda h, out: self._put(out, 16),
            "nvmlDeviceGetMaxPcieLinkWidth": lambda h, out: self._put(out, 16),
            # R470-R525 export this name only; R535 added ...EventReasons (same bits) beside it.
            "nvmlDeviceGetCurrentClocksThrottleReasons": self._reasons,
        }
        if event_reasons:
            functions["nvmlDeviceGetCurrentClocksEventReasons"] = self._reasons
        for name, fn in functions.items():
            setattr(self, name, self._logged(name, fn))

    def __getattr__(self, name: str) -> Any:  # only reached for symbols this library lacks
        self.missing.append(name)
        raise AttributeError(name)

    def _logged(self, name: str, fn: Callable[..., int]) -> Callable[..., int]:
        def call(*args: Any) -> int:
            self.calls.append(name)
            return fn(*args)

        return call

    @staticmethod
    def _put(ref: Any, value: int) -> int:
        ref._obj.value = value  # byref(c_uint()) -> the c_uint
        return pynvml.NVML_SUCCESS

    def _handle(self, index: ctypes.c_uint, ref: Any) -> int:
        ctypes.c_void_p.from_buffer(ref._obj).value = index.value + 1
        return pynvml.NVML_SUCCESS

    def _reasons(self, handle: Any, ref: Any) -> int:
        index = int(ctypes.cast(handle, ctypes.c_void_p).value or 0) - 1
        return self._put(ref, self.masks[index])


@pytest.fixture
def libnvml(monkeypatch: pytest.MonkeyPatch) -> Callable[..., StandInLibNvml]:
    """Load the stand-in as the real pynvml's library (pynvml loads none while one is set)."""

    def load(masks: list[int], event_reasons: bool) -> StandInLibNvml:
        lib = StandInLibNvml(masks, event_reasons)
        monkeypatch.setattr(pynvml, "nvmlLib", lib)
        monkeypatch.setattr(pynvml, "_nvmlGetFunctionPointer_cache", {})
        monkeypatch.setattr(pynvml, "_nvmlLib_refcount", 0)
        return lib

    return load


def test_r525_driver_throttle_reasons_come_from_the_old_name(
    libnvml: Callable[..., StandInLibNvml],
) -> None:
    lib = libnvml([0x4, 0x40 | 0x4], event_reasons=False)
    with pytest.raises(pynvml.NVMLError_FunctionNotFound):  # what the new name does on R525
        pynvml.nvmlDeviceGetCurrentClocksEventReasons(None)
    lib.missing.clear()
    nvml = Nvml(pynvml)
    samples = [nvml.sample() for _ in range(10)]
    nvml.close()
    for devices in samples:
        assert [d["nvml_errors"] for d in devices] == [[], []]
        assert [d["throttle_mask"] for d in devices] == [0x4, 0x44]
        assert devices[0]["clock_mhz"] == 1755 and devices[0]["power_w"] == 690.0
    # The new name is tried once; every later sample goes straight to the old one.
    assert lib.missing == ["nvmlDeviceGetCurrentClocksEventReasons"]
    assert lib.calls.count("nvmlDeviceGetCurrentClocksThrottleReasons") == 20
    # ...so stress judges the throttling instead of failing every GPU on NVML errors.
    raw = {
        "interval_s": 1.0,
        "seconds": 10.0,
        "samples": [{"t": float(t), "devices": d} for t, d in enumerate(samples)],
        "work": [
            {"device": i, "flops": 1e15, "seconds": 10.0, "windows_tflops": [700.0] * 10} for i in range(2)
        ],
        "power_source": "nvml",
        "power_unavailable": None,
    }
    out = parse("stress", raw)
    assert not [f for f in out.findings if "NVML" in f], out.findings
    assert out.reason is not None and out.reason.startswith("GPU 1: hw_thermal_slowdown for"), out.findings


def test_r535_driver_throttle_reasons_come_from_the_new_name(
    libnvml: Callable[..., StandInLibNvml],
) -> None:
    lib = libnvml([0x8], event_reasons=True)
    nvml = Nvml(pynvml)
    assert [nvml.sample()[0]["throttle_mask"] for _ in range(3)] == [0x8] * 3
    nvml.close()
    assert lib.calls.count("nvmlDeviceGetCurrentClocksEventReasons") == 3
    assert "nvmlDeviceGetCurrentClocksThrottleReasons" not in lib.calls and lib.missing == []


def test_other_nvml_errors_from_the_new_name_stay_errors() -> None:
    class Lost(FakeNvml):
        def nvmlDeviceGetCurrentClocksEventReasons(self, h: int) -> int:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)

        def nvmlDeviceGetCurrentClocksThrottleReasons(self, h: int) -> int:
            raise AssertionError("only FUNCTION_NOT_FOUND moves to the old name")

    nvml = Nvml(Lost([h100(0)]))
    for _ in range(2):
        d = nvml.sample()[0]
        assert d["throttle_mask"] is None
        assert d["nvml_errors"] == ["nvmlDeviceGetCurrentClocksEventReasons: GPU is lost"]


# ---------------------------------------------------------------- host EDAC on GPU nodes


def test_gpu_health_carries_host_edac_and_thermal_like_the_cpu_backend(tmp_path: Path) -> None:
    root = materialize(
        {
            "devices/system/edac/mc/mc0/ue_count": "0",
            "devices/system/edac/mc/mc0/ce_count": "3",
            "devices/system/edac/mc/mc1/ue_count": "2",
            "devices/system/edac/mc/mc1/ce_count": "0",
            "class/thermal/thermal_zone0/temp": "45000",
            "class/thermal/thermal_zone0/type": "x86_pkg_temp",
        },
        tmp_path,
    )
    raw = backend([h100(i) for i in range(8)], tmp=root).health()
    cpu_raw = CpuBackend(ctx("cpu", sysfs_root=root)).health()
    assert raw["edac"] == cpu_raw["edac"] and raw["edac"]["controllers"][1]["ue_count"] == 2
    assert (
        raw["thermal"]
        == cpu_raw["thermal"]
        == [{"zone": "thermal_zone0", "type": "x86_pkg_temp", "temp_c": 45.0}]
    )
    out = parse("health", raw)
    assert out.status == "fail"
    assert "host memory: 2 uncorrectable ECC errors (EDAC)" in out.findings, out.findings


def test_gpu_health_on_a_host_without_edac() -> None:
    raw = backend([h100(i) for i in range(8)]).health()  # no sysfs tree: no EDAC, no thermal zones
    assert raw["edac"] == {"controllers": []} and raw["thermal"] == []
    assert parse("health", raw).status == "pass"


def test_a_fact_the_drivers_library_predates_is_absent_not_an_error(
    libnvml: Callable[..., StandInLibNvml],
) -> None:
    # The stand-in exports no nvmlDeviceGetGpuMaxPcieLinkGeneration, as a driver older than the
    # function: the device's own maximum generation is not known, the link is still judged.
    lib = libnvml([0x0], event_reasons=True)
    nvml = Nvml(pynvml)
    (link,) = nvml.pcie(under_load=True)
    nvml.close()
    assert "nvmlDeviceGetGpuMaxPcieLinkGeneration" in lib.missing
    assert link["gpu_max_gen"] is None and link["errors"] == []
    assert (link["cur_gen"], link["max_gen"], link["cur_width"], link["max_width"]) == (5, 5, 16, 16)
