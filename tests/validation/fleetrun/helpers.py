"""What the fleet-run tests without hosts share: ansible-runner events as a play would send them, a
node's all-reduce record, empty results for the test fleet, and a fleet run judged by the gate."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fleet.metrics import MULTINODE_CHECK, MULTINODE_METRIC
from fleet.results import CheckRecord, ResultsWriter, RunRecord, read_results
from validation.fleetrun.events import HostRun
from validation.fleetrun.fabric import FabricStage
from validation.fleetrun.run import FleetRun
from validation.gate import GateResult, decide

HOSTS = ["h0", "h1", "h2", "h3"]
RUN = {"run_id": "r1", "sku": "cpu", "level": "quick", "started": "2026-12-01T08:00:00.000+00:00"}


def record(node: str, status: str = "pass", busbw: float | None = None, reason: str | None = None) -> str:
    """The node's all-reduce record as the role prints it (one JSON line)."""
    rec = CheckRecord.model_validate(
        {
            **RUN,
            "node": node,
            "check": MULTINODE_CHECK,
            "status": status,
            "metrics": {} if busbw is None else {MULTINODE_METRIC: busbw},
            "reason": reason,
            "backend": "torch-gloo",
            "duration_s": 1.0,
        }
    )
    return rec.to_json()


def ok(host: str, task: str, **res: Any) -> dict[str, Any]:
    return {"event": "runner_on_ok", "event_data": {"host": host, "task": task, "res": res}}


def failed(host: str, task: str, **res: Any) -> dict[str, Any]:
    return {"event": "runner_on_failed", "event_data": {"host": host, "task": task, "res": res}}


def unreachable(host: str, task: str, msg: str) -> dict[str, Any]:
    return {"event": "runner_on_unreachable", "event_data": {"host": host, "task": task, "res": {"msg": msg}}}


def empty_results(tmp_path: Path) -> Path:
    """A results folder where every host of HOSTS has its run record and no checks."""
    results = tmp_path / "results"
    for h in HOSTS:
        with ResultsWriter(results / f"{h}.jsonl") as w:
            w.append(RunRecord.model_validate({**RUN, "node": h, "checks": []}))
    return results


def judged(stage: FabricStage, results: Path, artifacts: Path) -> tuple[FleetRun, GateResult]:
    """A successful fleet run of HOSTS that ran `stage`, and the gate's decision on its results."""
    run = FleetRun(
        expected=HOSTS,
        hosts={h: HostRun(h) for h in HOSTS},
        results_dir=results,
        fetched=sorted(results.glob("*.jsonl")),
        status="successful",
        rc=0,
        problem=None,
        bundle=None,
        artifacts=artifacts,
        timings={},
        fabric=stage,
    )
    gate = decide(
        [read_results(p) for p in run.fetched], sku="cpu", expected=HOSTS, host_reasons=run.reasons()
    )
    return run, gate


def flat_tasks(tasks: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """Every task of an Ansible task list in order, blocks and what they hold (block, rescue,
    always) included."""
    found: list[dict[str, Any]] = []
    for task in tasks or []:
        found.append(task)
        for key in ("block", "rescue", "always"):
            found += flat_tasks(task.get(key))
    return found
