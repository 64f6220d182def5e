"""parse() of every check on captured outputs, good and bad: health (ECC, remapped rows, XIDs,
PCIe downtraining, NVLink), fabric (IB port down / wrong rate, EFA, RoCE, gVNIC), stress
(throttle reasons), compute (silent data corruption), inventory, storage, collectives."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from tests.validation.burnin.helpers import ctx, fixture_json, fixture_text, materialize
from validation.burnin.checks import REGISTRY
from validation.burnin.outcome import CheckOutcome
from validation.burnin.probes.host import HostProbe

H100 = "hgx-h100-8"


def parse(check: str, raw: dict[str, Any], sku: str = H100, **kw: Any) -> CheckOutcome:
    return REGISTRY.get(check).parse(raw, ctx(sku, **kw))


# ------------------------------------------------------------------ health


def with_log(raw: dict[str, Any], rel: str) -> dict[str, Any]:
    raw = copy.deepcopy(raw)
    raw["kernel_log"] = {"source": "dmesg", "lines": fixture_text(rel).splitlines()}
    return raw


def test_health_good_h100_node_passes_with_every_health_metric() -> None:
    out = parse("health", fixture_json("nvml/health_h100_good.json"))
    assert out.status == "pass", out.findings
    assert out.metrics == {
        "ecc_uncorrectable": 0,
        "remapped_rows_pending": 0,
        "remapped_rows_failed": 0,
        "pcie_degraded_links": 0,
        "nvlink_down_links": 0,
        "temperature_max_c": 34,
        "mce_errors": 0,
        "xid_errors": 0,
        "gpu_fault_events": 0,
    }
    assert len(out.per_device["temperature_max_c"]) == 8


def test_a_pcie_link_narrow_or_slow_at_idle_is_noted_not_judged() -> None:
    # GPUs narrow the link and drop its generation when idle to save power: read without load (the
    # fallback when PyTorch cannot start), neither is a fault.
    raw = fixture_json("nvml/health_pcie_downtrained.json")
    for device in raw["devices"]:
        if device.get("pcie"):
            device["pcie"]["under_load"] = False
    out = parse("health", raw)
    assert out.metrics["pcie_degraded_links"] == 0 and out.status == "pass", out.findings
    assert any(
        "GPU 2: PCIe link x8 at idle (maximum x16); not judged without load" in f for f in out.findings
    )


def test_health_is_read_again_after_the_load_checks_and_judged_the_same_way() -> None:

    order = [c.name for c in REGISTRY.for_level("standard")]
    loads = ("compute", "memory", "host_device", "collectives", "stress", "efficiency", "dcgm_diag")
    assert order[-1] == "health_after_load" and all(
        order.index(n) < order.index("health_after_load") for n in loads
    )
    for level in ("quick", "standard", "extended"):
        assert "health_after_load" in [c.name for c in REGISTRY.for_level(level)]
    assert REGISTRY.get("health_after_load").reads_the_run and not REGISTRY.get("health").reads_the_run
    # An uncorrectable ECC error the load raised fails the node from the closing read.
    out = parse("health_after_load", fixture_json("nvml/health_ecc_uncorrectable.json"))
    assert out.status == "fail" and out.metrics["ecc_uncorrectable"] == 2
    hot = fixture_json("nvml/health_ecc_uncorrectable.json")
    hot["devices"][0].update(temp_c=90, slowdown_temp_c=87)
    assert any(
        "90 C after the load checks, at or above" in f for f in parse("health_after_load", hot).findings
    )
    assert any("90 C at idle, at or above" in f for f in parse("health", hot).findings)


@pytest.mark.parametrize(
    ("fixture", "metric", "value", "finding"),
    [
        ("health_ecc_uncorrectable", "ecc_uncorrectable", 2, "GPU 3: 2 uncorrectable ECC errors"),
        ("health_remapped_rows", "remapped_rows_pending", 1, "GPU 1: row remapping pending"),
        ("health_remapped_rows", "remapped_rows_failed", 1, "GPU 6: row remapping failed"),
        ("health_retired_pages_pending", "remapped_rows_pending", 1, "GPU 0: retired pages pending"),
        ("health_pcie_downtrained", "pcie_degraded_links", 2, "GPU 2: PCIe link x8 under load, maximum x16"),
        ("health_pcie_downtrained", "pcie_degraded_links", 2, "GPU 5: PCIe gen 3 under load, maximum gen 5"),
        ("health_nvlink_down", "nvlink_down_links", 2, "GPU 4: NVLink 7 is down"),
    ],
)
def test_health_faults_fail_the_node(fixture: str, metric: str, value: float, finding: str) -> None:
    out = parse("health", fixture_json(f"nvml/{fixture}.json"))
    assert out.status == "fail"
    assert out.metrics[metric] == value
    assert any(f.startswith(finding) for f in out.findings), out.findings
    assert out.reason and finding.split(":")[0] in out.reason


def test_pcie_gen_at_idle_is_not_downtraining() -> None:
    out = parse("health", fixture_json("nvml/health_pcie_idle_gen1.json"))
    assert out.status == "pass"
    assert out.metrics["pcie_degraded_links"] == 0
    assert any("PCIe gen 1 at idle" in f for f in out.findings)


def test_a_lost_gpu_fails_on_its_nvml_errors_not_on_missing_zeros() -> None:
    out = parse("health", fixture_json("nvml/health_gpu_lost.json"))
    assert out.status == "fail"
    assert any(f == "GPU 7: NVML nvmlDeviceGetTotalEccErrors: GPU is lost" for f in out.findings)
    assert any("GPU 7: no NVLink reported on an NVSwitch SKU" in f for f in out.findings)


def test_xids_from_dmesg_are_mapped_to_devices_and_application_xids_only_noted() -> None:
    raw = fixture_json("nvml/health_h100_good.json")
    raw["devices"][1]["bus_id"] = "00000000:1B:00.0"
    raw["devices"][4]["bus_id"] = "00000000:52:00.0"
    out = parse("health", with_log(raw, "kernlog/dmesg_xid.txt"))
    assert out.status == "fail"
    assert out.metrics["xid_errors"] == 4
    assert (
        "GPU 1 (0000:1b:00): XID 79 pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
        in out.findings
    )
    assert any(f.startswith("GPU 4 (0000:52:00): XID 48") for f in out.findings)
    assert any(f.startswith("GPU 4 (0000:52:00): XID 63") for f in out.findings)
    # XID 13 on a bus no GPU of the inventory owns: named by its PCI address, noted only.
    assert any(
        f.startswith("PCI 0000:43:00: XID 13") and f.endswith("(usually an application error)")
        for f in out.findings
    )


def test_xids_from_the_journal() -> None:
    out = parse("health", with_log(fixture_json("nvml/health_h100_good.json"), "kernlog/journal_xid.txt"))
    assert out.metrics["xid_errors"] == 2
    assert out.status == "fail"  # 94 is a contained ECC error: hardware
    assert any(f.startswith("GPU 4 (0000:9a:00): XID 94") for f in out.findings)
    assert any(f.startswith("GPU 4 (0000:9a:00): XID 31") and "application" in f for f in out.findings)


def test_clean_kernel_log_and_unreadable_kernel_log() -> None:
    assert (
        parse(
            "health", with_log(fixture_json("nvml/health_h100_good.json"), "kernlog/dmesg_clean.txt")
        ).status
        == "pass"
    )
    # Nothing else wrong: not measured, so an error (a resume reads it again), what was read kept.
    out = parse("health", fixture_json("nvml/health_no_kernel_log.json"))
    assert out.status == "error" and "XID errors and machine checks cannot be ruled out" in (out.reason or "")
    assert out.metrics["ecc_uncorrectable"] == 0


def test_machine_checks_and_edac_on_a_cpu_host() -> None:
    raw = {
        "devices": [],
        "kernel_log": {"source": "dmesg", "lines": fixture_text("kernlog/mce.txt").splitlines()},
        "edac": {
            "controllers": [
                {"mc": "mc0", "ue_count": 0, "ce_count": 3},
                {"mc": "mc1", "ue_count": 1, "ce_count": 0},
            ]
        },
        "thermal": [{"zone": "thermal_zone0", "type": "x86_pkg_temp", "temp_c": 48.0}],
    }
    out = parse("health", raw, sku="cpu")
    assert out.status == "fail"
    # Two events: a corrected one (EDAC CE after the "events logged" header) and one whose bank
    # status has UC and PCC set, decoded by EDAC as UE on the next line: counted once.
    assert out.metrics == {"mce_errors": 1, "ecc_uncorrectable": 1, "temperature_max_c": 48.0}
    assert "host memory: 3 corrected ECC errors (EDAC)" in out.findings
    assert any("Machine Check Exception" in f for f in out.findings)
    clean = {
        "devices": [],
        "kernel_log": {"source": "dmesg", "lines": []},
        "edac": {"controllers": []},
        "thermal": [],
    }
    assert parse("health", clean, sku="cpu").status == "pass"


# ------------------------------------------------------------------ fabric


def fabric_raw(tmp_path: Path, tree: str, loopback: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    root = materialize(fixture_json(f"sysfs/{tree}.json"), tmp_path / "sys")
    probe = HostProbe(sysfs_root=root)
    return {
        "ports": probe.fabric_ports(),
        "net": probe.net_interfaces(),
        "loopback": loopback or [],
        "perftest": None,
    }


def test_fabric_good_ndr_node(tmp_path: Path) -> None:
    out = parse("fabric", fabric_raw(tmp_path, "ib_ndr_good"))
    assert out.status == "pass", out.findings
    assert out.metrics == {"fabric_ports_active": 8, "fabric_port_rate_gbitps": 400}


def test_fabric_port_down_fails_and_names_the_port(tmp_path: Path) -> None:
    out = parse("fabric", fabric_raw(tmp_path, "ib_port_down"))
    assert out.status == "fail"
    assert out.metrics["fabric_ports_active"] == 7
    assert "7 of 8 expected InfiniBand ports ACTIVE at 400 Gb/s (7 active)" in out.findings
    assert "mlx5_3 port 1: state DOWN, physical POLLING, rate 10 Gb/s (want 400)" in out.findings


def test_fabric_port_at_the_wrong_rate_fails(tmp_path: Path) -> None:
    out = parse("fabric", fabric_raw(tmp_path, "ib_wrong_rate"))
    assert out.status == "fail"
    assert out.metrics["fabric_port_rate_gbitps"] == 200
    assert any(
        f.startswith("mlx5_5 port 1: state ACTIVE") and "rate 200 Gb/s (want 400)" in f for f in out.findings
    )


def test_fabric_efa_roce_and_gvnic(tmp_path: Path) -> None:
    efa = parse("fabric", fabric_raw(tmp_path / "efa", "efa_p5en"), sku="p5en.48xlarge")
    assert efa.status == "pass" and efa.metrics["fabric_ports_active"] == 16
    roce = parse("fabric", fabric_raw(tmp_path / "roce", "roce_a3_ultra"), sku="a3-ultragpu-8g")
    assert roce.status == "pass" and roce.metrics["fabric_port_rate_gbitps"] == 400
    # An InfiniBand SKU on a node whose HCAs run Ethernet has none of its ports.
    wrong = parse("fabric", fabric_raw(tmp_path / "roce2", "roce_a3_ultra"))
    assert wrong.status == "error" and "no InfiniBand ports found" in (wrong.reason or "")
    gve = parse("fabric", fabric_raw(tmp_path / "gve", "gvnic_a3_mega_eth6_down"), sku="a3-megagpu-8g")
    assert gve.status == "fail"
    assert "8 of 9 expected gve NICs ACTIVE at 200 Gb/s (8 active)" in gve.findings


def test_fabric_loopback_bandwidth(tmp_path: Path) -> None:
    runs = [
        {"device": "mlx5_0", "port": 1, "rc": 0, "output": fixture_text("perftest/ib_write_bw_ndr.txt")},
        {"device": "mlx5_3", "port": 1, "rc": 0, "output": fixture_text("perftest/ib_write_bw_mbps.txt")},
    ]
    out = parse("fabric", fabric_raw(tmp_path, "ib_ndr_good", runs))
    # perftest's MB/sec is 2^20 bytes per second: 24301.87 MB/sec x 2^20 x 8 / 10^9.
    assert out.per_device["fabric_loopback_gbitps"] == [385.71, pytest.approx(203.858861)]
    assert out.metrics["fabric_loopback_gbitps"] == pytest.approx(203.858861)
    failed = [
        {"device": "mlx5_1", "port": 1, "rc": 1, "output": fixture_text("perftest/ib_write_bw_failed.txt")}
    ]
    out = parse("fabric", fabric_raw(tmp_path / "b", "ib_ndr_good", failed))
    assert out.status == "fail" and "mlx5_1 port 1: ib_write_bw loopback failed" in (out.reason or "")


def test_fabric_floor_from_spec_override(tmp_path: Path) -> None:
    runs = [{"device": "mlx5_0", "port": 1, "rc": 0, "output": fixture_text("perftest/ib_write_bw_ndr.txt")}]
    out = parse(
        "fabric",
        fabric_raw(tmp_path, "ib_ndr_good", runs),
        thresholds={"fabric_loopback_gbitps": {"floor": 390}},
    )
    assert out.status == "fail"
    assert out.reason == "fabric_loopback_gbitps 385.7 below floor 390 (spec floor 390)"


# ------------------------------------------------------------------ stress and efficiency


def test_stress_software_power_cap_is_normal_under_load() -> None:
    out = parse("stress", fixture_json("stress/gpu_power_cap.json"))
    assert out.status == "pass", out.findings
    assert out.metrics["stress_throttle_seconds"] == 0
    assert out.metrics["stress_clock_ratio"] == pytest.approx(1755 / 1980)
    assert out.metrics["power_max_w"] == 690
    assert out.metrics["stress_throughput_ratio"] == pytest.approx(748.5 / 750.3)
    assert any("software power cap" in f for f in out.findings)


def test_stress_thermal_slowdown_fails_the_node() -> None:
    out = parse("stress", fixture_json("stress/gpu_hw_thermal.json"))
    assert out.status == "fail"
    assert out.reason == "GPU 5: hw_thermal_slowdown for 8 s under load"
    assert out.metrics["stress_throttle_seconds"] == 8
    assert out.per_device["stress_throttle_seconds"][5] == 8 and out.metrics["temperature_max_c"] == 87


def test_stress_power_brake_fails_the_node() -> None:
    out = parse("stress", fixture_json("stress/gpu_power_brake.json"))
    assert out.status == "fail" and "GPU 2: hw_power_brake_slowdown for 3 s" in (out.reason or "")


def test_stress_a_gpu_nvml_cannot_read_under_load_fails_the_node() -> None:
    raw = fixture_json("stress/gpu_power_cap.json")
    for sample in raw["samples"]:
        lost = dict.fromkeys(("clock_mhz", "max_clock_mhz", "temp_c", "power_w", "energy_j", "throttle_mask"))
        sample["devices"][3] = {**lost, "pcie_gen": None, "nvml_errors": ["GPU is lost"]}
    out = parse("stress", raw)
    assert out.status == "fail"
    assert (
        f"GPU 3: NVML GPU is lost in {len(raw['samples'])} of {len(raw['samples'])} samples" in out.findings
    )


def test_stress_judges_every_gpu_the_telemetry_lists_not_only_those_the_load_reached() -> None:
    # The load saw one device (torch), the telemetry eight (NVML); GPU 5 slowed down for heat.
    raw = fixture_json("stress/gpu_hw_thermal.json")
    raw["work"] = raw["work"][:1]
    out = parse("stress", raw)
    assert out.status == "fail" and out.reason == "GPU 5: hw_thermal_slowdown for 8 s under load"


def test_stress_cpu_thermal_throttle_counters() -> None:
    out = parse("stress", fixture_json("stress/cpu_thermal_throttle.json"), sku="cpu")
    assert out.status == "fail"
    assert out.metrics["stress_throttle_seconds"] == pytest.approx(1.08)
    assert out.metrics["stress_clock_ratio"] == pytest.approx(3100 / 3700)  # median of the steady part
    assert out.metrics["power_max_w"] == 200


def test_stress_too_short_by_its_settings_is_refused_even_when_the_load_overran() -> None:
    # Asked for 0.4 s in 0.2 s windows (2 windows, the ratio needs 4); one GEMM on a busy machine
    # stretched the load to 0.9 s and 3 samples, as seen in CI. The settings decide, not the clock.
    raw = {
        "interval_s": 0.2,
        "seconds": 0.9,
        "samples": [{"t": t, "devices": [{"clock_mhz": 3000.0}]} for t in (0.2, 0.4, 0.6)],
        "work": [{"device": "cpu", "flops": 1e9, "seconds": 0.9, "windows_tflops": [0.1, 0.1, 0.1]}],
    }
    out = parse("stress", raw, sku="cpu", options={"stress": {"seconds": 0.4, "interval_s": 0.2}})
    assert out.status == "error" and "0.4 s of load in windows of 0.2 s" in (out.reason or "")
    assert "needs at least 4 windows" in (out.reason or "")


def test_efficiency_refuses_to_pair_work_and_power_of_different_device_counts() -> None:
    raw = fixture_json("stress/gpu_power_cap.json")
    raw["work"] = raw["work"][:1]
    out = parse("efficiency", raw)
    assert out.status == "error" and out.reason == "the load ran on 1 device(s), the power telemetry lists 8"


def test_efficiency_from_energy_counters_and_skip_without_power() -> None:
    out = parse("efficiency", fixture_json("stress/gpu_power_cap.json"))
    tflops = 2 * 8192**3 * 4800 / 12 / 1e12
    assert out.status == "pass"
    assert out.metrics["gemm_tflops_per_watt"] == pytest.approx(tflops / 690)
    assert out.per_device["gemm_tflops_per_watt"][7] == pytest.approx(tflops / 683)
    raw = fixture_json("stress/gpu_power_cap.json") | {"power_unavailable": "no RAPL"}
    assert parse("efficiency", raw).status == "skip"


# ------------------------------------------------------------------ compute


def gemm_raw(dtypes: tuple[str, ...] = ("bf16", "fp16", "fp8", "fp32"), **device: Any) -> dict[str, Any]:
    tflops = {"bf16": 780.0, "fp16": 790.0, "fp8": 1500.0, "fp32": 52.0}
    return {
        "results": [
            {
                "dtype": d,
                "n": 8192,
                "devices": [
                    {
                        "device": i,
                        "tflops": tflops[d] - i,
                        "max_scaled_err": 1e-3 if d != "fp32" else 1e-7,
                        "nonfinite": 0,
                        "checksum": 12.5,
                        **(device if i == 6 else {}),
                    }
                    for i in range(8)
                ],
            }
            for d in dtypes
        ],
        "unsupported": {},
    }


def test_compute_good_node_passes_every_reference_floor() -> None:
    out = parse("compute", gemm_raw())
    assert out.status == "pass", out.findings
    assert out.metrics["gemm_bf16_tflops"] == 773.0
    assert out.per_device["gemm_fp8_tflops"][0] == 1500.0


def test_compute_silent_data_corruption_fails_even_when_fast() -> None:
    out = parse("compute", gemm_raw(max_scaled_err=0.31))
    assert out.status == "fail"
    assert any(
        f.startswith("GPU 6 bf16: product differs from the float64 reference by 3.10e-01")
        for f in out.findings
    )
    nan = parse("compute", gemm_raw(nonfinite=12))
    assert nan.status == "fail" and "GPU 6 bf16: 12 NaN/Inf values" in (nan.reason or "")


def test_compute_peer_checksum_outlier() -> None:
    out = parse("compute", gemm_raw(checksum=12.75))
    assert out.status == "fail"
    assert any("GPU 6 bf16: product checksum 12.75 differs from 7 of 8 peers" in f for f in out.findings)


def test_compute_missing_reference_dtype_and_low_tflops_fail() -> None:
    no_fp8 = gemm_raw(("bf16", "fp16", "fp32"))
    no_fp8["unsupported"] = {"fp8": "not supported by this GPU / PyTorch build"}
    out = parse("compute", no_fp8)
    assert out.status == "fail"
    assert "gemm_fp8_tflops: the SKU has a reference for it but it was not measured" in out.findings
    slow = gemm_raw(tflops=400.0)
    out = parse("compute", slow)
    assert out.reason is not None and out.reason.startswith(
        "gemm_bf16_tflops 400 below floor 593.4 (reference 989 x 0.6)"
    )
    # The spec may lower the fraction (a fleet of power-capped nodes).
    assert (
        parse(
            "compute",
            slow,
            thresholds={
                m: {"fraction": 0.2} for m in ("gemm_bf16_tflops", "gemm_fp16_tflops", "gemm_fp8_tflops")
            },
        ).status
        == "pass"
    )


# ------------------------------------------------------------------ inventory, memory, host-device, collectives, storage


def nvml_inventory(names: list[str], mem_gib: float = 79.65, vbios: str = "96.00.99.00.01") -> dict[str, Any]:
    return {
        "devices": [
            {
                "index": i,
                "name": n,
                "memory_bytes": mem_gib * 2**30,
                "vbios": vbios,
                "firmware": "G520.0200.00.05",
                "bus_id": f"00000000:{i:02X}:00.0",
                "nvml_errors": [],
            }
            for i, n in enumerate(names)
        ],
        "versions": {"driver": "550.90.07", "cuda": "12.4", "kernel": "6.8.0-49-generic"},
        "nvml_errors": [],
        "host": {"cpus": 224, "memory_bytes": 2000 * 2**30, "cpu_model": "Intel(R) Xeon(R) Platinum 8480C"},
    }


def test_inventory_good_and_bad() -> None:
    good = parse("inventory", nvml_inventory(["NVIDIA H100 80GB HBM3"] * 8))
    assert good.status == "pass", good.findings
    assert good.metrics["accelerator_count"] == 8 and good.versions["driver"] == "550.90.07"
    assert good.versions["vbios"] == "96.00.99.00.01" and good.versions["firmware"] == "G520.0200.00.05"
    seven = parse("inventory", nvml_inventory(["NVIDIA H100 80GB HBM3"] * 7))
    assert seven.status == "fail" and "7 accelerators found; hgx-h100-8 has 8" in (seven.reason or "")
    a100 = parse("inventory", nvml_inventory(["NVIDIA A100-SXM4-80GB"] * 8))
    assert a100.status == "fail" and "GPU 0 is 'NVIDIA A100-SXM4-80GB', not a H100-SXM5-80GB" in a100.findings
    small = parse("inventory", nvml_inventory(["NVIDIA H100 80GB HBM3"] * 8, mem_gib=39.4))
    assert small.status == "fail"
    mixed = nvml_inventory(["NVIDIA H100 80GB HBM3"] * 8)
    mixed["devices"][5]["vbios"] = "96.00.74.00.1C"
    out = parse("inventory", mixed)
    assert (
        out.status == "fail"
        and "mixed vbios versions within the node: 96.00.74.00.1C, 96.00.99.00.01" in out.findings
    )


def test_a_gpu_whose_memory_size_is_unreadable_is_named_and_the_others_keep_their_own_figures() -> None:
    raw = nvml_inventory(["NVIDIA H100 80GB HBM3"] * 8)
    raw["devices"][2]["memory_bytes"] = None
    out = parse("inventory", raw)
    assert out.status == "fail" and out.findings == ["GPU 2: memory size not reported"]
    raw["devices"][5]["memory_bytes"] = 40 * 2**30
    out = parse("inventory", raw)
    assert "GPU 5 has 40.0 GiB; H100-SXM5-80GB has 80 (at least 76.0 expected)" in out.findings, out.findings
    assert not [f for f in out.findings if f.startswith("GPU 4 ")]


def test_inventory_cloud_host_facts() -> None:
    raw = nvml_inventory(["NVIDIA H200"] * 8, mem_gib=140.4)
    raw["host"] = {"cpus": 96, "memory_bytes": 1500 * 2**30}
    out = parse("inventory", raw, sku="Standard_ND96isr_H200_v5")
    assert out.status == "fail" and "1500 GiB host memory; Standard_ND96isr_H200_v5 has 1850" in (
        out.reason or ""
    )


def test_memory_host_device_and_collectives() -> None:
    mem = {
        "devices": [
            {"device": i, "bytes": 2**31, "gbps": 4300.0 - 10 * i, "intact": i != 3} for i in range(8)
        ]
    }
    out = parse("memory", mem, sku="hgx-h200-8")
    assert out.status == "fail" and out.findings[0] == "GPU 3: copied data differs from its source"
    assert out.metrics["mem_copy_gbps"] == 4230.0
    hd = {
        "bytes": 2**30,
        "devices": [{"device": i, "h2d_gbps": 55.0, "d2h_gbps": 41.0 if i == 4 else 55.0} for i in range(8)],
    }
    out = parse("host_device", hd, sku="hgx-h200-8")
    assert out.status == "fail" and out.reason == "d2h_gbps 41 below floor 48 (reference 48 x 1)"
    ar = {
        "impl": "nccl",
        "world": 8,
        "bytes": 8 * 2**30,
        "iters": 3,
        "times_s": [0.0341, 0.0339, 0.0345],
        "correct": True,
        "exit_codes": [0] * 8,
    }
    out = parse("collectives", ar, sku="hgx-h200-8")
    busbw = 8 * 2**30 / 0.0341 / 1e9 * 2 * 7 / 8
    assert out.metrics["allreduce_busbw_gbps"] == pytest.approx(busbw) and out.status == "pass"
    assert parse("collectives", ar | {"correct": False}, sku="hgx-h200-8").status == "fail"
    assert (
        parse("collectives", ar | {"exit_codes": [0, 0, 1, 0, 0, 0, 0, 0]}, sku="hgx-h200-8").status
        == "error"
    )


def test_storage_fio_and_python_outputs() -> None:
    fio = {
        "method": "fio",
        "path": "/lustre",
        "bytes": 2**31,
        "write": {"rc": 0, "output": fixture_text("fio/seq_write.json")},
        "read": {"rc": 0, "output": fixture_text("fio/seq_read.json")},
    }
    out = parse("storage", fio, sku="cpu")
    assert out.metrics == {"storage_write_mbps": 1864.135111, "storage_read_mbps": 3221.225472}
    broken = copy.deepcopy(fio)
    broken["read"]["output"] = fixture_text("fio/job_error.json")
    assert parse("storage", broken, sku="cpu").status == "error"
    py = {
        "method": "python-fadvise",
        "path": "/tmp",
        "bytes": 2**27,
        "write_s": 0.5,
        "read_s": 0.25,
        "mismatched_blocks": 2,
    }
    out = parse("storage", py, sku="cpu")
    assert out.status == "fail" and out.metrics["storage_read_mbps"] == pytest.approx(2**27 / 0.25 / 1e6)
    assert "2 blocks read back differ from what was written" in out.findings


# ------------------------------------------------------------------ no pass without measuring


@pytest.mark.parametrize("check", REGISTRY.names())
@pytest.mark.parametrize("sku", ["cpu", H100])
def test_no_check_passes_on_an_empty_collection(check: str, sku: str) -> None:
    try:
        out = parse(check, {}, sku=sku)
    except (KeyError, TypeError, ValueError):
        return  # the worker records a parse that raises as an error
    assert out.status != "pass"
