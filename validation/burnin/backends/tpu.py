"""The TPU backend: JAX on the host's local TPU chips.

GEMM (bf16, fp32) per chip with the products checked against a float32 HIGHEST-precision
reference on the same chip, device copy, host-device transfers with device_put / device_get,
and the intra-host all-reduce as a pmap'd psum over ICI. JAX exposes no power or clock
telemetry, so efficiency skips and stress measures throughput stability only.

The fp32 GEMM runs at Precision.HIGHEST: at JAX's default precision a TPU multiplies float32
operands in single bf16 passes, which would report bf16 speed under the fp32 name. Every chip
is timed on its own clock (work is queued on all chips at once and each chip's finish is
observed as it happens), so one slow chip shows as one slow number, not as a slower node.

Each TPU VM is burnt in on its own, also on a VM of a multi-host slice, where JAX would otherwise
wait at start-up for the slice's other hosts (documented JAX behaviour: jax-ml/jax#6157, #19971):
before JAX is first imported, unless the environment already sets the TPU topology, the backend
tells libtpu that this VM's chips are a slice of one process (`isolate_vm`): TPU_PROCESS_BOUNDS
1,1,1, TPU_CHIPS_PER_PROCESS_BOUNDS the VM's chip grid ("x,y,z": 1 chip 1,1,1, 4 chips 2,2,1,
8 chips 2,4,1) and TPU_VISIBLE_CHIPS its chips (0,1,2,3). These are the variables, and for one
process of 1, 4 or 8 chips the values, that JAX's own multi-process test launcher sets
(jax-ml/jax, jax/_src/test_multiprocess.py); the grids are one VM's (v5e/v6e 2x2 and 2x4, v5p
2x2x1). The VM's chips are counted from
/dev (accel<N>, else numbered /dev/vfio groups, as Ray and PyTorch/XLA count them), else taken from
the fleet's expected count; the chips JAX then sees are the VM's own, which the inventory check
compares with that count.

Not run on a TPU in the session that wrote it; written against JAX's documented API.
"""

from __future__ import annotations

import glob
import os
import time
from collections.abc import Callable, MutableMapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from fleet.catalog import tpu
from validation.burnin.backends.base import MissingDependencyError, Raw, Unsupported
from validation.burnin.context import CheckContext
from validation.burnin.probes.host import HostProbe

DEFAULT_GEMM_N = 8192
DEFAULT_COPY_BYTES = 2 * 2**30
DEFAULT_H2D_BYTES = 512 * 2**20
DEFAULT_ALLREDUCE_BYTES = 1 * 2**30
_VERIFY_ROWS = 8
# How often the per-chip timer looks for finished chips: small against any measured interval.
_POLL_S = 0.0005


# libtpu's topology variables. One process for the VM: bounds of one process, holding the VM's chip
# grid, and the VM's chips visible to it.
TOPOLOGY_VARIABLES = ("TPU_PROCESS_BOUNDS", "TPU_CHIPS_PER_PROCESS_BOUNDS", "TPU_VISIBLE_CHIPS")
# Set by hand or by an image for the same purpose (the host-level names and PyTorch/XLA's name for
# the visible chips): a node that sets any of these chose its topology, and none is added to it.
OPERATOR_TOPOLOGY = (
    *TOPOLOGY_VARIABLES,
    "TPU_HOST_BOUNDS",
    "TPU_CHIPS_PER_HOST_BOUNDS",
    "TPU_VISIBLE_DEVICES",
)
# The chip grid of a TPU VM by its chips (x,y,z): v5e/v6e 1x1, 2x2, 2x4; v5p 2x2x1.
CHIP_GRIDS = {1: "1,1,1", 4: "2,2,1", 8: "2,4,1"}
# Where the VM's TPU chips show; resolved at call time so tests can point it at a fake tree.
DEV_ROOT = Path("/dev")


def single_vm_environment(chips: int) -> dict[str, str]:
    """The topology variables that make a VM's `chips` chips a slice of one process; {} for a chip
    count no TPU VM has (then libtpu finds its topology itself)."""
    grid = CHIP_GRIDS.get(chips)
    if grid is None:
        return {}
    return {
        "TPU_PROCESS_BOUNDS": "1,1,1",
        "TPU_CHIPS_PER_PROCESS_BOUNDS": grid,
        "TPU_VISIBLE_CHIPS": ",".join(str(i) for i in range(chips)),
    }


