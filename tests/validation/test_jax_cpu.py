"""The TPU backend's own code (validation/backends/jax_tpu.py) on real JAX, with the host's CPU
split into several JAX devices standing in for TPU chips."""

from __future__ import annotations

from typing import Any

import pytest

jax = pytest.importorskip("jax")
jax.config.update("jax_num_cpu_devices", 4)  # before the first use of a backend

from tests.validation.burnin_helpers import ctx  # noqa: E402
from validation.backends.jax_tpu import JaxBackend  # noqa: E402
from validation.checks.compute import TOLERANCE  # noqa: E402


class _Spy:
    """jax with jax.numpy.dot recorded: which precision each GEMM asked for."""

    def __init__(self) -> None:
        self.precisions: list[Any] = []
        spy = self

        class Numpy:
            def __getattr__(self, name: str) -> Any:
                return getattr(jax.numpy, name)

            def dot(self, a: Any, b: Any, precision: Any = None) -> Any:
                spy.precisions.append(precision)
                return jax.numpy.dot(a, b, precision=precision)

        self.numpy = Numpy()

    def __getattr__(self, name: str) -> Any:
        return getattr(jax, name)


def backend(spy: Any | None = None) -> JaxBackend:
    b = JaxBackend(ctx("cpu"), jax=spy or jax, platform="cpu")
    assert len(b.devices) == 4
    return b


def test_fp32_gemm_runs_at_highest_precision_and_bf16_at_default() -> None:
    spy = _Spy()
    raw = backend(spy).gemm(["fp32", "bf16"], 64, seconds=0.01, buffers=1)
    traced = [p for p in spy.precisions if p is not None]
    # The timed GEMM is traced once per dtype; the reference products are HIGHEST too.
    assert jax.lax.Precision.DEFAULT in traced and traced.count(jax.lax.Precision.HIGHEST) >= 3
    for result in raw["results"]:
        for dev in result["devices"]:
            assert dev["nonfinite"] == 0 and dev["max_scaled_err"] < TOLERANCE[result["dtype"]]


def test_each_chip_is_timed_on_its_own_so_a_slow_chip_stands_out() -> None:
    b = backend()
    jnp = jax.numpy
    small, big = jnp.ones((64, 64), jnp.float32), jnp.ones((512, 512), jnp.float32)
    args = [jax.device_put(big if i == 2 else small, d) for i, d in enumerate(b.devices)]
    mm = jax.jit(lambda a: a @ a)
    seconds, iters = b._timed(mm, args, 0.05)
    assert iters >= 10 and len(seconds) == 4
    # Chip 2 carries 512x the work of the others: its own clock shows it. (The others' time is
    # mostly the host queueing work for all four, which a shared clock would hide as well.)
    assert seconds[2] > 2 * max(seconds[i] for i in (0, 1, 3)), seconds


def test_gemm_reports_a_time_per_chip() -> None:
    raw = backend().gemm(["bf16"], 64, seconds=0.01, buffers=1)
    devices = raw["results"][0]["devices"]
    assert [d["device"] for d in devices] == [0, 1, 2, 3]
    assert all(d["seconds"] > 0 and d["tflops"] > 0 for d in devices)


def test_no_device_of_the_platform_is_refused() -> None:
    with pytest.raises(RuntimeError, match="JAX sees no TPU devices"):
        JaxBackend(ctx("cpu"), jax=jax)
