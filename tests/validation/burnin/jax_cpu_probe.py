"""Runs the TPU backend's code on real JAX with four CPU devices and prints what it measured
as JSON. Run in its own interpreter by test_jax_cpu.py: JAX starts threads, and a pytest
process that later forks (the CPU all-reduce, the runner's workers) must not hold them."""

from __future__ import annotations

import json
import sys
from typing import Any

import jax

jax.config.update("jax_num_cpu_devices", 4)  # before the first use of a backend

from tests.validation.burnin.helpers import ctx  # noqa: E402
from validation.burnin.backends.tpu import JaxBackend  # noqa: E402


class _Spy:
    """jax with jax.numpy.dot recorded: which precision each GEMM asked for."""

    def __init__(self) -> None:
        self.precisions: list[str] = []
        self.read: list[Any] = []  # every array device_get was given, kept alive to tell them apart
        spy = self

        class Numpy:
            def __getattr__(self, name: str) -> Any:
                return getattr(jax.numpy, name)

            def dot(self, a: Any, b: Any, precision: Any = None) -> Any:
                spy.precisions.append(str(precision))
                return jax.numpy.dot(a, b, precision=precision)

        self.numpy = Numpy()

    def device_get(self, x: Any) -> Any:
        self.read.append(x)
        return jax.device_get(x)

    def __getattr__(self, name: str) -> Any:
        return getattr(jax, name)


def main() -> None:
    spy = _Spy()
    backend = JaxBackend(ctx("cpu"), jax=spy, platform="cpu")
    gemm = backend.gemm(["fp32", "bf16"], 64, seconds=0.01, buffers=1)
    host_device = backend.host_device(1 << 16, 0.01)
    jnp = jax.numpy
    small, big = jnp.ones((64, 64), jnp.float32), jnp.ones((1024, 1024), jnp.float32)
    args = [jax.device_put(big if i == 2 else small, d) for i, d in enumerate(backend.devices)]
    seconds, iters = backend._timed(jax.jit(lambda a: a @ a), args, 0.05)
    allreduce = backend.allreduce(1 << 12, 3)
    try:
        JaxBackend(ctx("cpu"), jax=jax)
        refused = ""
    except RuntimeError as exc:
        refused = str(exc)
    print(
        json.dumps(
            {
                "devices": len(backend.devices),
                "precisions": spy.precisions,
                "gemm": gemm,
                "timed": {"seconds": seconds, "iters": iters},
                "refused": refused,
                "host_device": host_device,
                "allreduce": allreduce,
                "reads": len(spy.read),
                "distinct_reads": len({id(x) for x in spy.read}),
            }
        )
    )


if __name__ == "__main__":
    sys.exit(main())