def local_chips(dev_root: Path | None = None) -> int:
    """TPU chips attached to this VM: /dev/accel<N> (v4 and older), else the numbered IOMMU groups
    in /dev/vfio (v5e, v5p, v6e); 0 when neither shows one."""
    dev = dev_root or DEV_ROOT
    accel = glob.glob(str(dev / "accel[0-9]*"))
    if accel:
        return len(accel)
    try:
        return sum(1 for entry in os.listdir(dev / "vfio") if entry.isdigit())
    except OSError:
        return 0


def isolate_vm(
    environ: MutableMapping[str, str],
    expected: int | None = None,
    dev_root: Path | None = None,
    generation: str | None = None,
) -> dict[str, str]:
    """Make this VM's chips a slice of their own for JAX: sets single_vm_environment in `environ`
    (before JAX is imported) unless it already sets a topology variable. The chips are the VM's own
    count when /dev shows any, else `expected` (the fleet's chips per VM), and only a count a VM of
    `generation` has (any generation's when unknown): naming chips the VM lacks, or a grid no VM
    has, would stop libtpu, where the inventory check should report the count. Returns what was set."""
    if any(name in environ for name in OPERATOR_TOPOLOGY):
        return {}
    sizes = set(tpu.VM_CHIPS[generation]) if generation in tpu.VM_CHIPS else set(CHIP_GRIDS)
    found = local_chips(dev_root)
    chips = found if found else expected
    added = single_vm_environment(chips) if chips in sizes else {}
    environ.update(added)
    return added


def _import_jax() -> Any:
    try:
        import jax
    except ImportError:
        raise MissingDependencyError("JAX is not installed: pip install 'jax[tpu]'") from None
    return jax


