"""Real PyTorch on CPU, presented to TorchCuda as if it were CUDA.

Only what truly needs CUDA is stood in for: `torch.cuda` (device count, capability, events,
synchronize), "cuda:N" devices (mapped to the CPU) and pinned host memory (a CUDA allocator
feature). Every tensor, dtype conversion, matmul, _scaled_mm, index and copy is PyTorch's own.

What CUDA refuses, the shim refuses too: indexing a float8 tensor is not implemented on CUDA in
PyTorch releases before fp8 indexing kernels existed, so the shim's tensors raise on it as they
would there (`refuse_fp8_indexing`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

torch: Any = __import__("torch")

_FP8 = {getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2") if hasattr(torch, n)}
_INDEXING = {torch.Tensor.__getitem__, torch.Tensor.index_select, torch.index_select}


class CudaLikeTensor(torch.Tensor):  # type: ignore[misc]
    """A real tensor that fails, as CUDA builds without fp8 index kernels do, when an fp8 tensor
    is indexed."""

    refuse_fp8_indexing = True

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if cls.refuse_fp8_indexing and func in _INDEXING and args and getattr(args[0], "dtype", None) in _FP8:
            raise NotImplementedError(f'"index_cuda" not implemented for {args[0].dtype}')
        return super().__torch_function__(func, types, args, kwargs or {})


def _cpu(kwargs: dict[str, Any]) -> dict[str, Any]:
    if str(kwargs.get("device", "cpu")).startswith("cuda"):
        kwargs["device"] = "cpu"
    kwargs.pop("pin_memory", None)  # pinned memory is CUDA's allocator: plain host memory here
    return kwargs


class _Event:
    def __init__(self, enable_timing: bool = False) -> None:
        self.t: float | None = None

    def record(self) -> None:
        self.t = time.perf_counter()  # CPU kernels run synchronously: the clock is the work

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, end: _Event) -> float:
        assert self.t is not None and end.t is not None
        return (end.t - self.t) * 1000.0


class _Cuda:
    Event = _Event

    def __init__(self, devices: int, capability: tuple[int, int]) -> None:
        self._devices = devices
        self._capability = capability
        self.current = 0

    def is_available(self) -> bool:
        return True

    def device_count(self) -> int:
        return self._devices

    def get_device_capability(self, device: int = 0) -> tuple[int, int]:
        return self._capability

    def synchronize(self, device: int | None = None) -> None:
        pass

    def empty_cache(self) -> None:
        pass

    @contextmanager
    def device(self, index: int) -> Iterator[None]:
        previous, self.current = self.current, index
        try:
            yield
        finally:
            self.current = previous


class TorchOnCpu:
    """The `torch` module TorchCuda is given: real torch, CPU tensors, a stand-in torch.cuda."""

    _FACTORIES = ("randn", "rand", "empty", "ones", "zeros", "randperm", "randint", "full")

    def __init__(self, devices: int = 2, capability: tuple[int, int] = (9, 0)) -> None:
        self.cuda = _Cuda(devices, capability)

    def __getattr__(self, name: str) -> Any:
        value = getattr(torch, name)
        if name in self._FACTORIES:

            def factory(*args: Any, **kwargs: Any) -> Any:
                return value(*args, **_cpu(kwargs)).as_subclass(CudaLikeTensor)

            return factory
        return value

    def Generator(self, device: str = "cpu") -> Any:
        return torch.Generator(device="cpu")

    def empty_like(self, t: Any, **kwargs: Any) -> Any:
        return torch.empty_like(t, **_cpu(kwargs)).as_subclass(CudaLikeTensor)
