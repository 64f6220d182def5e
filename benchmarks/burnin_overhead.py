"""Burn-in overhead: the share of the quick level's wall time spent outside measurements.

Runs `fleetforge burnin --level quick` on this machine's CPU backend (sku `cpu`) through the same
runner the command uses, and splits its wall time into time inside each check's collect() (the
measurement: allocating operands, timed loops, verification) and everything else: the forkserver
start, forking each check, backend construction, parse, fsynced appends, the run record. Target:
under 10 %.

    .venv/bin/python benchmarks/burnin_overhead.py [--sku cpu] [--level quick] [--repeat 5]

Each run is a process of its own (this script with --once), as each `fleetforge burnin` is: the
forkserver the runner starts is per process, so runs in one process would all but the first skip
its start. One warm-up run first (not counted: it reads the imports from a cold page cache), then
--repeat runs; printed: the per-check split of the median run, and min / median / max of the
overhead fraction over the runs.

The figure is a ratio measured in one run, not an absolute time: it holds on a busy machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from fleet.results import Level


def once(sku: str, level: Level) -> dict[str, Any]:
    """One burn-in in this process: its wall time and each check's split."""
    from fleet.catalog import get_sku
    from validation.burnin.runner import RunOptions, run_burnin

    with tempfile.TemporaryDirectory(prefix="fleetforge-overhead-") as tmp:
        t0 = time.perf_counter()
        summary = run_burnin(RunOptions(sku=get_sku(sku), level=level, out_dir=Path(tmp), node="bench"))
        wall = time.perf_counter() - t0
    checks: list[dict[str, Any]] = [
        {"check": r.record.check, "status": r.record.status, "wall_s": r.wall_s, "collect_s": r.collect_s}
        for r in summary.runs
    ]
    measured = sum(c["collect_s"] for c in checks)
    return {"wall_s": wall, "checks": checks, "overhead": (wall - measured) / wall}


def in_child(sku: str, level: str) -> dict[str, Any]:
    argv = [sys.executable, __file__, "--once", "--sku", sku, "--level", level]
    done = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=600)
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sku", default="cpu")
    parser.add_argument("--level", default="quick", choices=["quick", "standard", "extended"])
    parser.add_argument("--repeat", type=int, default=5, help="runs after the warm-up; min/median/max")
    parser.add_argument("--once", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.once:
        print(json.dumps(once(args.sku, args.level)))
        return 0

    in_child(args.sku, args.level)  # warm-up, not counted
    runs = [in_child(args.sku, args.level) for _ in range(args.repeat)]
    fractions = [r["overhead"] for r in runs]
    median_run = sorted(runs, key=lambda r: r["overhead"])[(len(runs) - 1) // 2]

    print(f"the median run of {args.repeat} (by overhead fraction):")
    print(f"{'check':<18} {'status':<6} {'wall s':>8} {'measure s':>10} {'outside s':>10}")
    for c in median_run["checks"]:
        print(
            f"{c['check']:<18} {c['status']:<6} {c['wall_s']:8.3f} {c['collect_s']:10.3f} "
            f"{c['wall_s'] - c['collect_s']:10.3f}"
        )
    wall = median_run["wall_s"]
    measured = sum(c["collect_s"] for c in median_run["checks"])
    in_checks = sum(c["wall_s"] for c in median_run["checks"])
    print(
        f"level wall time            {wall:8.3f} s ({args.sku}, {args.level}, {len(median_run['checks'])} checks)"
    )
    print(f"inside measurements        {measured:8.3f} s")
    print(f"check processes, outside   {in_checks - measured:8.3f} s (fork, backend, parse, result)")
    print(f"runner bookkeeping         {wall - in_checks:8.3f} s (plan, run record, fsynced appends)")
    walls = [r["wall_s"] for r in runs]
    print(
        f"\nlevel wall time, {args.repeat} runs  {min(walls):.2f} / {statistics.median(walls):.2f} / "
        f"{max(walls):.2f} s (min / median / max)"
    )
    print(
        f"overhead fraction, {args.repeat} runs  {min(fractions):.1%} / {statistics.median(fractions):.1%} / "
        f"{max(fractions):.1%} (min / median / max; target < 10 %); runs: "
        + ", ".join(f"{f:.1%}" for f in fractions)
    )
    return 0


if __name__ == "__main__":  # the runner's forkserver imports this module: run only as a script
    sys.exit(main())
