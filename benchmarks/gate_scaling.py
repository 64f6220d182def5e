"""How long the gate takes to judge a large fleet: 10,000 nodes x 30 metrics by default.

Two figures, measured in one run on one machine:
  decide   - validation.gate.decide on records already in memory (no JSON parsing): the gate's own
             work, grouping, rules, statistics, versions and the fleet verdict. Target: under 1 s.
             Measured as the CLI runs it (the records frozen out of the cyclic GC, gc.freeze) and
             with the default GC, where full collections rescanning 110,000 records dominate; the
             two alternate which goes first from one repeat to the next.
  end2end  - read_results over one JSONL file per node in a temporary folder, then decide with the
             cyclic GC paused around it (gc.freeze ... gc.unfreeze), as fleetforge/commands/gate.py
             does: what `fleetforge gate DIR` spends before it writes reports. Measured after the
             generated fleet and its in-memory copies are dropped and collected, so no full
             collection rescans records the command would not hold. `end2end_default_gc` is the
             same without the pause, in the same run: the pause's before/after.
Each figure is the min / median / max of --repeat runs, wall time and CPU time of this process
(`*_cpu_s`); a machine shared with other work disturbs the CPU time far less, so comparisons on
a busy machine should use those. read, end2end and end2end_default_gc rotate their order.
The fleet is realistic rather than clean: 1 % of nodes are slow on one metric (one of the 30 the
fleet reports, all non-zero when healthy), 0.5 % run another driver, 0.3 % lost a check, so every
rule has work to do. 30 metrics = 10 checks x 3 metrics; the metrics beyond fleet/metrics.py's
vocabulary are declared here so the gate judges them too.

    .venv/bin/python benchmarks/gate_scaling.py [--nodes 10000] [--repeat 3] [--json]
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fleet.metrics import METRICS, Metric  # noqa: E402
from fleet.results import CheckRecord, Record, ResultFile, RunRecord, read_results  # noqa: E402
from validation.gate import FleetPlan, decide  # noqa: E402

SKU = "p5.48xlarge"
VERSIONS = {
    "driver": "550.54.15",
    "cuda": "12.4",
    "vbios": "96.00.89.00.01",
    "ofed": "24.01",
    "nccl": "2.21.5",
}


def vocabulary_and_checks() -> tuple[dict[str, Metric], dict[str, dict[str, float]]]:
    """10 checks x 3 metrics with healthy values; reference metrics sit above p5.48xlarge's floors."""
    extra = {
        f"bench_extra{i}_gbps": Metric(f"bench_extra{i}_gbps", "GB/s", True, "benchmark") for i in range(6)
    }
    vocabulary = {**METRICS, **extra}
    healthy = {
        "compute": {"gemm_bf16_tflops": 720.0, "gemm_fp16_tflops": 715.0, "gemm_fp8_tflops": 1400.0},
        "compute_fp32": {"gemm_fp32_tflops": 50.0, "gemm_tflops_per_watt": 1.1, "power_max_w": 690.0},
        "memory": {"mem_copy_gbps": 2950.0, "bench_extra0_gbps": 100.0, "bench_extra1_gbps": 200.0},
        "host_device": {"h2d_gbps": 53.0, "d2h_gbps": 52.5, "bench_extra2_gbps": 50.0},
        "collectives": {
            "allreduce_busbw_gbps": 480.0,
            "bench_extra3_gbps": 300.0,
            "bench_extra4_gbps": 310.0,
        },
        "fabric": {
            "fabric_ports_active": 32.0,
            "fabric_port_rate_gbitps": 100.0,
            "fabric_loopback_gbitps": 97.0,
        },
        "storage": {"storage_read_mbps": 5000.0, "storage_write_mbps": 3000.0, "bench_extra5_gbps": 40.0},
        "stress": {"stress_clock_ratio": 0.97, "stress_throttle_seconds": 0.5, "temperature_max_c": 71.0},
        "health": {"ecc_uncorrectable": 0.0, "remapped_rows_pending": 0.0, "remapped_rows_failed": 0.0},
        "links": {"xid_errors": 0.0, "pcie_degraded_links": 0.0, "nvlink_down_links": 0.0},
    }
    assert sum(len(m) for m in healthy.values()) == 30
    return vocabulary, healthy


def generate(nodes: int, seed: int = 1) -> dict[str, list[Record]]:
    vocabulary, healthy = vocabulary_and_checks()
    rng = random.Random(seed)
    checks = list(healthy)
    # A slow node is slow on a metric the fleet reports and that is non-zero when healthy (a
    # zero count scaled by 1.3 stays zero: no rule would see it).
    slowable = [m for values in healthy.values() for m, v in values.items() if v != 0]
    fleet: dict[str, list[Record]] = {}
    for i in range(nodes):
        node = f"node{i:05d}"
        started = f"2026-11-29T10:{i % 60:02d}:{(i // 60) % 60:02d}.000+00:00"
        base = {"run_id": f"run-{node}", "node": node, "sku": SKU, "level": "standard", "started": started}
        versions = dict(VERSIONS)
        if rng.random() < 0.005:
            versions["driver"] = "535.161.08"
        records: list[Record] = [RunRecord.model_validate({**base, "checks": checks, "versions": versions})]
        slow = rng.choice(slowable) if rng.random() < 0.01 else None
        lost = rng.choice(checks) if rng.random() < 0.003 else None
        for check, metrics in healthy.items():
            if check == lost:
                continue
            values = {}
            for metric, value in metrics.items():
                x = value * (1 + rng.gauss(0, 0.01))
                if metric == slow:
                    x *= 0.8 if vocabulary[metric].higher_is_better else 1.3
                values[metric] = x
            records.append(
                CheckRecord.model_validate(
                    {**base, "check": check, "status": "pass", "metrics": values, "duration_s": 2.0}
                )
            )
        fleet[node] = records
    return fleet


