"""The TPU backend's own code (validation/burnin/backends/tpu.py) on real JAX, with the host's CPU
split into four JAX devices standing in for TPU chips. JAX runs in its own interpreter
(tests/validation/burnin/jax_cpu_probe.py): its threads must not live in a pytest process that forks."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from validation.burnin.checks.compute import TOLERANCE

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def probe() -> dict[str, Any]:
    if importlib.util.find_spec("jax") is None:
        pytest.skip("jax is not installed")
    done = subprocess.run(
        [sys.executable, "-m", "tests.validation.burnin.jax_cpu_probe"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["devices"] == 4
    return result


def test_fp32_gemm_runs_at_highest_precision_and_bf16_at_default(probe: dict[str, Any]) -> None:
    # The timed GEMM is traced once per dtype; the row references are HIGHEST as well.
    assert "DEFAULT" in probe["precisions"]
    assert probe["precisions"].count("HIGHEST") >= 3
    for result in probe["gemm"]["results"]:
        for dev in result["devices"]:
            assert dev["nonfinite"] == 0 and dev["max_scaled_err"] < TOLERANCE[result["dtype"]]


def test_each_chip_is_timed_on_its_own_so_a_slow_chip_stands_out(probe: dict[str, Any]) -> None:
    seconds = probe["timed"]["seconds"]
    assert probe["timed"]["iters"] >= 10 and len(seconds) == 4
    # Chip 2 carries 4096x the work of the others: its own clock shows it. (The others' time is
    # mostly the host queueing work for all four, which a shared clock would hide as well.)
    assert seconds[2] > 2 * max(seconds[i] for i in (0, 1, 3)), seconds


def test_gemm_reports_a_time_per_chip(probe: dict[str, Any]) -> None:
    devices = probe["gemm"]["results"][1]["devices"]
    assert [d["device"] for d in devices] == [0, 1, 2, 3]
    assert all(d["seconds"] > 0 and d["tflops"] > 0 for d in devices)


def test_no_device_of_the_platform_is_refused(probe: dict[str, Any]) -> None:
    assert "JAX sees no TPU devices" in probe["refused"]


def test_device_to_host_reads_a_new_array_each_time(probe: dict[str, Any]) -> None:
    # A jax array keeps the host copy of its first read: reading it again would time no transfer.
    assert probe["reads"] >= 4 * 3 and probe["distinct_reads"] == probe["reads"]
    devices = probe["host_device"]["devices"]
    assert [d["device"] for d in devices] == [0, 1, 2, 3]
    assert all(d["h2d_gbps"] > 0 and d["d2h_gbps"] > 0 for d in devices)


def test_the_chips_all_reduce_with_the_jax_installed(probe: dict[str, Any]) -> None:
    # Every chip holds its rank + 1: after psum each holds 1 + 2 + 3 + 4 = 10, on whatever JAX the
    # node installed (device_put_sharded, which this once used, is gone from current JAX).
    allreduce = probe["allreduce"]
    assert allreduce["impl"] == "jax-psum" and allreduce["world"] == 4 and allreduce["correct"] is True
    assert allreduce["bytes"] == 1 << 12 and len(allreduce["times_s"]) == 3
