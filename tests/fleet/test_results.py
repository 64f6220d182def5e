"""Result records: durable appends, tolerant reads, and no pass without measurements."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from fleet.results import (
    CheckRecord,
    ResultsWriter,
    RunRecord,
    iter_result_paths,
    read_results,
    utc_now,
)

BASE = {"run_id": "r1", "node": "n1", "sku": "cpu", "level": "quick", "started": "2026-11-29T00:00:00Z"}


def check(status: str, **kw: object) -> CheckRecord:
    return CheckRecord.model_validate({**BASE, "check": "compute", "status": status, "duration_s": 1.0, **kw})


def test_round_trip_and_truncated_tail(tmp_path: Path) -> None:
    path = tmp_path / "n1.jsonl"
    with ResultsWriter(path) as w:
        w.append(RunRecord.model_validate({**BASE, "checks": ["compute", "memory"]}))
        w.append(check("pass", metrics={"gemm_fp32_tflops": 0.05}))
    full = path.read_text()
    path.write_text(full + '{"schema": "fleetforge.result/1", "kind": "check", "run_id": "r1", "no')
    got = read_results(path)
    assert [r.checks for r in got.runs] == [("compute", "memory")]
    assert got.checks[0].metrics == {"gemm_fp32_tflops": 0.05}
    assert len(got.bad_lines) == 1 and "truncated" in got.bad_lines[0].problem
    assert got.bad_lines[0].line == 3


def test_pass_needs_metrics_and_failures_need_reasons() -> None:
    with pytest.raises(ValidationError, match="metrics it measured"):
        check("pass")
    with pytest.raises(ValidationError, match="say why"):
        check("error")
    assert check("skip", reason="no InfiniBand on this SKU").status == "skip"


def test_newer_schema_and_unknown_kind_are_reported(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_text(
        '{"schema": "fleetforge.result/9", "kind": "check"}\n{"schema": "fleetforge.result/1", "kind": "x"}\n[]\n'
    )
    problems = [b.problem for b in read_results(path).bad_lines]
    assert "upgrade fleetforge" in problems[0]
    assert "kind 'x'" in problems[1]
    assert problems[2] == "not a JSON object"


def test_folders_expand_to_jsonl_files(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "n2.jsonl").write_text("")
    (tmp_path / "n1.jsonl").write_text("")
    (tmp_path / "notes.txt").write_text("")
    found = list(iter_result_paths([tmp_path]))
    assert [p.name for p in found] == ["n2.jsonl", "n1.jsonl"]
    assert utc_now().endswith("+00:00")
