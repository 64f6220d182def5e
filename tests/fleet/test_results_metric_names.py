"""The results contract on metric names: a record carries at most a bounded number of metrics, each
named the way fleet/metrics.py names them; a record breaking either is no fleetforge record, and
the file holding it is refused (a reject for its node), never read as far as it goes."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import pytest
from pydantic import ValidationError

from fleet import results
from fleet.metrics import METRICS
from fleet.results import CheckRecord, parse_line, read_results

BASE = {"run_id": "r1", "node": "n1", "sku": "cpu", "level": "quick", "started": "2026-11-29T00:00:00Z"}
RUN = {**BASE, "schema": "fleetforge.result/1", "kind": "run", "checks": ["compute", "storage"]}
CHECK = {**BASE, "schema": "fleetforge.result/1", "kind": "check", "status": "pass", "duration_s": 1.0}

# Names no check writes: markup, control characters, terminal escapes, mathtext, other shapes.
HOSTILE_NAMES = [
    "x\x1b[2J",
    "gemm\nbf16",
    "tab\tname",
    "\u202eevil",
    "<script>alert(1)</script>",
    "[bold red]ACCEPT[/]",
    "$\\frac{1}{0}$",
    'q"uote',
    "a" * (64 + 1),
    "a" * 100_000,
    "",
    "GEMM_BF16_TFLOPS",
    "gemm-bf16",
    "gemm__bf16",
    "_leading",
    "trailing_",
    "9starts_with_digit",
    "gemm_\uff46p32_tflops",  # a fullwidth f
    "gemm bf16",
]


def write(path: Path, *records: Mapping[str, object]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def storage(**metrics: float) -> dict[str, object]:
    return {**CHECK, "check": "storage", "metrics": metrics}


def test_every_name_of_the_vocabulary_is_a_metric_name_and_fits_a_record() -> None:
    assert all(results.is_metric_name(name) for name in METRICS)
    # The bound is far above what a record of a real check carries (the whole vocabulary fits).
    assert len(METRICS) < results.MAX_RECORD_METRICS
    record = parse_line(json.dumps({**CHECK, "check": "everything", "metrics": dict.fromkeys(METRICS, 1.0)}))
    assert isinstance(record, CheckRecord) and record.metrics.keys() == METRICS.keys()


def test_a_record_with_more_metrics_than_the_bound_refuses_its_file(tmp_path: Path) -> None:
    bound = results.MAX_RECORD_METRICS
    at_bound = {f"x{i}": float(i) for i in range(bound)}
    ok = read_results(write(tmp_path / "ok.jsonl", RUN, storage(**at_bound)))
    assert not ok.bad_lines and len(ok.checks[0].metrics) == bound  # the bound itself is allowed

    many = {f"x{i}": float(i) for i in range(1000)}
    compute = {**CHECK, "check": "compute", "metrics": {"gemm_fp32_tflops": 1.0}}
    read = read_results(write(tmp_path / "n1.jsonl", RUN, compute, storage(**many)))
    assert [r.check for r in read.checks] == ["compute"]
    [bad] = read.bad_lines
    assert bad.line == 3 and bad.refuses_file
    assert "storage" in bad.problem and "1000 metrics" in bad.problem and str(bound) in bad.problem


@pytest.mark.parametrize("name", HOSTILE_NAMES, ids=lambda name: ascii(name)[:40])
@pytest.mark.parametrize("field", ["metrics", "per_device"])
def test_a_name_that_is_no_metric_name_refuses_its_file(tmp_path: Path, name: str, field: str) -> None:
    values: object = 1.0 if field == "metrics" else [1.0, 2.0]
    record = {**storage(storage_read_mbps=5000.0), field: {"storage_write_mbps": values, name: values}}
    read = read_results(write(tmp_path / "n1.jsonl", RUN, record))
    assert not read.checks
    [bad] = read.bad_lines
    assert bad.line == 2 and bad.refuses_file
    assert f"{field}: the record of check 'storage': metric name" in bad.problem
    # The problem quotes the name escaped and clipped: a report or terminal shows it, harmless.
    assert len(bad.problem) < 300
    assert not {"\x1b", "\n", "\t", "\u202e"} & set(bad.problem)


def test_a_writer_cannot_make_a_record_that_breaks_the_contract() -> None:
    """The runner validates every record it writes (a check's bad output becomes an error record)."""
    fields = {**CHECK, "check": "storage"}
    with pytest.raises(ValidationError, match="metric name"):
        CheckRecord.model_validate({**fields, "metrics": {"x\x1b[2J": 1.0}})
    with pytest.raises(ValidationError, match="more than"):
        CheckRecord.model_validate({**fields, "metrics": {f"x{i}": 1.0 for i in range(1000)}})


def test_an_ordinary_malformed_line_still_does_not_refuse_the_file(tmp_path: Path) -> None:
    """Only the metric contract refuses the file; a torn write stays a line the run may do without."""
    good = storage(storage_read_mbps=5000.0)
    text = (
        json.dumps(RUN) + "\n" + json.dumps(good) + "\n" + json.dumps(storage(**{"x\x1b": 1.0}))[:40] + "\n"
    )
    (tmp_path / "n1.jsonl").write_text(text, encoding="utf-8")
    read = read_results(tmp_path / "n1.jsonl")
    [bad] = read.bad_lines
    assert not bad.refuses_file and "not JSON" in bad.problem
    with pytest.raises(results.MetricContractError):
        parse_line(json.dumps(storage(**{"x\x1b": 1.0})))