def in_memory(fleet: dict[str, list[Record]]) -> list[ResultFile]:
    files = []
    for node, records in fleet.items():
        f = ResultFile(Path(f"/results/{node}.jsonl"))
        f.runs = [r for r in records if isinstance(r, RunRecord)]
        f.checks = [r for r in records if isinstance(r, CheckRecord)]
        files.append(f)
    return files


def timed(fn: Callable[[], object]) -> tuple[float, float]:
    """(wall s, CPU s of this process) of one call."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def decide_paused_gc(files: list[ResultFile], **kwargs: Any) -> object:
    """decide as `fleetforge gate` calls it: the records read are frozen out of the cyclic GC."""
    gc.freeze()
    try:
        return decide(files, **kwargs)
    finally:
        gc.unfreeze()


def rotated(repeat: int, names: list[str]) -> Iterator[str]:
    """Each name once per repeat, the order rotated by one each time."""
    for i in range(repeat):
        k = i % len(names)
        yield from names[k:] + names[:k]


def spread(samples: list[tuple[float, float]], which: int) -> dict[str, float]:
    values = sorted(s[which] for s in samples)
    return {
        "min": round(values[0], 3),
        "median": round(statistics.median(values), 3),
        "max": round(values[-1], 3),
    }


def decide_samples(
    files: list[ResultFile], plan: FleetPlan, vocabulary: dict[str, Metric], repeat: int
) -> dict[str, list[tuple[float, float]]]:
    """decide on records in memory, with the GC paused as the command does and with the default GC."""
    samples: dict[str, list[tuple[float, float]]] = {"decide": [], "decide_default_gc": []}
    steps: dict[str, Callable[[], object]] = {
        "decide": lambda: decide_paused_gc(files, plan=plan, vocabulary=vocabulary),
        "decide_default_gc": lambda: decide(files, plan=plan, vocabulary=vocabulary),
    }
    for name in rotated(repeat, list(steps)):
        samples[name].append(timed(steps[name]))
        gc.collect()  # the previous step's garbage is not charged to the next
    return samples


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    vocabulary, _ = vocabulary_and_checks()
    plan = FleetPlan("bench", required=int(args.nodes * 0.95), spares=args.nodes - int(args.nodes * 0.95))

    t0 = time.perf_counter()
    fleet = generate(args.nodes)
    generate_s = time.perf_counter() - t0
    files = in_memory(fleet)
    result = decide(files, plan=plan, vocabulary=vocabulary)  # warm-up, and the figures' sanity check
    sanity = {
        "nodes": args.nodes,
        "metrics": len(result.stats),
        "records": sum(len(r) for r in fleet.values()),
        "rejected": len(result.fleet.rejected),
        "ready": result.fleet.ready,
        "generate_s": round(generate_s, 3),
    }
    del result
    gc.collect()
    samples = decide_samples(files, plan, vocabulary, args.repeat)

    with tempfile.TemporaryDirectory(prefix="gate-bench-") as tmp:
        folder = Path(tmp)
        for node, records in fleet.items():
            # Same bytes the runner writes, without its per-record fsync (not what is measured here).
            (folder / f"{node}.jsonl").write_text("".join(r.to_json() + "\n" for r in records))
        paths = sorted(folder.glob("*.jsonl"))
        # What `fleetforge gate` holds while it reads and decides is what it read, nothing else.
        del fleet, files, node, records
        gc.collect()
        file_steps: dict[str, Callable[[], object]] = {
            "read": lambda: [read_results(p) for p in paths],
            "end2end": lambda: decide_paused_gc(
                [read_results(p) for p in paths], plan=plan, vocabulary=vocabulary
            ),
            "end2end_default_gc": lambda: decide(
                [read_results(p) for p in paths], plan=plan, vocabulary=vocabulary
            ),
        }
        samples.update({name: [] for name in file_steps})
        for name in rotated(args.repeat, list(file_steps)):
            samples[name].append(timed(file_steps[name]))
            gc.collect()

    figures: dict[str, Any] = dict(sanity)
    for name, got in samples.items():
        figures[f"{name}_s"] = spread(got, 0)
        figures[f"{name}_cpu_s"] = spread(got, 1)
    decide_median = figures["decide_s"]["median"]
    figures["decide_us_per_node"] = round(decide_median / args.nodes * 1e6, 1)
    figures["read_share_of_end2end_cpu"] = round(
        figures["read_cpu_s"]["median"] / figures["end2end_cpu_s"]["median"], 2
    )
    figures["end2end_cpu_paused_over_default_gc"] = round(
        figures["end2end_cpu_s"]["median"] / figures["end2end_default_gc_cpu_s"]["median"], 2
    )
    figures["decide_under_1s"] = decide_median < 1.0
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        print(f"min / median / max of {args.repeat} runs each")
        for key, value in figures.items():
            if isinstance(value, dict):
                value = f"{value['min']} / {value['median']} / {value['max']}"
            print(f"{key:36} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
