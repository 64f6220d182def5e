"""CPU throttle counters under load: each package's and each physical core's counter is read once
(a CPU's package_* counter is its package's, repeated in every CPU; SMT siblings share core_*), the
seconds are real seconds from the *_time_ms counters, and an event count is never turned into
seconds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.validation.burnin.helpers import ctx, materialize
from validation.burnin.checks import REGISTRY
from validation.burnin.probes.host import HostProbe

# 2 packages x 2 cores x 2 SMT threads: cpu<p*4 + c*2 + t>.
CPUS = [(p, c, t) for p in range(2) for c in range(2) for t in range(2)]


def tree(package_ms: list[float], core_ms: list[list[float]], counts_only: bool = False) -> dict[str, str]:
    files: dict[str, str] = {}
    for p, c, t in CPUS:
        cpu = f"devices/system/cpu/cpu{p * 4 + c * 2 + t}"
        files[f"{cpu}/topology/physical_package_id"] = str(p)
        files[f"{cpu}/topology/core_id"] = str(c)
        files[f"{cpu}/cpufreq/scaling_cur_freq"] = "3000000"
        files[f"{cpu}/cpufreq/cpuinfo_max_freq"] = "3000000"
        kind = "count" if counts_only else "total_time_ms"
        files[f"{cpu}/thermal_throttle/package_throttle_{kind}"] = f"{package_ms[p]:g}"
        files[f"{cpu}/thermal_throttle/core_throttle_{kind}"] = f"{core_ms[p][c]:g}"
    return files


def sample(root: Path, files: dict[str, str]) -> dict[str, Any]:
    return HostProbe(sysfs_root=materialize(files, root)).cpu_telemetry()


def stress(first: dict[str, Any], last: dict[str, Any]) -> Any:
    raw = {
        "interval_s": 0.5,
        "seconds": 5.0,
        "samples": [{"t": 0.0, "devices": [first]}, {"t": 5.0, "devices": [last]}],
        "work": [{"device": "cpu", "flops": 1e12, "seconds": 5.0, "windows_tflops": [1.0] * 10}],
    }
    return REGISTRY.get("stress").parse(raw, ctx("cpu"))


def test_each_package_and_core_counter_is_read_once(tmp_path: Path) -> None:
    got = sample(tmp_path, tree([1000, 2000], [[10, 20], [30, 40]]))
    assert got["throttle_ms_by"] == {
        "package0": 1000,
        "core0.0": 10,
        "core0.1": 20,
        "package1": 2000,
        "core1.0": 30,
        "core1.1": 40,
    }
    assert got["throttle_ms"] == 3100  # not 4 x 3000 + 2 x 100


def test_throttled_seconds_are_the_longest_counter_not_a_sum_over_cpus(tmp_path: Path) -> None:
    first = sample(tmp_path / "a", tree([1000, 2000], [[10, 20], [30, 40]]))
    # Package 0 throttled 300 ms during the load, its core 0 200 ms of them.
    last = sample(tmp_path / "b", tree([1300, 2000], [[210, 20], [30, 40]]))
    out = stress(first, last)
    assert out.status == "fail"
    assert out.metrics["stress_throttle_seconds"] == pytest.approx(0.3)
    assert "thermally throttled for 0.30 s under load" in (out.reason or "")


def test_throttle_events_are_counted_once_and_never_made_seconds(tmp_path: Path) -> None:
    first = sample(tmp_path / "a", tree([5, 0], [[1, 0], [0, 0]], counts_only=True))
    last = sample(tmp_path / "b", tree([7, 0], [[2, 0], [0, 0]], counts_only=True))
    out = stress(first, last)
    assert out.status == "fail"
    assert "3 thermal throttle events under load" in (out.reason or "")  # 2 package + 1 core
    assert "stress_throttle_seconds" not in out.metrics


def test_no_throttle_events_is_zero_seconds(tmp_path: Path) -> None:
    files = tree([5, 0], [[1, 0], [0, 0]], counts_only=True)
    out = stress(sample(tmp_path / "a", files), sample(tmp_path / "b", files))
    assert out.status == "pass" and out.metrics["stress_throttle_seconds"] == 0.0
