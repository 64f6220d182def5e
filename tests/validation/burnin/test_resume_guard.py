"""`--resume` keeps only what this run measured: records of another node, SKU or level, records
without settings, and run records whose plan the runner could not have written are not trusted."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fleet.results import read_results
from tests.validation.burnin.helpers import FAKE_REGISTRY, run_options
from validation.burnin.registry import load_registry
from validation.burnin.runner import RunError, run_burnin


def rewrite(path: Path, change: Any) -> None:
    """Apply `change(record_dict)` to every line of a results file (what a forger or another
    machine's run would leave)."""
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    path.write_text("".join(json.dumps(change(x)) + "\n" for x in lines))


@pytest.mark.parametrize(
    "field",
    [{"node": "other"}, {"sku": "hgx-h100-8"}, {"level": "extended"}, {"settings": None}],
    ids=["node", "sku", "level", "no-settings"],
)
def test_resume_reruns_check_records_that_are_not_this_runs(tmp_path: Path, field: dict[str, Any]) -> None:
    first = run_burnin(run_options(tmp_path, ["ok", "ok2"]))

    def change(rec: dict[str, Any]) -> dict[str, Any]:
        if rec["kind"] != "check":
            return rec
        rec = {**rec, **field}
        return {k: v for k, v in rec.items() if v is not None}

    rewrite(first.path, change)
    again = run_burnin(run_options(tmp_path, resume=True))
    assert again.run_id == first.run_id
    assert again.kept == [] and [r.record.check for r in again.runs] == ["ok", "ok2"]
    assert again.verdict == "ok"
    assert all(r.record.node == "t1" and r.record.settings for r in again.runs)


def test_resume_keeps_no_record_of_a_check_outside_the_plan(tmp_path: Path) -> None:
    first = run_burnin(run_options(tmp_path, ["ok", "ok2"]))
    lines = first.path.read_text().splitlines()
    extra = json.loads(lines[1]) | {"check": "ok3"}
    first.path.write_text("\n".join([*lines, json.dumps(extra)]) + "\n")
    again = run_burnin(run_options(tmp_path, resume=True))
    assert again.kept == ["ok", "ok2"] and again.runs == []
    assert "ok3" not in again.final


@pytest.mark.parametrize(
    ("plan", "partial", "problem"),
    [
        ([], False, "lists no checks"),
        ([], True, "lists no checks"),
        (["ok", "nosuch"], True, "lists unknown checks"),
        (["ok", "ok"], True, "lists a check twice"),
        (["ok", "ok2"], False, "is not partial"),
    ],
)
def test_resume_refuses_a_run_record_whose_plan_it_could_not_have_written(
    tmp_path: Path, plan: list[str], partial: bool, problem: str
) -> None:
    first = run_burnin(run_options(tmp_path, ["ok", "ok2"]))

    def change(rec: dict[str, Any]) -> dict[str, Any]:
        return rec | {"checks": plan, "partial": partial} if rec["kind"] == "run" else rec

    rewrite(first.path, change)
    before = first.path.read_bytes()
    with pytest.raises(RunError, match=problem):
        run_burnin(run_options(tmp_path, resume=True))
    assert first.path.read_bytes() == before  # nothing appended to a run it refused


def test_resume_of_a_lone_run_record_with_no_checks_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "out" / "t1.jsonl"
    path.parent.mkdir(parents=True)
    run = {
        "schema": "fleetforge.result/1",
        "kind": "run",
        "run_id": "r1",
        "node": "t1",
        "sku": "cpu",
        "level": "quick",
        "started": "2026-12-01T00:00:00Z",
        "checks": [],
    }
    path.write_text(json.dumps(run) + "\n")
    with pytest.raises(RunError, match="lists no checks"):
        run_burnin(run_options(tmp_path, resume=True))


def test_resume_of_a_whole_level_run_keeps_what_it_measured(tmp_path: Path) -> None:
    # The level's whole list, not partial: accepted, and a finished check is kept.
    level = [c.name for c in load_registry(FAKE_REGISTRY).for_level("quick")]
    first = run_burnin(run_options(tmp_path, ["ok"]))

    def change(rec: dict[str, Any]) -> dict[str, Any]:
        return rec | {"checks": level, "partial": False} if rec["kind"] == "run" else rec

    rewrite(first.path, change)
    again = run_burnin(run_options(tmp_path, ["ok2"], resume=True))
    # ok2 ran, so the check that reads the run ran again after it.
    assert again.kept == ["ok"] and [r.record.check for r in again.runs] == ["ok2", "closing"]
    assert read_results(first.path).runs[0].partial is False
