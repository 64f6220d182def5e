"""PyTorch on CUDA: GEMM per dtype, device copy, pinned host-device copies, a sustained load.

Every measurement runs on all devices at once (one Python thread queues kernels on each device
in turn; CUDA runs them concurrently) and is timed with CUDA events on each device, so eight
GPUs take as long as one and the node is measured under the power and heat of full use.
Host-device copies are the exception: one device at a time, so a slow link is not hidden by a
shared host bottleneck. The torch module is injectable for tests.

This path has not run on a GPU in the session that wrote it; it is written against PyTorch's
documented API (torch.matmul, torch._scaled_mm, torch.cuda.Event, pin_memory).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from validation.burnin.backends.base import MissingDependencyError, Raw

DEFAULT_GEMM_N = 8192
DEFAULT_COPY_BYTES = 2 * 2**30
DEFAULT_H2D_BYTES = 1 * 2**30
LOAD_GEMM_N = 8192
_VERIFY_ROWS = 8
_CALIBRATE_ITERS = 3
_MIN_ITERS = 10


def import_torch() -> Any:
    try:
        import torch
    except ImportError:
        raise MissingDependencyError(
            "PyTorch is not installed: install a CUDA build of torch beside the gpu extra"
        ) from None
    return torch


class TorchCuda:
    def __init__(self, torch: Any | None = None, seed: int = 0) -> None:
        self.torch = torch if torch is not None else import_torch()
        if not self.torch.cuda.is_available():
            raise RuntimeError("torch.cuda.is_available() is False: no usable CUDA device or driver")
        self.devices = list(range(self.torch.cuda.device_count()))
        self.seed = seed
        self.load_n = LOAD_GEMM_N
        self.pcie_probe_bytes = 256 * 2**20
        # True fp32 for the fp32 figure; TF32 would report tensor-core speed under an fp32 name.
        self.torch.backends.cuda.matmul.allow_tf32 = False

    # ---------------------------------------------------------------- helpers

    def _dtype(self, name: str) -> Any:
        t = self.torch
        return {
            "bf16": t.bfloat16,
            "fp16": t.float16,
            "fp32": t.float32,
            "fp8": getattr(t, "float8_e4m3fn", None),
        }[name]

    def gemm_dtypes(self) -> list[str]:
        t = self.torch
        names = ["bf16", "fp16", "fp32"]
        fp8 = hasattr(t, "float8_e4m3fn") and hasattr(t, "_scaled_mm")
        # fp8 tensor cores: compute capability 8.9 (Ada) and 9.0+ (Hopper, Blackwell).
        if fp8 and all(t.cuda.get_device_capability(d) >= (8, 9) for d in self.devices):
            names.insert(2, "fp8")
        return names

    def _operands(self, dev: int, dtype: str, n: int, buffers: int) -> list[tuple[Any, Any]]:
        t = self.torch
        pairs = []
        for k in range(buffers):
            # Same seed on every device: identical devices then compute bit-identical products,
            # which lets compute compare peers. Random normal data, never zeros.
            gen = t.Generator(device=f"cuda:{dev}")
            gen.manual_seed(self.seed + k)
            a = t.randn(n, n, device=f"cuda:{dev}", generator=gen, dtype=t.float32)
            b = t.randn(n, n, device=f"cuda:{dev}", generator=gen, dtype=t.float32)
            if dtype == "fp8":
                # _scaled_mm wants the second operand column-major.
                pairs.append((a.to(t.float8_e4m3fn), b.t().contiguous().to(t.float8_e4m3fn).t()))
            else:
                pairs.append((a.to(self._dtype(dtype)), b.to(self._dtype(dtype))))
        return pairs

    def _matmul(self, dtype: str, dev: int) -> Callable[[Any, Any, Any], Any]:
        t = self.torch
        if dtype == "fp8":
            one = t.ones((), device=f"cuda:{dev}", dtype=t.float32)

            def fp8(a: Any, b: Any, out: Any) -> Any:
                res = t._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=t.bfloat16)
                return res[0] if isinstance(res, tuple) else res  # torch < 2.4 returned (out, amax)

            return fp8
        return lambda a, b, out: t.matmul(a, b, out=out)

    def _concurrent(self, launch: Callable[[int, int], None], iters: int) -> list[float]:
        """Queue `iters` launches on every device round-robin; seconds per device (CUDA events)."""
        t = self.torch
        starts, ends = {}, {}
        for d in self.devices:
            with t.cuda.device(d):
                starts[d] = t.cuda.Event(enable_timing=True)
                ends[d] = t.cuda.Event(enable_timing=True)
                starts[d].record()
        for i in range(iters):
            for d in self.devices:
                with t.cuda.device(d):
                    launch(d, i)
        for d in self.devices:
            with t.cuda.device(d):
                ends[d].record()
        for d in self.devices:
            t.cuda.synchronize(d)
        return [starts[d].elapsed_time(ends[d]) / 1000 for d in self.devices]

    def _iters_for(self, launch: Callable[[int, int], None], seconds: float) -> int:
        per = max(self._concurrent(launch, _CALIBRATE_ITERS)) / _CALIBRATE_ITERS
        return max(_MIN_ITERS, int(seconds / max(per, 1e-6)))

    # ---------------------------------------------------------------- compute

    def gemm(self, dtypes: Sequence[str], n: int | None, seconds: float, buffers: int) -> Raw:
        n = n or DEFAULT_GEMM_N
        supported = set(self.gemm_dtypes())
        results, unsupported = [], {}
        for dtype in dtypes:
            if dtype not in supported:
                unsupported[dtype] = "not supported by this GPU / PyTorch build"
                continue
            results.append({"dtype": dtype, "n": n, "devices": self._gemm_one(dtype, n, seconds, buffers)})
            self.torch.cuda.empty_cache()
        return {"results": results, "unsupported": unsupported, "torch": str(self.torch.__version__)}

    def _gemm_one(self, dtype: str, n: int, seconds: float, buffers: int) -> list[Raw]:
        t = self.torch
        ops = {d: self._operands(d, dtype, n, buffers) for d in self.devices}
        out_dtype = t.bfloat16 if dtype == "fp8" else self._dtype(dtype)
        outs = {d: t.empty(n, n, device=f"cuda:{d}", dtype=out_dtype) for d in self.devices}
        mm = {d: self._matmul(dtype, d) for d in self.devices}

        def launch(d: int, i: int) -> None:
            a, b = ops[d][i % buffers]
            mm[d](a, b, outs[d])

        self._concurrent(launch, buffers)  # warm-up: cuBLAS heuristics, clocks up
        iters = self._iters_for(launch, seconds)
        elapsed = self._concurrent(launch, iters)
        devices = []
        for d, secs in zip(self.devices, elapsed, strict=True):
            err, nonfinite, checksum = self._verify(dtype, d, ops[d], mm[d], outs[d], n)
            devices.append(
                {
                    "device": d,
                    "iters": iters,
                    "seconds": secs,
                    "tflops": 2 * n**3 * iters / secs / 1e12,
                    "max_scaled_err": err,
                    "nonfinite": nonfinite,
                    "checksum": checksum,
                }
            )
        return devices

    def _verify(
        self, dtype: str, d: int, pairs: list[tuple[Any, Any]], mm: Callable[..., Any], out: Any, n: int
    ) -> tuple[float, int, float]:
        """Check sampled rows of every buffer's product against float64 on the same device."""
        t = self.torch
        gen = t.Generator(device=f"cuda:{d}")
        gen.manual_seed(self.seed)
        rows = t.randperm(n, device=f"cuda:{d}", generator=gen)[:_VERIFY_ROWS]
        worst, nonfinite, checksum = 0.0, 0, 0.0
        for a, b in pairs:
            c = mm(a, b, out)
            a64, b64 = self._rows(a, rows, dtype == "fp8").to(t.float64), b.to(t.float64)
            ref = a64 @ b64
            bound = (a64.abs() @ b64.abs()).clamp_min(1e-30)
            worst = max(worst, float(((c[rows].to(t.float64) - ref).abs() / bound).max().item()))
            nonfinite += int((~t.isfinite(c)).sum().item())
            checksum += float(c.to(t.float64).sum().item())
            del b64
        return worst, nonfinite, checksum

    def _rows(self, x: Any, rows: Any, fp8: bool) -> Any:
        """x[rows]. A float8 operand is converted (exactly) to float32 before rows are sampled:
        CUDA builds of PyTorch without fp8 index kernels refuse x[rows] on a float8 tensor."""
        return x.to(self.torch.float32)[rows] if fp8 else x[rows]

    # ---------------------------------------------------------------- memory

    def mem_copy(self, nbytes: int | None, seconds: float) -> Raw:
        t = self.torch
        count = (nbytes or DEFAULT_COPY_BYTES) // 4
        src = {d: t.rand(count, device=f"cuda:{d}") + 0.5 for d in self.devices}
        dst = {d: t.empty_like(src[d]) for d in self.devices}

        def launch(d: int, i: int) -> None:
            dst[d].copy_(src[d])

        self._concurrent(launch, 2)
        iters = self._iters_for(launch, seconds)
        elapsed = self._concurrent(launch, iters)
        stride = max(1, count // 65536)
        devices = [
            {
                "device": d,
                "bytes": count * 4,
                "iters": iters,
                "seconds": secs,
                "gbps": 2 * count * 4 * iters / secs / 1e9,  # bytes read + bytes written
                "intact": bool(t.equal(dst[d][::stride], src[d][::stride])),
            }
            for d, secs in zip(self.devices, elapsed, strict=True)
        ]
        return {"devices": devices}

    def host_device(self, nbytes: int | None, seconds: float) -> Raw:
        t = self.torch
        nbytes = nbytes or DEFAULT_H2D_BYTES
        pattern = t.randint(0, 256, (2**20,), dtype=t.uint8)
        devices = []
        for d in self.devices:
            with t.cuda.device(d):
                host = t.empty(nbytes, dtype=t.uint8, pin_memory=True)
                if nbytes % 2**20 == 0:  # random bytes, not zeros
                    host.view(-1, 2**20).copy_(pattern.expand(nbytes // 2**20, -1))
                else:
                    host.fill_(0x5A)
                dev = t.empty(nbytes, dtype=t.uint8, device=f"cuda:{d}")
                entry: Raw = {"device": d}
                for key, dst, src in (("h2d_gbps", dev, host), ("d2h_gbps", host, dev)):
                    dst.copy_(src, non_blocking=True)  # warm-up
                    t.cuda.synchronize(d)
                    s0 = time.perf_counter()
                    dst.copy_(src, non_blocking=True)
                    t.cuda.synchronize(d)
                    once = max(time.perf_counter() - s0, 1e-6)
                    iters = max(3, int(seconds / once))
                    start, end = t.cuda.Event(enable_timing=True), t.cuda.Event(enable_timing=True)
                    start.record()
                    for _ in range(iters):
                        dst.copy_(src, non_blocking=True)
                    end.record()
                    end.synchronize()
                    entry[key] = nbytes * iters / (start.elapsed_time(end) / 1000) / 1e9
                devices.append(entry)
                del host, dev
        return {"bytes": nbytes, "devices": devices}

    def pcie_traffic(self, seconds: float) -> Callable[[], None]:
        """Queue about `seconds` of host-to-device copies on every device and return a function
        that waits for them: NVML reads the PCIe link while the devices are busy with it."""
        t = self.torch
        nbytes = self.pcie_probe_bytes
        bufs = []
        for d in self.devices:
            with t.cuda.device(d):
                host = t.empty(nbytes, dtype=t.uint8, pin_memory=True)
                dev = t.empty(nbytes, dtype=t.uint8, device=f"cuda:{d}")
                bufs.append((host, dev))
        # ~25 GB/s per link at the least: this many copies keep each link busy for `seconds`.
        copies = max(4, min(256, int(seconds * 25e9 / nbytes)))
        for d, (host, dev) in zip(self.devices, bufs, strict=True):
            with t.cuda.device(d):
                for _ in range(copies):
                    dev.copy_(host, non_blocking=True)

        def wait() -> None:
            for d in self.devices:
                t.cuda.synchronize(d)
            bufs.clear()

        return wait

    # ---------------------------------------------------------------- sustained load

    def load(self, seconds: float, batch_seconds: float) -> list[Raw]:
        """bf16 GEMMs on every device for `seconds`, in batches; TFLOP/s per batch per device."""
        t = self.torch
        n = self.load_n
        ops = {d: self._operands(d, "bf16", n, 2) for d in self.devices}
        outs = {d: t.empty(n, n, device=f"cuda:{d}", dtype=t.bfloat16) for d in self.devices}

        def launch(d: int, i: int) -> None:
            a, b = ops[d][i % 2]
            t.matmul(a, b, out=outs[d])

        per_batch = self._iters_for(launch, batch_seconds)
        windows: dict[int, list[float]] = {d: [] for d in self.devices}
        flops = dict.fromkeys(self.devices, 0.0)
        busy = dict.fromkeys(self.devices, 0.0)
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            for d, secs in zip(self.devices, self._concurrent(launch, per_batch), strict=True):
                work = 2 * n**3 * per_batch
                windows[d].append(work / secs / 1e12)
                flops[d] += work
                busy[d] += secs
        return [
            {"device": d, "flops": flops[d], "seconds": busy[d], "windows_tflops": windows[d]}
            for d in self.devices
        ]
