"""Intra-node all-reduce over NCCL: one process per GPU, started with torch.multiprocessing
(spawn, as CUDA requires), rendezvous through a file store, each rank timing every iteration
with CUDA events. busbw as nccl-tests defines it: algbw x 2(n-1)/n.

Not run on a GPU in the session that wrote it; written against torch.distributed's API.
"""

from __future__ import annotations

import importlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from validation.burnin.procutil import die_with_parent

Raw = dict[str, Any]
DEFAULT_BYTES = 4 * 2**30
_WARMUP = 5


def _rank(rank: int, world: int, nbytes: int, iters: int, store: str, out_dir: str) -> None:
    die_with_parent()
    # Imported as Any: the checks type the same with and without torch installed.
    torch: Any = importlib.import_module("torch")
    dist: Any = importlib.import_module("torch.distributed")

    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"file://{store}", rank=rank, world_size=world)
    try:
        count = nbytes // 4
        x = torch.empty(count, dtype=torch.float32, device=f"cuda:{rank}")
        times = []
        for it in range(_WARMUP + iters):
            x.fill_(float(rank + 1))  # refilled each time: the sum stays exact and finite
            torch.cuda.synchronize()
            dist.barrier()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            dist.all_reduce(x, op=dist.ReduceOp.SUM)
            end.record()
            end.synchronize()
            if it >= _WARMUP:
                times.append(start.elapsed_time(end) / 1000)
        want = world * (world + 1) / 2
        correct = bool((x[:: max(1, count // 65536)] == want).all().item())
        nccl = ".".join(map(str, torch.cuda.nccl.version())) if hasattr(torch.cuda, "nccl") else ""
        Path(out_dir, f"rank{rank}.json").write_text(
            json.dumps({"times_s": times, "correct": correct, "nccl": nccl})
        )
    finally:
        dist.destroy_process_group()


def allreduce(world: int, nbytes: int | None, iters: int) -> Raw:
    tmp: Any = importlib.import_module("torch.multiprocessing")

    nbytes = nbytes or DEFAULT_BYTES
    nbytes -= nbytes % (4 * world)
    with tempfile.TemporaryDirectory(prefix="fleetforge-nccl-") as tmpdir:
        store = os.path.join(tmpdir, "store")
        ctx = tmp.start_processes(
            _rank, args=(world, nbytes, iters, store, tmpdir), nprocs=world, join=False, start_method="spawn"
        )
        while not ctx.join():
            pass
        ranks = [json.loads(Path(tmpdir, f"rank{r}.json").read_text()) for r in range(world)]
    per_iter = [max(r["times_s"][i] for r in ranks) for i in range(iters)]
    return {
        "impl": "nccl",
        "world": world,
        "bytes": nbytes,
        "iters": iters,
        "times_s": per_iter,
        "correct": all(r["correct"] for r in ranks),
        "exit_codes": [0] * world,
        "nccl": ranks[0].get("nccl", ""),
    }
