"""Plan wall time at a small and a large node count for an AWS GPU fleet, a GCP GPU fleet, a GCP
TPU slice and an Azure InfiniBand domain, measured in one run.

Each fleet is one scale-out group (an Auto Scaling group, a managed instance group, one queued
resource, one scale set per InfiniBand domain), so the program registers the same resources
whatever the node count and each ratio should stay near 1.0. AWS and GCP go from 8 to 1,024
nodes; Azure from 8 to 100 VMs (98 nodes + 2 spares), one InfiniBand domain's limit, since more
domains are more scale sets by design. The clock covers spec validation and planning only: the
example's YAML is read before it starts. Each size is planned once as a warm-up (not counted),
then --repeat times with the sizes in alternating order (small first, then large first), and
min / median / max are printed. Usage:

    .venv/bin/python benchmarks/plan_scaling.py [--repeat N] [--fleet aws|azure|gcp-gpu|gcp-tpu ...]
"""

from __future__ import annotations

import argparse
import copy
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
    loaded: list[dict[str, Any]] = []

    def doc(nodes: int) -> dict[str, Any]:
        if not loaded:  # read once; every call gets its own copy
            loaded.append(yaml.safe_load((EXAMPLES / name).read_text()))
        d = copy.deepcopy(loaded[0])
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


def _plan(fleet: str, doc: dict[str, Any]) -> Plan:
    return plan_spec(spec_from_mapping(doc, source=fleet), source=fleet)


def _timed(fleet: str, nodes: int) -> tuple[float, Plan]:
    doc = FLEETS[fleet](nodes)  # the YAML is read and copied outside the clock
    # Collect the previous plan's garbage first, so it is not charged to this one's clock.
    gc.collect()
    start = time.perf_counter()
    plan = _plan(fleet, doc)
    return time.perf_counter() - start, plan


def _spread(values: list[float]) -> str:
    """min / median / max in ms."""
    return " / ".join(f"{v * 1000:.1f}" for v in (min(values), statistics.median(values), max(values)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--repeat", type=int, default=5, help="plans per size; min / median / max are reported"
    )
    parser.add_argument("--fleet", action="append", choices=sorted(FLEETS), help="default: every fleet")
    args = parser.parse_args()
    for fleet in args.fleet or list(FLEETS):
        sizes = FLEET_SIZES.get(fleet, SIZES)
        for nodes in sizes:  # warm-up, not counted: imports Pulumi and the provider modules once
            _timed(fleet, nodes)
        times: dict[int, list[float]] = {n: [] for n in sizes}
        plans: dict[int, Plan] = {}
        for rep in range(args.repeat):
            # Interleaved, in alternating order, so drift in the machine's load falls on both
            # sizes alike and neither always runs first.
            for nodes in sizes if rep % 2 == 0 else sizes[::-1]:
                seconds, plans[nodes] = _timed(fleet, nodes)
                times[nodes].append(seconds)
        small, large = sizes
        small_s, large_s = (statistics.median(times[n]) for n in sizes)
        same = {(r.type, r.name) for r in plans[small].resources} == {
            (r.type, r.name) for r in plans[large].resources
        }
        print(f"{fleet}")
        for nodes in sizes:
            print(
                f"  nodes {nodes:5d}: {_spread(times[nodes])} ms min/median/max  "
                f"({len(plans[nodes].resources)} resources)"
            )
        per_rep = [b / a for a, b in zip(times[small], times[large], strict=True)]
        print(
            f"  ratio {large}/{small}: {large_s / small_s:.2f} of the medians, {min(per_rep):.2f}-"
            f"{max(per_rep):.2f} per repeat  ({args.repeat} plans each, after one warm-up per size); "
            f"same (type, name) set: {'yes' if same else 'NO'}"
        )


if __name__ == "__main__":
    main()
