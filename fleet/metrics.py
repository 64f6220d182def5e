"""The metric vocabulary shared by burn-in checks, the catalog's references and the gate.

Units live in the names: _tflops TFLOP/s, _gbps GB/s (bytes), _gbitps Gb/s (bits), _mbps MB/s,
_c degrees Celsius, _w watts, _mhz MHz. Counts have no unit suffix.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str
    higher_is_better: bool
    description: str
    # The least distance from the fleet median, in the metric's unit, that can make an outlier.
    # A margin in percent of the median means nothing on a scale whose zero is arbitrary (°C).
    min_outlier_margin: float = 0.0


def _m(
    name: str, unit: str, higher: bool, description: str, min_outlier_margin: float = 0.0
) -> tuple[str, Metric]:
    return name, Metric(name, unit, higher, description, min_outlier_margin)


# Checks the controller reads or writes beside a node's own: the node-side all-reduce across nodes
# (validation/burnin/multinode.py) records MULTINODE_CHECK, and the fleet run's fabric stage appends
# FABRIC_CHECK, with each host's figure over its pairs, to the fetched results.
MULTINODE_CHECK = "multinode_collectives"
MULTINODE_METRIC = "multinode_allreduce_busbw_gbps"
FABRIC_CHECK = "fabric_pairs"
FABRIC_METRIC = "fabric_pair_busbw_gbps"
# The all-reduce launcher's exit when it failed itself (EX_SOFTWARE: what it may have left is not a
# result), and how its skip on a node without PyTorch begins: the controller reads both.
MULTINODE_LAUNCHER_FAILED = 70
MULTINODE_NO_TORCH = "PyTorch is not installed in fleetforge's environment"
# The pairs' RDMA write bandwidth on InfiniBand / RoCE fleets with perftest: the node-side record of
# validation/burnin/pairbw.py, and the host's figure over its pairs beside FABRIC_METRIC.
FABRIC_IB_CHECK = "fabric_pair_ib_write"
FABRIC_IB_METRIC = "fabric_pair_ib_write_gbitps"
# What the fleet run found wrong with a host outside its measurements (a failed task, the host
# lost mid-play), appended to the results it did fetch: a later gate of those files, a --limit
# rerun that keeps the host, rejects it as this run did.
FLEET_RUN_CHECK = "fleet_run"

METRICS: dict[str, Metric] = dict(
    [
        _m("accelerator_count", "count", True, "accelerators the node reports"),
        _m("accelerator_memory_gib", "GiB", True, "memory of the smallest accelerator"),
        _m("host_cpus", "count", True, "logical CPUs of the host"),
        _m("host_memory_gib", "GiB", True, "host memory"),
        _m("gemm_bf16_tflops", "TFLOP/s", True, "dense bf16 matrix multiply, slowest device"),
        _m("gemm_fp16_tflops", "TFLOP/s", True, "dense fp16 matrix multiply, slowest device"),
        _m("gemm_fp8_tflops", "TFLOP/s", True, "dense fp8 matrix multiply, slowest device"),
        _m("gemm_fp32_tflops", "TFLOP/s", True, "dense fp32 matrix multiply, slowest device"),
        _m("mem_copy_gbps", "GB/s", True, "device memory copy, bytes read + written, slowest device"),
        _m("h2d_gbps", "GB/s", True, "pinned host-to-device copy, slowest device"),
        _m("d2h_gbps", "GB/s", True, "pinned device-to-host copy, slowest device"),
        _m("allreduce_busbw_gbps", "GB/s", True, "intra-node all-reduce bus bandwidth (nccl-tests)"),
        _m("multinode_allreduce_busbw_gbps", "GB/s", True, "all-reduce busbw across nodes (torchrun)"),
        _m(
            "fabric_pair_busbw_gbps",
            "GB/s",
            True,
            "all-reduce busbw of the host's best pair in the fabric rounds (torchrun, two hosts)",
        ),
        _m(
            "fabric_pair_ib_write_gbitps",
            "Gb/s",
            True,
            "ib_write_bw of the host's best pair in the fabric rounds, slowest HCA pair (perftest)",
        ),
        _m("fabric_ports_active", "count", True, "high-speed fabric ports in ACTIVE state"),
        _m("fabric_port_rate_gbitps", "Gb/s", True, "slowest active fabric port's link rate"),
        _m("fabric_loopback_gbitps", "Gb/s", True, "perftest loopback write bandwidth, slowest port"),
        _m("storage_read_mbps", "MB/s", True, "sequential read throughput on the checked path"),
        _m("storage_write_mbps", "MB/s", True, "sequential write throughput on the checked path"),
        _m("stress_clock_ratio", "ratio", True, "sustained clock under load / maximum clock, slowest device"),
        _m("stress_throughput_ratio", "ratio", True, "slowest load window / median window under stress"),
        _m("stress_throttle_seconds", "s", False, "time spent thermally or power throttled under load"),
        # NVML reports whole degrees, and a GPU's place in the chassis's airflow alone moves it by a
        # few: 5 % of a 70 °C median (3.5 °C) would reject healthy nodes that sit downstream.
        _m("temperature_max_c", "C", False, "hottest device temperature under load", min_outlier_margin=5.0),
        _m("power_max_w", "W", False, "highest device power draw under load"),
        _m("gemm_tflops_per_watt", "TFLOP/s/W", True, "GEMM throughput per watt drawn"),
        _m("ecc_uncorrectable", "count", False, "uncorrectable ECC errors, all devices"),
        _m("remapped_rows_pending", "count", False, "rows waiting for a reset to be remapped"),
        _m("remapped_rows_failed", "count", False, "row remapping failures"),
        _m("mce_errors", "count", False, "uncorrected machine-check / EDAC errors in the kernel log"),
        _m("xid_errors", "count", False, "XID errors in the kernel log"),
        _m(
            "gpu_fault_events",
            "count",
            False,
            "SXid, fallen-off-the-bus and failed GPU init in the kernel log",
        ),
        _m("dcgm_diag_failed_tests", "count", False, "DCGM diagnostic tests (dcgmi diag) that failed"),
        _m("pcie_degraded_links", "count", False, "devices whose PCIe link trained below its maximum"),
        _m("nvlink_down_links", "count", False, "NVLink links not up"),
    ]
)
