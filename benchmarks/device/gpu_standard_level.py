"""GPU device check: the raw ceilings with plain PyTorch loops on a cool GPU, then the burn-in's
standard level on this node, then the ceilings again on the GPU the burn-in left hot; each
burn-in figure is printed beside both ceilings, plus the level's wall time.

STATUS: prepared, NOT YET RUN ON A GPU (no GPU machine has been lent to this project's sessions
so far). Run it with benchmarks/device/run_on_device.sh. Writes under --out (default $OUT):
  burnin/device.jsonl       the burn-in's records, fsynced check by check (the runner `fleetforge
                            burnin` uses, node name "device")
  bench/figures.jsonl       one JSON line per phase, appended as soon as the phase is measured
                            (ceilings before, burn-in, ceilings after, the table), so a run killed
                            part way keeps what it measured
  bench/figures.md          the table so far, rewritten after each phase

The ceilings run in a child process of their own (this script with --ceilings-only), so no CUDA
context or cached allocation of theirs is held while the burn-in's checks measure.

What to expect on one H200 SXM: NVIDIA's datasheet gives 989 TFLOP/s dense bf16/fp16, 1,979 fp8
and 4.8 TB/s of HBM3e; plain PyTorch on random 8192^3 operands reaches roughly 80 % of the bf16
figure, and a device-to-device copy counts bytes read + written. The burn-in's figures should sit
within a few per cent of the ceilings taken before it (the same kernels, the same cool GPU), so a
large gap there is overhead in the burn-in, not in the GPU; the ceilings after show what the heat
of the 120 s stress costs.

The SKU: the catalog (fleet/catalog/skus.yaml) has no 1-GPU NVIDIA SKU, so on a lent 1-GPU
machine `--sku auto` picks an 8-GPU one and the burn-in's verdict fails the device count. The
result of this check is the ratio table, not that verdict: when the SKU expects more GPUs than
this machine has, the verdict is printed as "not judged" with the reason, and the exit status
depends only on the figures: 0 when the ceilings were measured and every metric with a ceiling
has a burn-in figure, 1 when one is missing, 2 when PyTorch sees no CUDA device (the burn-in
is then not run at all; --dry-run runs it anyway, a CPU rehearsal of everything but the
ceilings, and still exits 2: nothing was measured against a ceiling).

    python benchmarks/device/gpu_standard_level.py [--sku auto] [--level standard] [--out DIR]

Needs: the gpu extra (nvidia-ml-py) and a CUDA build of torch. Prints a table and, last, one
JSON line with every figure (for the record).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
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
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 means fp32, as the burn-in measures it
    out = {f"gemm_{name}_tflops": _gemm_ceiling(torch, name) for name in _gemm_dtypes(torch)}
    out["mem_copy_gbps"] = _copy_ceiling(torch)
    out.update(_host_device_ceiling(torch))
    return out


def _gemm_dtypes(torch: Any) -> list[str]:
    names = ["bf16", "fp16", "fp32"]
    # fp8 tensor cores: compute capability 8.9 and newer, through torch._scaled_mm.
    if hasattr(torch, "float8_e4m3fn") and torch.cuda.get_device_capability(0) >= (8, 9):
        names.append("fp8")
    return names


def _gemm_ceiling(torch: Any, name: str) -> float:
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}.get(name, torch.bfloat16)
    a = torch.randn(GEMM_N, GEMM_N, device="cuda:0", dtype=dtype)
    b = torch.randn(GEMM_N, GEMM_N, device="cuda:0", dtype=dtype)
    if name == "fp8":
        a8 = a.to(torch.float8_e4m3fn)
        b8 = b.t().contiguous().to(torch.float8_e4m3fn).t()  # _scaled_mm wants it column-major
        one = torch.tensor(1.0, device="cuda:0")

        def step() -> None:
            torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)

    else:
        c = torch.empty_like(a)

        def step() -> None:
            torch.matmul(a, b, out=c)

    secs, iters = _timed_loop(torch, step, SECONDS)
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


METRICS = (
    "gemm_bf16_tflops",
    "gemm_fp16_tflops",
    "gemm_fp8_tflops",
    "gemm_fp32_tflops",
    "mem_copy_gbps",
    "h2d_gbps",
    "d2h_gbps",
    "allreduce_busbw_gbps",
)


def cuda_torch() -> tuple[Any | None, str]:
    """PyTorch with a CUDA device, or None and why not: the GPU half is skipped by this one test."""
    try:
        import torch
    except ImportError:
        return None, "PyTorch is not installed"
    if not torch.cuda.is_available():
        return None, f"PyTorch {torch.__version__} sees no CUDA device"
    return torch, ""


def figures_table(
    sku: Any, burnin: dict[str, float], before: dict[str, float], after: dict[str, float]
) -> list[dict[str, Any]]:
    rows = []
    for metric in METRICS:
        ref = sku.reference.get(metric) if sku is not None else None
        got, top, hot = burnin.get(metric), before.get(metric), after.get(metric)
        rows.append(
            {
                "metric": metric,
                "burnin": got,
                "ceiling": top,
                "ratio": got / top if got and top else None,
                "ceiling_after": hot,
                "ratio_after": got / hot if got and hot else None,
                "reference": ref.value if ref else None,
                "reference_kind": ref.kind if ref else None,
            }
        )
    return rows


def markdown(rows: list[dict[str, Any]], header: str) -> str:
    def cell(v: Any, fmt: str = ".1f") -> str:
        return "-" if v is None else format(v, fmt) if isinstance(v, float) else str(v)

    lines = [
        header,
        "",
        "| metric | burn-in | ceiling before | ratio | ceiling after | ratio | reference (kind) |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        ref = "-" if r["reference"] is None else f"{r['reference']:g} ({r['reference_kind']})"
        lines.append(
            f"| {r['metric']} | {cell(r['burnin'])} | {cell(r['ceiling'])} | {cell(r['ratio'], '.3f')} "
            f"| {cell(r['ceiling_after'])} | {cell(r['ratio_after'], '.3f')} | {ref} |"
        )
    return "\n".join(lines) + "\n"


CEILINGS_TIMEOUT_S = 150  # typically ~45 s: torch import, CUDA start, 4 GEMMs, copy, h2d, d2h


def measure_ceilings(path: Path) -> int:
    """--ceilings-only: measure in this process, write the figures to path as JSON; 2 without CUDA."""
    torch, skipped = cuda_torch()
    if torch is None:
        path.write_text(json.dumps({"skipped": skipped}))
        return 2
    out: dict[str, Any] = {"ceiling": ceilings(torch), "devices": torch.cuda.device_count()}
    ar = allreduce_ceiling(torch)
    if ar is not None:
        out["ceiling"]["allreduce_busbw_gbps"] = ar
    out["versions"] = _versions(torch)
    path.write_text(json.dumps(out))
    return 0


def ceilings_in_child(work: Path, tag: str) -> dict[str, Any]:
    """The ceilings, from a child process that exits before anything else measures."""
    path = work / f"ceilings-{tag}.json"
    t0 = time.perf_counter()
    try:
        done = subprocess.run(
            [sys.executable, __file__, "--ceilings-only", str(path)], timeout=CEILINGS_TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        return {"skipped": f"ceilings ({tag}) ran past {CEILINGS_TIMEOUT_S} s"}
    if not path.exists():
        return {"skipped": f"ceilings ({tag}) exited {done.returncode} without figures"}
    got: dict[str, Any] = json.loads(path.read_text())
    got["wall_s"] = time.perf_counter() - t0
    return got


class Figures:
    """bench/figures.jsonl appended per phase as measured; figures.md rewritten each time."""

    def __init__(self, out_dir: Path) -> None:
        out_dir.mkdir(parents=True, exist_ok=True)
        self.jsonl, self.md = out_dir / "figures.jsonl", out_dir / "figures.md"

    def add(self, phase: str, record: dict[str, Any], table: str | None = None) -> None:
        with self.jsonl.open("a") as fh:
            fh.write(json.dumps({"phase": phase, **record}) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        if table is not None:
            self.md.write_text(table)


def main() -> int:
    parser = argparse.ArgumentParser(
        description="Burn-in standard level vs raw PyTorch ceilings on this GPU node."
    )
    parser.add_argument("--sku", default="auto")
    parser.add_argument("--level", default="standard", choices=["quick", "standard", "extended"])
    parser.add_argument("--out", default=os.environ.get("OUT", "device-results"))
    parser.add_argument(
        "--dry-run", action="store_true", help="without CUDA, run the burn-in half anyway (CPU rehearsal)"
    )
    parser.add_argument("--ceilings-only", metavar="FILE", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.ceilings_only:
        return measure_ceilings(Path(args.ceilings_only))

    from fleet.catalog import get_sku
    from validation.burnin.runner import RunOptions, run_burnin
    from validation.burnin.skuselect import AutoSkuError, detect_sku

    out = Path(args.out)
    figures = Figures(out / "bench")
    with tempfile.TemporaryDirectory(prefix="gpu-ceilings-") as tmp:
        before = ceilings_in_child(Path(tmp), "before")
    figures.add("ceilings_before", before)
    skipped = before.get("skipped")
    if skipped:
        print(f"ceilings before the burn-in: {skipped}")
        if not args.dry_run:
            print("no GPU figures to compare: the burn-in is not run (--dry-run runs it anyway)")
            return 2
    sku_note = ""
    try:
        sku = detect_sku() if args.sku == "auto" else get_sku(args.sku)
    except AutoSkuError as exc:
        if not exc.candidates:
            raise
        # Several SKUs fit this GPU: they share its model, so the figures compare the same; the
        # first one gives the checks and the reference column, and the header says so.
        sku = get_sku(exc.candidates[0])
        sku_note = f" (--sku auto: {exc}; took {sku.sku})"
    devices = before.get("devices")
    judged = devices is None or sku.accelerators_per_node in (0, devices)
    t0 = time.perf_counter()
    summary = run_burnin(RunOptions(sku=sku, level=args.level, out_dir=out / "burnin", node="device"))
    level_wall = time.perf_counter() - t0
    for name, rec in summary.final.items():
        shown = rec.reason or ", ".join(f"{k}={v:.4g}" for k, v in sorted(rec.metrics.items()))
        print(f"{name:<12} {rec.status:<5} {rec.duration_s:7.1f} s  {shown}")
    burnin = {k: v for rec in summary.final.values() for k, v in rec.metrics.items()}
    verdict = (
        str(summary.verdict)
        if judged
        else f"not judged (burn-in said {summary.verdict}): sku {sku.sku} expects "
        f"{sku.accelerators_per_node} GPUs, this machine has {devices}"
    )
    figures.add(
        "burnin",
        {
            "sku": sku.sku,
            "sku_note": sku_note or None,
            "level": args.level,
            "level_wall_s": level_wall,
            "verdict": verdict,
            "statuses": {n: r.status for n, r in summary.final.items()},
            "burnin": burnin,
        },
    )
    if skipped:
        after: dict[str, Any] = {"skipped": skipped}
    else:
        with tempfile.TemporaryDirectory(prefix="gpu-ceilings-") as tmp:
            after = ceilings_in_child(Path(tmp), "after")
        figures.add("ceilings_after", after)
    rows = figures_table(sku, burnin, before.get("ceiling", {}), after.get("ceiling", {}))
    header = (
        f"sku {sku.sku}{sku_note}, level {args.level}, level wall {level_wall:.1f} s, verdict {verdict}; "
        "ceilings before the burn-in (cool GPU) and after it (hot GPU)"
        + (f"; ceilings skipped: {skipped}" if skipped else "")
        + (f"; ceilings after: {after['skipped']}" if after.get("skipped") and not skipped else "")
    )
    table = markdown(rows, header)
    print("\n" + table)
    missing = [r["metric"] for r in rows if r["ceiling"] is not None and r["burnin"] is None]
    record = {
        "sku": sku.sku,
        "level": args.level,
        "level_wall_s": level_wall,
        "verdict": verdict,
        "ceilings_skipped": skipped or None,
        "versions": before.get("versions") or _versions(None),
        "burnin": burnin,
        "ceiling": before.get("ceiling", {}),
        "ceiling_after": after.get("ceiling", {}),
        "missing_burnin_figures": missing,
        "rows": rows,
    }
    figures.add("table", record, table)
    print(json.dumps(record))
    if skipped:
        return 2
    if missing:
        print(f"burn-in figures missing beside a ceiling: {', '.join(missing)}")
        return 1
    return 0


def _versions(torch: Any | None) -> dict[str, str]:
    """What the figures were measured with: the source line of a `kind: measured` reference."""
    out = {"date": time.strftime("%Y-%m-%d", time.gmtime())}
    if torch is not None:
        out["torch"] = str(torch.__version__)
        out["cuda"] = str(torch.version.cuda)
        out["device"] = str(torch.cuda.get_device_name(0))
        try:
            import pynvml

            pynvml.nvmlInit()
            driver = pynvml.nvmlSystemGetDriverVersion()
            out["driver"] = driver.decode() if isinstance(driver, bytes) else str(driver)
        except Exception as exc:  # the figures stand without it; say why it is absent
            out["driver"] = f"unread ({type(exc).__name__})"
    return out


if __name__ == "__main__":  # the runner's forkserver and torch's spawn import this module
    sys.exit(main())
