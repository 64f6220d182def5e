"""Backends: what a check measures through. One per accelerator kind, composed from probes.

`make_backend(ctx)` looks the SKU's accelerator kind up in `BACKENDS`: NVML + PyTorch for GPUs,
JAX for TPUs, the CPU backend for hosts without an accelerator. The probes (validation.burnin.probes)
import their heavy libraries on first use, so importing a backend class costs nothing.
"""

from __future__ import annotations

from collections.abc import Callable

from validation.burnin.backends.base import Backend, MissingDependencyError, Unsupported
from validation.burnin.backends.cpu import CpuBackend
from validation.burnin.backends.gpu import GpuBackend
from validation.burnin.backends.tpu import JaxBackend
from validation.burnin.context import CheckContext

__all__ = ["BACKENDS", "Backend", "MissingDependencyError", "Unsupported", "make_backend", "required_modules"]

# Accelerator kind (catalog `accelerator.kind`) -> the backend that measures it.
BACKENDS: dict[str, Callable[[CheckContext], Backend]] = {
    "gpu": GpuBackend,
    "tpu": JaxBackend,
    "cpu": CpuBackend,
}

# (module, how to install it) pairs each backend needs beyond the core dependencies.
REQUIRED_MODULES: dict[str, list[tuple[str, str]]] = {
    "gpu": [
        ("pynvml", "install the gpu extra: pip install 'fleetforge[gpu]'"),
        ("torch", "install PyTorch with CUDA beside the gpu extra (https://pytorch.org)"),
    ],
    "tpu": [("jax", "install JAX for TPU: pip install 'jax[tpu]'")],
}


def required_modules(kind: str) -> list[tuple[str, str]]:
    """(module, how to install it) pairs a backend of this accelerator kind needs."""
    return list(REQUIRED_MODULES.get(kind, []))


def make_backend(ctx: CheckContext) -> Backend:
    return BACKENDS.get(ctx.sku.accelerator.kind, CpuBackend)(ctx)
