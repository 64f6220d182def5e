"""The CPU backend measures for real (small sizes here): GEMM checked against float64, memory
copy, the shared-memory ring all-reduce, storage with fsync, and a sampled load."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from tests.validation.burnin.helpers import ctx, materialize
from validation.burnin.backends import Unsupported, make_backend
from validation.burnin.backends.cpu import CpuBackend, verify_rows
from validation.burnin.checks import REGISTRY
from validation.burnin.probes.allreduce_cpu import allreduce, bus_factor
from validation.burnin.probes.storage_io import measure


@pytest.fixture
def cpu() -> CpuBackend:
    backend = make_backend(ctx("cpu"))
    assert isinstance(backend, CpuBackend)
    return backend


def test_gemm_measures_and_verifies(cpu: CpuBackend) -> None:
    raw = cpu.gemm(["bf16", "fp32"], n=192, seconds=0.1, buffers=2)
    assert raw["unsupported"] == {"bf16": "numpy has no bf16 matrix multiply on this CPU backend"}
    dev = raw["results"][0]["devices"][0]
    assert dev["iters"] >= 1 and dev["tflops"] > 0
    assert dev["max_scaled_err"] < 1e-5 and dev["nonfinite"] == 0
    out = REGISTRY.get("compute").parse(raw, ctx("cpu", thresholds={"gemm_fp32_tflops": {"floor": 0}}))
    assert out.status == "pass" and out.metrics["gemm_fp32_tflops"] == dev["tflops"]


def test_verify_rows_catches_a_wrong_product() -> None:
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((64, 64), dtype=np.float32), rng.standard_normal((64, 64), dtype=np.float32)
    c = a @ b
    rows = np.arange(8)
    assert verify_rows(a, b, c, rows)[0] < 1e-5
    c[5, 17] = -64 * c[5, 17]  # one wrong element, as a flipped exponent bit leaves it
    assert verify_rows(a, b, c, rows)[0] > 1e-2
    c[6, 3] = np.inf
    assert verify_rows(a, b, c, rows)[1] == 1


def test_memory_copy(cpu: CpuBackend) -> None:
    raw = cpu.mem_copy(8 * 2**20, seconds=0.05)
    dev = raw["devices"][0]
    assert dev["intact"] and dev["gbps"] > 0 and dev["bytes"] == 8 * 2**20


def test_host_device_does_not_exist_on_a_cpu(cpu: CpuBackend) -> None:
    with pytest.raises(Unsupported, match="no device memory"):
        cpu.host_device(None, 1.0)


@pytest.mark.parametrize("world", [2, 3])
def test_ring_allreduce_is_exact_and_timed(world: int) -> None:
    raw = allreduce(world, 3 * 2**20 + 12, iters=3, seed=5, timeout=60, use_torch=False)
    assert raw["impl"] == "numpy-shm-ring" and raw["correct"] is True
    assert raw["exit_codes"] == [0] * world and len(raw["times_s"]) == 3 and min(raw["times_s"]) > 0
    assert raw["bytes"] % (4 * world) == 0
    # Judged with no floor: a 3 MiB ring on a busy machine is no measure of the cpu SKU's, only
    # of the parse (the floor itself is judged in test_check_parse, on captured figures).
    out = REGISTRY.get("collectives").parse(
        raw, ctx("cpu", thresholds={"allreduce_busbw_gbps": {"floor": 0}})
    )
    assert out.status == "pass" and out.metrics["allreduce_busbw_gbps"] > 0
    assert bus_factor(8) == 1.75


def test_gloo_allreduce_when_torch_is_installed() -> None:
    pytest.importorskip("torch")
    raw = allreduce(2, 2**20, iters=3, seed=5, timeout=120, use_torch=True)
    assert raw["impl"] == "torch-gloo" and raw["correct"] is True


def test_storage_python_path_writes_reads_and_cleans_up(tmp_path: Path) -> None:
    raw = measure(tmp_path, 8 * 2**20 + 5, 2**20, prefer_fio=False)
    assert raw["method"] in {"python-odirect", "python-fadvise"}
    assert raw["bytes"] == 8 * 2**20 and raw["mismatched_blocks"] == 0
    assert raw["write_s"] > 0 and raw["read_s"] > 0
    assert list(tmp_path.iterdir()) == []  # the test file is gone
    out = REGISTRY.get("storage").parse(raw, ctx("cpu"))
    assert set(out.metrics) == {"storage_read_mbps", "storage_write_mbps"}


def test_storage_refuses_a_full_disk_and_a_missing_path(tmp_path: Path) -> None:
    with pytest.raises(OSError, match="free"):
        measure(tmp_path, 2**62, 2**20, prefer_fio=False)
    with pytest.raises(NotADirectoryError):
        measure(tmp_path / "nope", 2**20, 2**20)


def test_load_and_sample_reads_captured_telemetry(tmp_path: Path) -> None:
    tree = {
        "devices/system/cpu/cpu0/cpufreq/scaling_cur_freq": "3100000",
        "devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq": "3700000",
        "devices/system/cpu/cpu0/thermal_throttle/core_throttle_count": "0",
        "class/thermal/thermal_zone0/type": "x86_pkg_temp",
        "class/thermal/thermal_zone0/temp": "64000",
        "class/powercap/intel-rapl:0/name": "package-0",
        "class/powercap/intel-rapl:0/energy_uj": "1000000",
        "class/powercap/intel-rapl:0/max_energy_range_uj": "262143328850",
        "class/powercap/intel-rapl:0:0/energy_uj": "5",
    }
    backend = CpuBackend(ctx("cpu", sysfs_root=materialize(tree, tmp_path)))
    raw = backend.load_and_sample(seconds=0.5, interval_s=0.1, need_power=True)
    first = raw["samples"][0]["devices"][0]
    assert first["clock_mhz"] == 3100 and first["max_clock_mhz"] == 3700 and first["temp_c"] == 64
    assert first["energy_uj"] == [1000000.0]  # the package zone only, not its sub-zone
    assert raw["power_source"] == "rapl" and raw["work"][0]["flops"] > 0
    out = REGISTRY.get("stress").parse(raw, ctx("cpu"))
    assert out.metrics["stress_clock_ratio"] == pytest.approx(3100 / 3700)
    assert out.metrics["stress_throttle_seconds"] == 0 and out.metrics["temperature_max_c"] == 64


def test_efficiency_skips_without_power(tmp_path: Path) -> None:
    backend = CpuBackend(ctx("cpu", sysfs_root=tmp_path))
    with pytest.raises(Unsupported, match="RAPL"):
        backend.load_and_sample(seconds=0.2, interval_s=0.1, need_power=True)


def test_inventory_and_health_of_this_host(cpu: CpuBackend) -> None:
    inv = REGISTRY.get("inventory").parse(cpu.inventory(), ctx("cpu"))
    assert inv.status == "pass" and inv.metrics["host_cpus"] == os.cpu_count()
    assert inv.versions["kernel"] == os.uname().release
    raw = cpu.health()
    assert raw["devices"] == [] and "kernel_log" in raw
