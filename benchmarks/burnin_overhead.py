"""Burn-in overhead: the share of the quick level's wall time spent outside measurements.

Runs `fleetforge burnin --level quick` on this machine's CPU backend (sku `cpu`) once, through the
same runner the command uses, and splits its wall time into time inside each check's collect()
(the measurement: allocating operands, timed loops, verification) and everything else: the
forkserver start, forking each check, backend construction, parse, fsynced appends, the run
record. Target: under 10 %.

    .venv/bin/python benchmarks/burnin_overhead.py [--sku cpu] [--level quick]

The figure is a ratio measured in one run, not an absolute time: it holds on a busy machine.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sku", default="cpu")
    parser.add_argument("--level", default="quick", choices=["quick", "standard", "extended"])
    args = parser.parse_args()

    from fleet.catalog import get_sku
    from validation.burnin.runner import RunOptions, run_burnin

    with tempfile.TemporaryDirectory(prefix="fleetforge-overhead-") as tmp:
        t0 = time.perf_counter()
        summary = run_burnin(
            RunOptions(sku=get_sku(args.sku), level=args.level, out_dir=Path(tmp), node="bench")
        )
        wall = time.perf_counter() - t0

    print(f"{'check':<12} {'status':<6} {'wall s':>8} {'measure s':>10} {'outside s':>10}")
    for run in summary.runs:
        r = run.record
        print(
            f"{r.check:<12} {r.status:<6} {run.wall_s:8.3f} {run.collect_s:10.3f} {run.wall_s - run.collect_s:10.3f}"
        )
    measured = sum(r.collect_s for r in summary.runs)
    in_checks = sum(r.wall_s for r in summary.runs)
    outside = wall - measured
    print(f"level wall time            {wall:8.3f} s ({args.sku}, {args.level}, {len(summary.runs)} checks)")
    print(f"inside measurements        {measured:8.3f} s")
    print(f"check processes, outside   {in_checks - measured:8.3f} s (fork, backend, parse, result)")
    print(f"runner bookkeeping         {wall - in_checks:8.3f} s (plan, run record, fsynced appends)")
    print(f"overhead fraction          {outside / wall:8.1%} (target < 10 %)")
    return 0


if __name__ == "__main__":  # the runner's forkserver imports this module: run only as a script
    sys.exit(main())
