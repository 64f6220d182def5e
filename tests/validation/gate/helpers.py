"""Result sets for the gate's tests, generated: a healthy p5.48xlarge-like fleet with seeded noise.

Each node's burn-in is the records `fleetforge burnin` writes (docs/results.md): one run record,
then one check record per check. Tests change one thing (a slow node, a different driver, a lost
line) and assert the gate notices exactly that.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from pathlib import Path

from fleet.results import CheckRecord, Record, ResultFile, ResultsWriter, RunRecord

SKU = "p5.48xlarge"
STARTED = "2026-11-29T10:00:00.000+00:00"
VERSIONS = {"driver": "550.54.15", "cuda": "12.4", "vbios": "96.00.89.00.01", "ofed": "24.01-0.3.3"}
# check -> metric -> healthy value; p5.48xlarge floors: bf16 593.4, fp8 1088.45, mem_copy 2512.5,
# h2d/d2h 48, allreduce 460. Every metric the SKU references is measured: the gate rejects a fleet
# in which no node measured one.
HEALTHY: dict[str, dict[str, float]] = {
    "compute": {"gemm_bf16_tflops": 720.0, "gemm_fp16_tflops": 715.0, "gemm_fp8_tflops": 1400.0},
    "memory": {"mem_copy_gbps": 2950.0},
    "host_device": {"h2d_gbps": 53.0, "d2h_gbps": 52.5},
    "collectives": {"allreduce_busbw_gbps": 480.0},
    "stress": {"temperature_max_c": 71.0, "stress_clock_ratio": 0.97},
}
CHECKS = ("inventory", "health", *HEALTHY)


def base(
    node: str, run_id: str = "r1", sku: str = SKU, started: str = STARTED, level: str = "standard"
) -> dict[str, object]:
    return {"run_id": run_id, "node": node, "sku": sku, "level": level, "started": started}


def run_record(node: str, checks: Iterable[str] = CHECKS, **kw: object) -> RunRecord:
    versions = kw.pop("versions", VERSIONS)
    return RunRecord.model_validate({**base(node, **kw), "checks": list(checks), "versions": versions})  # type: ignore[arg-type]


def check_record(node: str, check: str, status: str = "pass", **kw: object) -> CheckRecord:
    fields = {k: kw.pop(k) for k in ("run_id", "sku", "started", "level") if k in kw}
    data = {**base(node, **fields), "check": check, "status": status, "duration_s": 1.5, **kw}  # type: ignore[arg-type]
    return CheckRecord.model_validate(data)


def node_records(
    node: str,
    rng: random.Random | None = None,
    *,
    noise: float = 0.01,
    scale: Mapping[str, float] | None = None,
    versions: Mapping[str, str] | None = None,
    drop: Iterable[str] = (),
    **kw: object,
) -> list[Record]:
    """A node's full burn-in: healthy values x (1 + noise), times `scale[metric]` where given."""
    rng = rng or random.Random(node)
    scale = scale or {}
    records: list[Record] = [run_record(node, versions=dict(versions or VERSIONS), **kw)]
    records.append(check_record(node, "inventory", metrics={"fabric_ports_active": 32.0}, **kw))
    records.append(check_record(node, "health", metrics={"xid_errors": 0.0}, **kw))
    for check, metrics in HEALTHY.items():
        if check in drop:
            continue
        values = {m: v * (1 + rng.uniform(-noise, noise)) * scale.get(m, 1.0) for m, v in metrics.items()}
        records.append(check_record(node, check, metrics=values, **kw))
    return records


def fleet(n: int, seed: int = 7, **per_node: Mapping[str, object]) -> dict[str, list[Record]]:
    """n healthy nodes node1..nodeN; per_node={"node3": {"scale": {...}}} changes one of them."""
    rng = random.Random(seed)
    out: dict[str, list[Record]] = {}
    for i in range(1, n + 1):
        name = f"node{i}"
        out[name] = node_records(name, rng, **dict(per_node.get(name, {})))  # type: ignore[arg-type]
    return out


def as_files(records: Mapping[str, list[Record]]) -> list[ResultFile]:
    """In memory, as read_results would have returned them (one file per node)."""
    files = []
    for node, recs in records.items():
        f = ResultFile(Path(f"/results/{node}.jsonl"))
        f.runs = [r for r in recs if isinstance(r, RunRecord)]
        f.checks = [r for r in recs if isinstance(r, CheckRecord)]
        files.append(f)
    return files


def write(folder: Path, records: Mapping[str, list[Record]]) -> Path:
    """On disk, as the runner writes them: <folder>/<node>.jsonl."""
    folder.mkdir(parents=True, exist_ok=True)
    for node, recs in records.items():
        with ResultsWriter(folder / f"{node}.jsonl") as w:
            for r in recs:
                w.append(r)
    return folder


def spec_mapping(nodes: int, spares: int = 0, **validation: object) -> dict[str, object]:
    """A valid p5.48xlarge fleet spec as a mapping (spec_from_mapping, or yaml.safe_dump for the CLI)."""
    return {
        "name": "train-a",
        "cloud": "aws",
        "region": "us-east-1",
        "zone": "us-east-1a",
        "sku": SKU,
        "nodes": nodes,
        "spares": spares,
        "tags": {"owner": "ml-platform"},
        "validation": {"level": "standard", **validation},
    }


def onprem_spec_mapping(hosts: Iterable[str], nodes: int, spares: int = 0) -> dict[str, object]:
    names = list(hosts)
    return {
        "name": "lab",
        "cloud": "onprem",
        "sku": "hgx-h100-8",
        "nodes": nodes,
        "spares": spares,
        "tags": {"owner": "ml-platform"},
        "hosts": [{"name": n, "address": f"10.0.0.{i + 1}", "user": "ops"} for i, n in enumerate(names)],
    }
