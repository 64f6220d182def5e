"""The GPU backend's code paths with injected NVML and torch stand-ins (no GPU here): what it
collects parses into the right verdicts, including a GPU that computes wrong answers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pynvml
import pytest

from tests.validation.burnin.fakes import FakeNvml, FakeTorch, h100
from tests.validation.burnin.helpers import ctx
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
