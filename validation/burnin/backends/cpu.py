"""The CPU backend: real measurements on a host with no accelerator.

numpy fp32 GEMM (checked against a float64 reference), multi-threaded memory copy, all-reduce
across processes (gloo or a shared-memory ring), storage, and a stress load sampled through
cpufreq, thermal zones, thermal_throttle counters and RAPL where the host exposes them. What
cannot exist on a CPU host (host-device copies) raises Unsupported.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from validation.burnin.backends.base import Raw, Unsupported
from validation.burnin.context import CheckContext
from validation.burnin.probes import allreduce_cpu
from validation.burnin.probes.host import HostProbe
from validation.burnin.procutil import blas_threads, usable_cpus

DEFAULT_GEMM_N = 1024
DEFAULT_COPY_BYTES = 256 * 2**20
DEFAULT_ALLREDUCE_BYTES = 32 * 2**20
_VERIFY_ROWS = 8
_MAX_RANKS = 8

F32 = np.ndarray[Any, np.dtype[np.float32]]


def verify_rows(a: F32, b: F32, c: F32, rows: np.ndarray[Any, Any]) -> tuple[float, int]:
    """(largest error of sampled rows of c = a @ b, scaled by sum |a||b|; non-finite values in c)."""
    a64 = a[rows].astype(np.float64)
    b64 = b.astype(np.float64)
    ref = a64 @ b64
    bound = np.abs(a64) @ np.abs(b64)
    bound[bound == 0] = 1.0
    scaled = np.abs(c[rows].astype(np.float64) - ref) / bound
    nonfinite = int(np.count_nonzero(~np.isfinite(c)))
    worst = float(np.nanmax(scaled)) if np.isfinite(scaled).any() else float("inf")
    return worst, nonfinite


class CpuBackend(HostProbe):
    name = "cpu"
    kind = "cpu"

    def __init__(self, ctx: CheckContext, probe_kwargs: dict[str, Any] | None = None) -> None:
        super().__init__(sysfs_root=ctx.sysfs_root, **(probe_kwargs or {}))
        self.seed = ctx.seed
        self.threads = blas_threads()

    # ---------------------------------------------------------------- inventory / health

    def inventory(self) -> Raw:
        return {"host": self.host_inventory(), "devices": [], "versions": self.host_versions()}

    def health(self) -> Raw:
        return {
            "kernel_log": self.kernel_log(),
            "edac": self.edac(),
            "thermal": self.thermal_zones(),
            "devices": [],
        }

    # ---------------------------------------------------------------- compute

    def gemm_dtypes(self) -> list[str]:
        return ["fp32"]

    def gemm(self, dtypes: Sequence[str], n: int | None, seconds: float, buffers: int) -> Raw:
        n = n or DEFAULT_GEMM_N
        results, unsupported = [], {}
        for dtype in dtypes:
            if dtype != "fp32":
                unsupported[dtype] = f"numpy has no {dtype} matrix multiply on this CPU backend"
                continue
            results.append({"dtype": dtype, "n": n, "devices": [self._gemm_fp32(n, seconds, buffers)]})
        return {"threads": self.threads, "results": results, "unsupported": unsupported}

    def _gemm_fp32(self, n: int, seconds: float, buffers: int) -> Raw:
        rng = np.random.default_rng(self.seed)
        # Random operands in rotating buffers: never zeros, never the same cached pair twice in a row.
        pairs = [
            (rng.standard_normal((n, n), dtype=np.float32), rng.standard_normal((n, n), dtype=np.float32))
            for _ in range(max(1, buffers))
        ]
        out = np.empty((n, n), dtype=np.float32)
        np.matmul(pairs[0][0], pairs[0][1], out=out)  # warm-up: page in buffers, start BLAS threads
        iters, t0 = 0, time.perf_counter()
        while True:
            a, b = pairs[iters % len(pairs)]
            np.matmul(a, b, out=out)
            iters += 1
            elapsed = time.perf_counter() - t0
            if elapsed >= seconds:
                break
        worst, nonfinite = 0.0, 0
        rows = rng.choice(n, size=min(_VERIFY_ROWS, n), replace=False)
        for a, b in pairs:  # outside the timed loop: check every buffer's product
            np.matmul(a, b, out=out)
            err, bad = verify_rows(a, b, out, rows)
            worst, nonfinite = max(worst, err), nonfinite + bad
        return {
            "device": "cpu",
            "iters": iters,
            "seconds": elapsed,
            "tflops": 2 * n**3 * iters / elapsed / 1e12,
            "max_scaled_err": worst,
            "nonfinite": nonfinite,
        }

    # ---------------------------------------------------------------- memory

    def mem_copy(self, nbytes: int | None, seconds: float) -> Raw:
        nbytes = nbytes or DEFAULT_COPY_BYTES
        count = nbytes // 4
        # A 4 MiB random block repeated: random content (never zeros) without paying for a
        # quarter-gigabyte of random numbers; DRAM bandwidth does not depend on the pattern.
        block = np.random.default_rng(self.seed).random(2**20, dtype=np.float32) + 0.5
        src = np.resize(block, count)
        dst = np.empty_like(src)
        workers = max(1, self.threads)
        bounds = np.linspace(0, count, workers + 1, dtype=np.int64)
        chunks = [(int(lo), int(hi)) for lo, hi in itertools.pairwise(bounds)]
        with ThreadPoolExecutor(max_workers=workers) as pool:
            # numpy releases the GIL while copying plain arrays, so the threads copy in parallel.
            def copy_once() -> None:
                list(pool.map(lambda c: np.copyto(dst[c[0] : c[1]], src[c[0] : c[1]]), chunks))

            copy_once()  # warm-up: fault in destination pages
            iters, t0 = 0, time.perf_counter()
            while True:
                copy_once()
                iters += 1
                elapsed = time.perf_counter() - t0
                if elapsed >= seconds:
                    break
        intact = bool(np.array_equal(dst[:: max(1, count // 4096)], src[:: max(1, count // 4096)]))
        return {
            "threads": workers,
            "devices": [
                {
                    "device": "cpu",
                    "bytes": count * 4,
                    "iters": iters,
                    "seconds": elapsed,
                    # Bytes read plus bytes written, as the GPU figure counts them.
                    "gbps": 2 * count * 4 * iters / elapsed / 1e9,
                    "intact": intact,
                }
            ],
        }

    def host_device(self, nbytes: int | None, seconds: float) -> Raw:
        raise Unsupported("a CPU host has no device memory: host-to-device copies do not exist")

    # ---------------------------------------------------------------- collectives

    def allreduce(self, nbytes: int | None, iters: int) -> Raw:
        world = max(2, min(usable_cpus(), _MAX_RANKS))
        return allreduce_cpu.allreduce(world, nbytes or DEFAULT_ALLREDUCE_BYTES, iters, self.seed)

    # ---------------------------------------------------------------- stress / efficiency

    def load_and_sample(self, seconds: float, interval_s: float, need_power: bool = False) -> Raw:
        """fp32 GEMM load for `seconds` while a thread samples the host's telemetry."""
        if need_power and not self._rapl_zones():
            raise Unsupported(
                "no readable RAPL powercap zone under /sys/class/powercap: power cannot be measured"
            )
        n = 512
        rng = np.random.default_rng(self.seed)
        a, b = rng.standard_normal((n, n), dtype=np.float32), rng.standard_normal((n, n), dtype=np.float32)
        out = np.empty((n, n), dtype=np.float32)
        samples: list[Raw] = []
        stop = threading.Event()
        t0 = time.perf_counter()

        def sampler() -> None:
            while True:
                samples.append({"t": time.perf_counter() - t0, "devices": [self.cpu_telemetry()]})
                if stop.wait(interval_s):
                    return

        thread = threading.Thread(target=sampler, daemon=True)
        thread.start()
        windows: list[float] = []
        window_flops, window_start, flops = 0.0, time.perf_counter(), 0.0
        try:
            while time.perf_counter() - t0 < seconds:
                np.matmul(a, b, out=out)
                window_flops += 2 * n**3
                now = time.perf_counter()
                if now - window_start >= interval_s:
                    windows.append(window_flops / (now - window_start) / 1e12)
                    flops += window_flops
                    window_flops, window_start = 0.0, now
        finally:
            stop.set()
            thread.join()
        elapsed = time.perf_counter() - t0
        flops += window_flops
        _add_power_from_energy(samples)
        has_power = any(s["devices"][0].get("power_w") is not None for s in samples)
        return {
            "interval_s": interval_s,
            "seconds": elapsed,
            "samples": samples,
            "work": [{"device": "cpu", "flops": flops, "seconds": elapsed, "windows_tflops": windows}],
            "power_source": "rapl" if has_power else None,
            "power_unavailable": None
            if has_power
            else "no readable RAPL powercap zone under /sys/class/powercap",
        }


def _add_power_from_energy(samples: list[Raw]) -> None:
    """Turn cumulative RAPL package energy into watts between samples (the counter wraps)."""
    prev: tuple[float, list[float]] | None = None
    for s in samples:
        dev = s["devices"][0]
        energy, ranges = dev.get("energy_uj"), dev.get("energy_range_uj")
        dev["power_w"] = None
        if energy is None:
            continue
        if prev is not None and len(prev[1]) == len(energy) and s["t"] > prev[0]:
            total = 0.0
            for i, e in enumerate(energy):
                delta = e - prev[1][i]
                if delta < 0 and ranges and i < len(ranges):
                    delta += ranges[i]
                total += delta
            dev["power_w"] = total / 1e6 / (s["t"] - prev[0])
        prev = (s["t"], list(energy))
