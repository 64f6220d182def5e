"""Backends: the only code that touches hardware. Checks reach it through the `Backend` protocol.

`make_backend(ctx)` picks by the SKU's accelerator kind: NVML + PyTorch for GPUs, JAX for TPUs,
the CPU backend for hosts without an accelerator. Heavy libraries are imported inside the
backends, on first use, so importing this package costs nothing.
"""

from __future__ import annotations

from validation.backends.base import Backend, MissingDependencyError, Unsupported
from validation.context import CheckContext

__all__ = ["Backend", "MissingDependencyError", "Unsupported", "make_backend", "required_modules"]


def required_modules(kind: str) -> list[tuple[str, str]]:
    """(module, how to install it) pairs a backend of this accelerator kind needs."""
    if kind == "gpu":
        return [
            ("pynvml", "install the gpu extra: pip install 'fleetforge[gpu]'"),
            ("torch", "install PyTorch with CUDA beside the gpu extra (https://pytorch.org)"),
        ]
    if kind == "tpu":
        return [("jax", "install JAX for TPU: pip install 'jax[tpu]'")]
    return []


def make_backend(ctx: CheckContext) -> Backend:
    kind = ctx.sku.accelerator.kind
    if kind == "gpu":
        from validation.backends.gpu import GpuBackend

        return GpuBackend(ctx)
    if kind == "tpu":
        from validation.backends.jax_tpu import JaxBackend

        return JaxBackend(ctx)
    from validation.backends.cpu import CpuBackend

    return CpuBackend(ctx)
