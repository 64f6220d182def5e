"""The Backend protocol every check talks to, and the two ways a backend says no."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

Raw = dict[str, Any]


class Unsupported(Exception):
    """This measurement cannot exist on this node (no device memory on a CPU host, no fp8 on an
    A100). The worker records the check as skipped with this reason; if the SKU expects the
    metric, the check's parse turns the gap into a failure instead."""


class MissingDependencyError(RuntimeError):
    """An optional library the backend needs is not installed; the message says which extra."""


class Backend(Protocol):
    name: str  # recorded as the check record's `backend`: "cpu", "nvml+torch", "jax"
    kind: str  # "cpu", "gpu" or "tpu"

    def inventory(self) -> Raw: ...

    def health(self) -> Raw: ...

    def gemm_dtypes(self) -> list[str]: ...

    def gemm(self, dtypes: Sequence[str], n: int | None, seconds: float, buffers: int) -> Raw: ...

    def mem_copy(self, nbytes: int | None, seconds: float) -> Raw: ...

    def host_device(self, nbytes: int | None, seconds: float) -> Raw: ...

    def allreduce(self, nbytes: int | None, iters: int) -> Raw: ...

    def load_and_sample(self, seconds: float, interval_s: float, need_power: bool = False) -> Raw: ...

    def fabric(self, loopback_seconds: float) -> Raw: ...

    def storage(self, path: Path, nbytes: int, block: int) -> Raw: ...
