"""The GPU backend ("nvml+torch"): NVML for inventory, health and telemetry; PyTorch for GEMM,
memory, host-device copies and the sustained load; NCCL for the all-reduce.

NVML numbers GPUs in PCI bus order and CUDA, by default, fastest first. CUDA_DEVICE_ORDER is
set to PCI_BUS_ID before torch starts CUDA so device i is the same GPU in both.

Not run on a GPU in the session that wrote it: written against pynvml's and PyTorch's APIs and
tested with injected fakes (tests/validation/burnin/test_gpu_backend.py).
"""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Sequence
from typing import Any

from validation.burnin.backends.base import Raw, Unsupported
from validation.burnin.context import CheckContext
from validation.burnin.probes.host import HostProbe
from validation.burnin.probes.nvml import Nvml
from validation.burnin.probes.torch_cuda import TorchCuda

# Seconds of PCIe traffic queued while health reads the link generation.
_PCIE_LOAD_S = 0.5
# all_reduce_perf runs inside the collectives check, whose own timeout (up to 900 s) also applies.
_NCCL_TESTS_TIMEOUT_S = 900.0


class GpuBackend(HostProbe):
    name = "nvml+torch"
    kind = "gpu"

    def __init__(
        self, ctx: CheckContext, nvml: Any | None = None, torch: Any | None = None, **probe: Any
    ) -> None:
        super().__init__(sysfs_root=ctx.sysfs_root, **probe)
        os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
        self.seed = ctx.seed
        self.expected_gpus = ctx.sku.accelerators_per_node
        self.nvml = Nvml(nvml)
        self._torch_module = torch
        self._torch: TorchCuda | None = None

    @property
    def torch(self) -> TorchCuda:
        """PyTorch on every GPU NVML lists, or an error: a check that measured fewer devices would
        report the slowest of those it could see (CUDA_VISIBLE_DEVICES set, MIG left on)."""
        if self._torch is None:
            torch = TorchCuda(self._torch_module, seed=self.seed)
            if len(torch.devices) != self.nvml.count:
                visible = os.environ.get("CUDA_VISIBLE_DEVICES")
                why = (
                    f"CUDA_VISIBLE_DEVICES={visible}"
                    if visible is not None
                    else "MIG mode, or a GPU CUDA cannot use"
                )
                raise RuntimeError(
                    f"PyTorch sees {len(torch.devices)} CUDA device(s) and NVML {self.nvml.count} GPU(s) ({why}): "
                    "measuring fewer than the node has would hide the others"
                )
            self._torch = torch
        return self._torch

    def inventory(self) -> Raw:
        raw = self.nvml.inventory()
        versions = {**raw["versions"], **self.host_versions()}
        try:
            torch: Any = importlib.import_module("torch")  # Any: typed the same with or without torch
            versions["torch"] = str(torch.__version__)
            if torch.cuda.is_available() and hasattr(torch.cuda, "nccl"):
                versions["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        except ImportError:
            pass
        return {**raw, "versions": versions, "host": self.host_inventory()}

    def health(self) -> Raw:
        # The link generation only means something while the link is busy (GPUs drop to gen 1
        # when idle): queue host-to-device copies, read NVML while they run, then wait.
        try:
            wait = self.torch.pcie_traffic(_PCIE_LOAD_S)
        except (ImportError, RuntimeError):
            pcie = self.nvml.pcie(under_load=False)
        else:
            time.sleep(_PCIE_LOAD_S / 4)
            pcie = self.nvml.pcie(under_load=True)
            wait()
        return {
            "devices": self.nvml.health(pcie),
            "kernel_log": self.kernel_log(),
            "edac": self.edac(),
            "thermal": self.thermal_zones(),
        }

    def gemm_dtypes(self) -> list[str]:
        return self.torch.gemm_dtypes()

    def gemm(self, dtypes: Sequence[str], n: int | None, seconds: float, buffers: int) -> Raw:
        return self.torch.gemm(dtypes, n, seconds, buffers)

    def mem_copy(self, nbytes: int | None, seconds: float) -> Raw:
        return self.torch.mem_copy(nbytes, seconds)

    def host_device(self, nbytes: int | None, seconds: float) -> Raw:
        return self.torch.host_device(nbytes, seconds)

    def allreduce(self, nbytes: int | None, iters: int) -> Raw:
        if self.nvml.count < 2 <= self.expected_gpus:
            raise RuntimeError(
                f"NVML lists {self.nvml.count} GPU(s) on a SKU with {self.expected_gpus}: no all-reduce to measure"
            )
        if self.nvml.count < 2:
            raise Unsupported("one GPU: no intra-node all-reduce")
        from validation.burnin.probes import nccl

        # Operators who built nccl-tests get the numbers they already compare against; the
        # PyTorch path is the fallback where the binary is absent.
        binary = shutil.which("all_reduce_perf")
        if binary is not None:
            return self._nccl_tests(binary, self.nvml.count, nbytes or nccl.DEFAULT_BYTES, iters)
        return nccl.allreduce(self.nvml.count, nbytes, iters)

    def _nccl_tests(self, binary: str, world: int, nbytes: int, iters: int) -> Raw:
        """One all_reduce_perf process driving every GPU (-g), results validated (-c 1)."""
        argv = [binary, "-b", str(nbytes), "-e", str(nbytes), "-g", str(world)]
        argv += ["-n", str(iters), "-w", "5", "-c", "1", "-d", "float", "-o", "sum"]
        raw: Raw = {"impl": "nccl-tests", "world": world, "bytes": nbytes, "iters": iters, "argv": argv}
        try:
            done = self.run(argv, capture_output=True, text=True, timeout=_NCCL_TESTS_TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired:
            return {**raw, "rc": None, "output": "", "stderr": f"timed out after {_NCCL_TESTS_TIMEOUT_S:g} s"}
        except OSError as exc:
            return {**raw, "rc": None, "output": "", "stderr": f"could not be started: {exc}"}
        return {
            **raw,
            "rc": done.returncode,
            "output": done.stdout[-20000:],
            "stderr": (done.stderr or "")[-2000:],
        }

    def load_and_sample(self, seconds: float, interval_s: float, need_power: bool = False) -> Raw:
        samples: list[Raw] = []
        stop = threading.Event()
        t0 = time.perf_counter()

        def sampler() -> None:
            while True:
                samples.append({"t": time.perf_counter() - t0, "devices": self.nvml.sample()})
                if stop.wait(interval_s):
                    return

        thread = threading.Thread(target=sampler, daemon=True)
        thread.start()
        try:
            work = self.torch.load(seconds, batch_seconds=interval_s)
        finally:
            stop.set()
            thread.join()
        return {
            "interval_s": interval_s,
            "seconds": time.perf_counter() - t0,
            "samples": samples,
            "work": work,
            "power_source": "nvml",
            "power_unavailable": None,
        }
