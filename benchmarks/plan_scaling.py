"""Plan wall time at a small and a large node count for an AWS GPU fleet, a GCP GPU fleet, a GCP
TPU slice and an Azure InfiniBand domain, measured in one run.

Each fleet is one scale-out group (an Auto Scaling group, a managed instance group, one queued
resource, one scale set per InfiniBand domain), so the program registers the same resources
whatever the node count and each ratio should stay near 1.0. AWS and GCP go from 8 to 1,024
nodes; Azure from 8 to 100 VMs (98 nodes + 2 spares), one InfiniBand domain's limit, since more
domains are more scale sets by design. Usage:

    .venv/bin/python benchmarks/plan_scaling.py [--repeat N] [--fleet aws|azure|gcp-gpu|gcp-tpu ...]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from fleet.spec import spec_from_mapping
from fleetforge.plan import Plan, plan_spec

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
SIZES = (8, 1024)
# Per fleet when it differs: an Azure scale set in one placement group holds 100 VMs, spares counted.
FLEET_SIZES = {"azure": (8, 98)}


def _example(name: str, **changes: Any) -> Callable[[int], dict[str, Any]]:
    def doc(nodes: int) -> dict[str, Any]:
        d: dict[str, Any] = yaml.safe_load((EXAMPLES / name).read_text())
        d.update(changes)
        d["nodes"] = nodes
        return d

    return doc


# name -> spec at a node count. The TPU fleet is a v5p slice: 8 hosts x 4 chips = 32 chips and
# 1,024 hosts = 4,096 chips are both slice shapes, so one spec family covers both sizes.
FLEETS: dict[str, Callable[[int], dict[str, Any]]] = {
    "aws": _example("aws-p5-fleet.yaml", spares=1),
    "gcp-gpu": _example("gcp-a3-mega-fleet.yaml", spares=1),
    "gcp-tpu": _example("gcp-tpu-v5e-slice.yaml", sku="tpu-v5p", spares=0),
    "azure": _example("azure-ndh100-fleet.yaml", spares=2),
}


def _plan(fleet: str, nodes: int) -> Plan:
    doc = FLEETS[fleet](nodes)
    return plan_spec(spec_from_mapping(doc, source=fleet), source=fleet)


def _timed(fleet: str, nodes: int) -> tuple[float, Plan]:
    # Collect the previous plan's garbage first, so it is not charged to this one's clock.
    gc.collect()
    start = time.perf_counter()
    plan = _plan(fleet, nodes)
    return time.perf_counter() - start, plan


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="plans per size; the median is reported")
    parser.add_argument("--fleet", action="append", choices=sorted(FLEETS), help="default: every fleet")
    args = parser.parse_args()
    for fleet in args.fleet or list(FLEETS):
        sizes = FLEET_SIZES.get(fleet, SIZES)
        _plan(fleet, sizes[0])  # warm-up: imports Pulumi and the provider modules once
        times: dict[int, list[float]] = {n: [] for n in sizes}
        plans: dict[int, Plan] = {}
        for _ in range(args.repeat):
            # Interleaved, so drift in the machine's load falls on both sizes alike.
            for nodes in sizes:
                seconds, plans[nodes] = _timed(fleet, nodes)
                times[nodes].append(seconds)
        small, large = sizes
        small_s, large_s = (statistics.median(times[n]) for n in sizes)
        same = {(r.type, r.name) for r in plans[small].resources} == {
            (r.type, r.name) for r in plans[large].resources
        }
        print(f"{fleet}")
        for nodes in sizes:
            median = statistics.median(times[nodes])
            print(f"  nodes {nodes:5d}: {median * 1000:7.1f} ms  ({len(plans[nodes].resources)} resources)")
        print(
            f"  ratio {large}/{small}: {large_s / small_s:.2f}  (median of {args.repeat} plans each, after one "
            f"warm-up); same (type, name) set: {'yes' if same else 'NO'}"
        )


if __name__ == "__main__":
    main()
