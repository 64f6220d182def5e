"""All-reduce across processes on one host: torch.distributed gloo when PyTorch is importable,
else a ring all-reduce over shared memory implemented here with numpy.

Both time each iteration between barriers, keep the slowest rank's time (the collective is done
when the last rank is), and check the result: every rank starts from random small integers, so
the sum is exact in float32 and any difference is a real error, not rounding.
"""

from __future__ import annotations

import importlib.util
import mmap
import multiprocessing as mp
import os
import shutil
import time
from collections.abc import Callable
from multiprocessing.synchronize import Barrier
from typing import Any

import numpy as np

from validation.burnin.probes import scratch
from validation.burnin.procutil import die_with_parent

Raw = dict[str, Any]
_WARMUP = 2


def bus_factor(world: int) -> float:
    """nccl-tests all_reduce: busbw = algbw x 2(n-1)/n."""
    return 2 * (world - 1) / world


def _payload(rank: int, count: int, seed: int) -> np.ndarray[Any, np.dtype[np.float32]]:
    rng = np.random.default_rng(seed + rank)
    return rng.integers(-8, 9, count).astype(np.float32)


class _Shared:
    """Anonymous shared mappings a forked rank inherits: payloads, work buffers, timings, flags."""

    def __init__(self, world: int, count: int, iters: int) -> None:
        self.world, self.count, self.iters = world, count, iters
        self.pristine = mmap.mmap(-1, world * count * 4)
        self.work = mmap.mmap(-1, world * count * 4)
        self.times = mmap.mmap(-1, world * (iters + _WARMUP) * 8)
        self.ok = mmap.mmap(-1, world)

    def arrays(
        self,
    ) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        shape = (self.world, self.count)
        return (
            np.frombuffer(self.pristine, np.float32).reshape(shape),
            np.frombuffer(self.work, np.float32).reshape(shape),
            np.frombuffer(self.times, np.float64).reshape(self.world, self.iters + _WARMUP),
            np.frombuffer(self.ok, np.uint8),
        )


def _ring_rank(rank: int, shared: _Shared, barrier: Barrier, seed: int) -> None:
    die_with_parent()
    world, count = shared.world, shared.count
    pristine, work, times, ok = shared.arrays()
    pristine[rank] = _payload(rank, count, seed)
    bounds = np.linspace(0, count, world + 1, dtype=np.int64)
    left = (rank - 1) % world
    mine, theirs = work[rank], work[left]
    for it in range(shared.iters + _WARMUP):
        barrier.wait()
        mine[:] = pristine[rank]
        barrier.wait()
        t0 = time.perf_counter()
        # Reduce-scatter: at step s, add the left neighbour's chunk (rank - s - 1); after n-1
        # steps this rank holds the full sum of chunk (rank + 1).
        for s in range(world - 1):
            c = (rank - s - 1) % world
            lo, hi = bounds[c], bounds[c + 1]
            np.add(mine[lo:hi], theirs[lo:hi], out=mine[lo:hi])
            barrier.wait()
        # All-gather: at step s, copy the finished chunk (rank - s) from the left neighbour.
        for s in range(world - 1):
            c = (rank - s) % world
            lo, hi = bounds[c], bounds[c + 1]
            mine[lo:hi] = theirs[lo:hi]
            barrier.wait()
        times[rank, it] = time.perf_counter() - t0
    expected = pristine.sum(axis=0, dtype=np.float64)
    ok[rank] = 1 if np.array_equal(mine.astype(np.float64), expected) else 0


def _gloo_rank(rank: int, shared: _Shared, barrier: Barrier, seed: int, store: str) -> None:
    die_with_parent()
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    world, count = shared.world, shared.count
    pristine, _, times, ok = shared.arrays()
    pristine[rank] = _payload(rank, count, seed)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    try:
        source = torch.from_numpy(pristine[rank].copy())
        tensor = torch.empty_like(source)
        for it in range(shared.iters + _WARMUP):
            tensor.copy_(source)
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
            times[rank, it] = time.perf_counter() - t0
        barrier.wait()  # every payload is written before anyone checks against the sum
        expected = pristine.sum(axis=0, dtype=np.float64)
        ok[rank] = 1 if np.array_equal(tensor.numpy().astype(np.float64), expected) else 0
    finally:
        dist.destroy_process_group()


def _launch(world: int, target: Callable[..., None], args: tuple[Any, ...], timeout: float) -> list[int]:
    # fork: the ranks inherit the shared mappings; the check's worker process is fresh and
    # single-threaded, so forking it is safe.
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=target, args=(r, *args), daemon=True) for r in range(world)]
    for p in procs:
        p.start()
    deadline = time.monotonic() + timeout
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    codes = []
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join()
            codes.append(-9)
        else:
            codes.append(p.exitcode if p.exitcode is not None else -1)
    return codes


def allreduce(
    world: int, nbytes: int, iters: int, seed: int, timeout: float = 600.0, use_torch: bool | None = None
) -> Raw:
    if world < 2:
        raise ValueError("an all-reduce needs at least two ranks")
    count = max(world, nbytes // 4)
    count -= count % world
    shared = _Shared(world, count, iters)
    with_torch = importlib.util.find_spec("torch") is not None if use_torch is None else use_torch
    barrier = mp.get_context("fork").Barrier(world)
    if with_torch:
        import torch.distributed  # noqa: F401 - once here: the forked ranks inherit it loaded

        # Named for this process: a check killed at its timeout skips the `finally`, and the
        # runner (or the next all-reduce) removes what it left (probes/scratch.py).
        scratch.sweep_gloo()
        store = scratch.gloo_store_dir()
        try:
            codes = _launch(world, _gloo_rank, (shared, barrier, seed, os.path.join(store, "store")), timeout)
        finally:
            shutil.rmtree(store, ignore_errors=True)
        impl = "torch-gloo"
    else:
        codes = _launch(world, _ring_rank, (shared, barrier, seed), timeout)
        impl = "numpy-shm-ring"
    _, _, times, ok = shared.arrays()
    per_iter = times[:, _WARMUP:].max(axis=0)
    return {
        "impl": impl,
        "world": world,
        "bytes": count * 4,
        "iters": iters,
        "exit_codes": codes,
        "times_s": [float(t) for t in per_iter],
        "correct": bool(all(c == 0 for c in codes) and ok.all()),
    }
