"""Plan wall time for the example AWS fleet at 8 and at 1,024 nodes, measured in one run.

The fleet is one Auto Scaling group, so the program registers the same resources whatever the
node count and the ratio should stay near 1.0. Usage:

    .venv/bin/python benchmarks/plan_scaling.py [--repeat N]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from pathlib import Path

import yaml

from fleet.spec import spec_from_mapping
from fleetforge.plan import Plan, plan_spec

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "aws-p5-fleet.yaml"


def _plan(nodes: int) -> Plan:
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc.update(nodes=nodes, spares=1)
    return plan_spec(spec_from_mapping(doc, source=str(EXAMPLE)), source=str(EXAMPLE))


def _timed(nodes: int) -> tuple[float, Plan]:
    # Collect the previous plan's garbage first, so it is not charged to this one's clock.
    gc.collect()
    start = time.perf_counter()
    plan = _plan(nodes)
    return time.perf_counter() - start, plan


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="plans per size; the median is reported")
    args = parser.parse_args()
    _plan(8)  # warm-up: imports Pulumi and the AWS provider modules once
    times: dict[int, list[float]] = {8: [], 1024: []}
    plans: dict[int, Plan] = {}
    for _ in range(args.repeat):
        # Interleaved, so drift in the machine's load falls on both sizes alike.
        for nodes in times:
            seconds, plans[nodes] = _timed(nodes)
            times[nodes].append(seconds)
    small_s, large_s = statistics.median(times[8]), statistics.median(times[1024])
    small, large = plans[8], plans[1024]
    print(f"nodes     8: {small_s * 1000:7.1f} ms  ({len(small.resources)} resources)")
    print(f"nodes  1024: {large_s * 1000:7.1f} ms  ({len(large.resources)} resources)")
    print(f"ratio 1024/8: {large_s / small_s:.2f}  (median of {args.repeat} plans each, after one warm-up)")


if __name__ == "__main__":
    main()