class JaxBackend(HostProbe):
    name = "jax"
    kind = "tpu"

    def __init__(
        self, ctx: CheckContext, jax: Any | None = None, platform: str = "tpu", **probe: Any
    ) -> None:
        """`platform` is the JAX platform whose local devices are measured: "tpu" on a node;
        tests run the same code on "cpu" devices."""
        super().__init__(sysfs_root=ctx.sysfs_root, **probe)
        if jax is None:
            # Before JAX starts: on a VM of a multi-host slice it would wait for the other hosts.
            isolate_vm(os.environ, ctx.expected_accelerators, generation=ctx.sku.accelerator.generation)
        self.jax: Any = jax if jax is not None else _import_jax()
        self.jnp = self.jax.numpy
        self.devices = [d for d in self.jax.local_devices() if d.platform == platform]
        if not self.devices:
            raise RuntimeError(
                f"JAX sees no {platform.upper()} devices (platform {self.jax.default_backend()})"
            )
        self.seed = ctx.seed

    def _timed(self, fn: Callable[[Any], Any], args: list[Any], seconds: float) -> tuple[list[float], int]:
        """Run fn on every chip concurrently, about `seconds` of it; seconds per chip, iterations."""
        outs = [fn(a) for a in args]  # compile and warm up
        for o in outs:
            o.block_until_ready()
        t0 = time.perf_counter()
        for o in [fn(a) for a in args]:
            o.block_until_ready()
        once = max(time.perf_counter() - t0, 1e-6)
        iters = max(10, int(seconds / once))
        return self._finish_times(fn, args, iters), iters

    def _finish_times(self, fn: Callable[[Any], Any], args: list[Any], iters: int) -> list[float]:
        """Queue `iters` runs on every chip, then note when each chip's last result is ready."""
        t0 = time.perf_counter()
        outs: list[Any] = []
        for _ in range(iters):
            outs = [fn(a) for a in args]
        finished: dict[int, float] = {}
        if all(hasattr(o, "is_ready") for o in outs):
            while len(finished) < len(outs):
                for i, o in enumerate(outs):
                    if i not in finished and o.is_ready():
                        finished[i] = time.perf_counter() - t0
                if len(finished) < len(outs):
                    time.sleep(_POLL_S)
            return [finished[i] for i in range(len(outs))]
        # Without is_ready (older JAX), chips are timed one after another, each on its own.
        for o in outs:
            o.block_until_ready()
        times = []
        for a in args:
            t1 = time.perf_counter()
            for _ in range(iters):
                out = fn(a)
            out.block_until_ready()
            times.append(time.perf_counter() - t1)
        return times

    def inventory(self) -> Raw:
        devices = []
        for i, d in enumerate(self.devices):
            stats = d.memory_stats() or {}
            devices.append(
                {"index": i, "name": d.device_kind, "memory_bytes": stats.get("bytes_limit"), "id": d.id}
            )
        versions = {"jax": self.jax.__version__, **self.host_versions()}
        for dist in ("jaxlib", "libtpu", "libtpu-nightly"):
            try:
                versions[dist] = metadata.version(dist)
            except metadata.PackageNotFoundError:
                continue
        return {"devices": devices, "versions": versions, "host": self.host_inventory()}

    def health(self) -> Raw:
        return {
            "devices": [],
            "kernel_log": self.kernel_log(),
            "edac": self.edac(),
            "thermal": self.thermal_zones(),
        }

    def gemm_dtypes(self) -> list[str]:
        return ["bf16", "fp32"]

    def gemm(self, dtypes: Sequence[str], n: int | None, seconds: float, buffers: int) -> Raw:
        jax, jnp = self.jax, self.jnp
        n = n or DEFAULT_GEMM_N
        results, unsupported = [], {}
        for dtype in dtypes:
            if dtype not in ("bf16", "fp32"):
                unsupported[dtype] = "not measured on TPU by this backend"
                continue
            dt = jnp.bfloat16 if dtype == "bf16" else jnp.float32
            key = jax.random.PRNGKey(self.seed)
            ka, kb = jax.random.split(key)
            a = jax.random.normal(ka, (n, n), dtype=jnp.float32).astype(dt)
            b = jax.random.normal(kb, (n, n), dtype=jnp.float32).astype(dt)
            pairs = [(jax.device_put(a, d), jax.device_put(b, d)) for d in self.devices]
            # HIGHEST for fp32: the default would multiply float32 in single bf16 passes.
            precision = jax.lax.Precision.HIGHEST if dtype == "fp32" else jax.lax.Precision.DEFAULT
            mm = jax.jit(lambda ab, p=precision: jnp.dot(ab[0], ab[1], precision=p))
            elapsed, iters = self._timed(mm, pairs, seconds)
            devices = []
            for i, (pa, pb) in enumerate(pairs):
                c = mm((pa, pb))
                rows = pa[:_VERIFY_ROWS].astype(jnp.float32)
                ref = jnp.dot(rows, pb.astype(jnp.float32), precision=jax.lax.Precision.HIGHEST)
                bound = jnp.dot(
                    jnp.abs(rows), jnp.abs(pb.astype(jnp.float32)), precision=jax.lax.Precision.HIGHEST
                )
                scaled = jnp.max(
                    jnp.abs(c[:_VERIFY_ROWS].astype(jnp.float32) - ref) / jnp.maximum(bound, 1e-30)
                )
                devices.append(
                    {
                        "device": i,
                        "iters": iters,
                        "seconds": elapsed[i],
                        "tflops": 2 * n**3 * iters / elapsed[i] / 1e12,
                        "max_scaled_err": float(scaled),
                        "nonfinite": int(jnp.sum(~jnp.isfinite(c))),
                        "checksum": float(jnp.sum(c.astype(jnp.float32))),
                    }
                )
            results.append({"dtype": dtype, "n": n, "devices": devices})
        return {"results": results, "unsupported": unsupported}

    def mem_copy(self, nbytes: int | None, seconds: float) -> Raw:
        jax, jnp = self.jax, self.jnp
        count = (nbytes or DEFAULT_COPY_BYTES) // 4
        xs = [jax.device_put(jnp.full((count,), 1.5, dtype=jnp.float32), d) for d in self.devices]
        # An elementwise op XLA cannot elide: reads every byte once and writes every byte once.
        bump = jax.jit(lambda x: x + jnp.float32(1.0))
        elapsed, iters = self._timed(bump, xs, seconds)
        return {
            "devices": [
                {
                    "device": i,
                    "bytes": count * 4,
                    "iters": iters,
                    "seconds": s,
                    "gbps": 2 * count * 4 * iters / s / 1e9,
                }
                for i, s in enumerate(elapsed)
            ]
        }

    def host_device(self, nbytes: int | None, seconds: float) -> Raw:
        jax = self.jax
        nbytes = nbytes or DEFAULT_H2D_BYTES
        host = np.resize(np.random.default_rng(self.seed).integers(0, 256, 2**20, dtype=np.uint8), nbytes)
        devices = []
        for i, d in enumerate(self.devices):
            jax.device_put(host, d).block_until_ready()  # warm-up
            t0, iters = time.perf_counter(), 0
            while time.perf_counter() - t0 < seconds or iters < 3:
                x = jax.device_put(host, d)
                x.block_until_ready()
                iters += 1
            h2d = nbytes * iters / (time.perf_counter() - t0) / 1e9
            # A jax array keeps the host copy its first device_get made, so reading one array again
            # moves nothing: each read gets a new array, made on the device outside the timing.
            bump = jax.jit(lambda a: a + np.uint8(1))  # runs where its input lives: on d
            bump(x).block_until_ready()  # compiled before the clock starts
            spent, iters = 0.0, 0
            while spent < seconds or iters < 3:
                x = bump(x)
                x.block_until_ready()
                t0 = time.perf_counter()
                np.asarray(jax.device_get(x))
                spent += time.perf_counter() - t0
                iters += 1
            d2h = nbytes * iters / spent / 1e9
            devices.append({"device": i, "h2d_gbps": h2d, "d2h_gbps": d2h})
        return {"bytes": nbytes, "devices": devices}

    def allreduce(self, nbytes: int | None, iters: int) -> Raw:
        jax, jnp = self.jax, self.jnp
        world = len(self.devices)
        if world < 2:
            raise Unsupported("one TPU chip: no intra-host all-reduce")
        count = (nbytes or DEFAULT_ALLREDUCE_BYTES) // 4
        x = jnp.stack([jnp.full((count,), float(r + 1), dtype=jnp.float32) for r in range(world)])
        psum = jax.pmap(lambda v: jax.lax.psum(v, "i"), axis_name="i", devices=self.devices)
        # One row on each chip. jax.device_put_sharded is gone from current JAX (0.10 raises
        # AttributeError): a NamedSharding over the chips places the rows as it did.
        mesh = jax.sharding.Mesh(np.array(self.devices), ("i",))
        xs = jax.device_put(x, jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("i")))
        psum(xs).block_until_ready()
        times = []
        for _ in range(iters):
            t0 = time.perf_counter()
            out = psum(xs)
            out.block_until_ready()
            times.append(time.perf_counter() - t0)
        correct = bool(jnp.all(out[:, :: max(1, count // 65536)] == world * (world + 1) / 2))
        return {
            "impl": "jax-psum",
            "world": world,
            "bytes": count * 4,
            "iters": iters,
            "times_s": times,
            "correct": correct,
        }

    def load_and_sample(self, seconds: float, interval_s: float, need_power: bool = False) -> Raw:
        if need_power:
            raise Unsupported("JAX exposes no TPU power telemetry: TFLOP/s per watt cannot be measured")
        jax, jnp = self.jax, self.jnp
        n = DEFAULT_GEMM_N
        a = jax.random.normal(jax.random.PRNGKey(self.seed), (n, n), dtype=jnp.float32).astype(jnp.bfloat16)
        pairs = [(jax.device_put(a, d), jax.device_put(a, d)) for d in self.devices]
        mm = jax.jit(lambda ab: ab[0] @ ab[1])
        windows: list[list[float]] = [[] for _ in self.devices]
        flops = 0.0
        t0 = time.perf_counter()
        samples: list[Raw] = []
        while time.perf_counter() - t0 < seconds:
            elapsed, iters = self._timed(mm, pairs, interval_s)
            for i in range(len(self.devices)):
                windows[i].append(2 * n**3 * iters / elapsed[i] / 1e12)
            flops += 2 * n**3 * iters
            samples.append({"t": time.perf_counter() - t0, "devices": [{} for _ in self.devices]})
        total = time.perf_counter() - t0
        return {
            "interval_s": interval_s,
            "seconds": total,
            "samples": samples,
            "work": [
                {"device": i, "flops": flops, "seconds": total, "windows_tflops": w}
                for i, w in enumerate(windows)
            ],
            "power_source": None,
            "power_unavailable": "JAX exposes no TPU power telemetry",
        }
