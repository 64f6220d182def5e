"""GPU device check: run the burn-in's standard level on this GPU node, then measure the raw
ceilings in the same run with plain PyTorch loops, and print each burn-in figure beside its
ceiling plus the level's wall time.

STATUS: prepared, NOT YET RUN ON A GPU. It was written in a session without a GPU, against
PyTorch's and NVML's APIs; the burn-in's GPU path it drives was tested only with injected
NVML / torch stand-ins. Record its output the first time it runs on a GPU.

What to expect on one H200 SXM (shared/reference/accelerators.md): GEMM bf16 8192^3 on random
data 769-798 TFLOP/s with plain PyTorch; device-to-device copy about 4,300 GB/s counting bytes
read + written. The burn-in's figures should sit within a few per cent of the ceilings: the
burn-in uses the same kernels, so a large gap is overhead in the burn-in, not in the GPU.

    python benchmarks/device/gpu_standard_level.py [--sku auto] [--level standard] [--out DIR]

Needs: the gpu extra (nvidia-ml-py) and a CUDA build of torch. Prints a table and, last, one
JSON line with every figure (for the record).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

GEMM_N = 8192
COPY_BYTES = 2 * 2**30
H2D_BYTES = 1 * 2**30
ALLREDUCE_BYTES = 8 * 2**30
SECONDS = 3.0


def _events(torch: Any) -> tuple[Any, Any]:
    return torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)


def _timed_loop(torch: Any, fn: Any, seconds: float) -> tuple[float, int]:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    iters = max(10, int(seconds / max(time.perf_counter() - t0, 1e-6)))
    start, end = _events(torch)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1000, iters


def ceilings(torch: Any) -> dict[str, float]:
    """Plain PyTorch on GPU 0: the numbers the burn-in's figures are compared with."""
    torch.backends.cuda.matmul.allow_tf32 = False
    out = {"gemm_bf16_tflops": _gemm_ceiling(torch), "mem_copy_gbps": _copy_ceiling(torch)}
    out.update(_host_device_ceiling(torch))
    return out


def _gemm_ceiling(torch: Any) -> float:
    a = torch.randn(GEMM_N, GEMM_N, device="cuda:0", dtype=torch.bfloat16)
    b = torch.randn(GEMM_N, GEMM_N, device="cuda:0", dtype=torch.bfloat16)
    c = torch.empty_like(a)
    secs, iters = _timed_loop(torch, lambda: torch.matmul(a, b, out=c), SECONDS)
    return 2 * GEMM_N**3 * iters / secs / 1e12


def _copy_ceiling(torch: Any) -> float:
    src = torch.rand(COPY_BYTES // 4, device="cuda:0")
    dst = torch.empty_like(src)
    secs, iters = _timed_loop(torch, lambda: dst.copy_(src), SECONDS)
    return 2 * COPY_BYTES * iters / secs / 1e9  # bytes read + bytes written


def _host_device_ceiling(torch: Any) -> dict[str, float]:
    host = torch.empty(H2D_BYTES, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty(H2D_BYTES, dtype=torch.uint8, device="cuda:0")
    secs, iters = _timed_loop(torch, lambda: dev.copy_(host, non_blocking=True), SECONDS)
    h2d = H2D_BYTES * iters / secs / 1e9
    secs, iters = _timed_loop(torch, lambda: host.copy_(dev, non_blocking=True), SECONDS)
    return {"h2d_gbps": h2d, "d2h_gbps": H2D_BYTES * iters / secs / 1e9}


def _allreduce_rank(rank: int, world: int, store: str, result: str) -> None:
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"file://{store}", rank=rank, world_size=world)
    x = torch.ones(ALLREDUCE_BYTES // 4, device=f"cuda:{rank}")
    for _ in range(5):
        dist.all_reduce(x)
    torch.cuda.synchronize()
    dist.barrier()
    start, end = _events(torch)
    iters = 20
    start.record()
    for _ in range(iters):
        dist.all_reduce(x)
    end.record()
    end.synchronize()
    if rank == 0:
        t = start.elapsed_time(end) / 1000 / iters
        Path(result).write_text(json.dumps({"busbw": ALLREDUCE_BYTES / t / 1e9 * 2 * (world - 1) / world}))
    dist.destroy_process_group()


def allreduce_ceiling(torch: Any) -> float | None:
    world = torch.cuda.device_count()
    if world < 2:
        return None
    import torch.multiprocessing as tmp

    with tempfile.TemporaryDirectory() as d:
        result = os.path.join(d, "result.json")
        tmp.start_processes(
            _allreduce_rank,
            args=(world, os.path.join(d, "store"), result),
            nprocs=world,
            start_method="spawn",
        )
        return float(json.loads(Path(result).read_text())["busbw"])


def main() -> int:
    parser = argparse.ArgumentParser(
        description="Burn-in standard level vs raw PyTorch ceilings on this GPU node."
    )
    parser.add_argument("--sku", default="auto")
    parser.add_argument("--level", default="standard", choices=["quick", "standard", "extended"])
    parser.add_argument("--out", default=os.environ.get("OUT", "device-results"))
    args = parser.parse_args()

    from fleet.catalog import get_sku
    from validation.runner import RunOptions, run_burnin
    from validation.skuselect import detect_sku

    sku = detect_sku() if args.sku == "auto" else get_sku(args.sku)
    out_dir = Path(args.out)
    t0 = time.perf_counter()
    summary = run_burnin(RunOptions(sku=sku, level=args.level, out_dir=out_dir, node="device"))
    level_wall = time.perf_counter() - t0
    for name, rec in summary.final.items():
        shown = rec.reason or ", ".join(f"{k}={v:.4g}" for k, v in sorted(rec.metrics.items()))
        print(f"{name:<12} {rec.status:<5} {rec.duration_s:7.1f} s  {shown}")

    import torch  # only now: the burn-in's checks had the GPUs to themselves

    ceiling = ceilings(torch)
    ar = allreduce_ceiling(torch)
    if ar is not None:
        ceiling["allreduce_busbw_gbps"] = ar
    burnin = {k: v for rec in summary.final.values() for k, v in rec.metrics.items()}
    print(
        f"\n{'metric':<22} {'burn-in':>10} {'ceiling':>10} {'ratio':>6}   (sku {sku.sku}, level {args.level})"
    )
    for metric in ("gemm_bf16_tflops", "mem_copy_gbps", "h2d_gbps", "d2h_gbps", "allreduce_busbw_gbps"):
        got, top = burnin.get(metric), ceiling.get(metric)
        ratio = f"{got / top:6.2f}" if got and top else "     -"
        print(
            f"{metric:<22} {got if got is not None else float('nan'):>10.1f} {top if top is not None else float('nan'):>10.1f} {ratio}"
        )
    print(f"level wall time {level_wall:.1f} s; verdict {summary.verdict}; results {summary.path}")
    print(
        json.dumps(
            {
                "sku": sku.sku,
                "level": args.level,
                "level_wall_s": level_wall,
                "burnin": burnin,
                "ceiling": ceiling,
            }
        )
    )
    return 0


if __name__ == "__main__":  # the runner's forkserver and torch's spawn import this module
    sys.exit(main())
