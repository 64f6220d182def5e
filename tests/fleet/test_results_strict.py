"""Reading results strictly: what a node or a careless tool can write never crashes or blocks a reader,
and never reads as a measurement it is not."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest
from pydantic import ValidationError

from fleet.results import (
    MAX_LINE_BYTES,
    CheckRecord,
    NewerSchemaError,
    ResultsWriter,
    RunRecord,
    iter_result_paths,
    parse_line,
    read_results,
)

BASE = {"run_id": "r1", "node": "n1", "sku": "cpu", "level": "quick", "started": "2026-11-29T00:00:00Z"}
CHECK = {**BASE, "schema": "fleetforge.result/1", "kind": "check", "check": "compute", "status": "pass"}


def line(**fields: object) -> str:
    return json.dumps({**CHECK, "metrics": {"gemm_fp32_tflops": 0.05}, "duration_s": 1.0, **fields})


def test_a_run_record_is_full_unless_it_says_partial() -> None:
    old = RunRecord.model_validate({**BASE, "checks": ["compute"]})  # as files written before the field
    assert old.partial is False
    narrowed = RunRecord.model_validate({**BASE, "checks": ["compute"], "partial": True})
    assert json.loads(narrowed.to_json())["partial"] is True


@pytest.mark.parametrize("value", [True, False, "720", "nan", None, [1.0], {"v": 1.0}])
def test_metric_values_are_strict_numbers(value: object) -> None:
    with pytest.raises(ValueError, match=r"metrics\.gemm_fp32_tflops"):
        parse_line(line(metrics={"gemm_fp32_tflops": value}))


def test_integers_are_numbers() -> None:
    record = parse_line(line(metrics={"ecc_uncorrectable": 0, "gemm_fp32_tflops": 1}))
    assert isinstance(record, CheckRecord) and record.metrics == {
        "ecc_uncorrectable": 0.0,
        "gemm_fp32_tflops": 1.0,
    }


def test_booleans_are_not_durations_or_per_device_values() -> None:
    with pytest.raises(ValidationError):
        CheckRecord.model_validate({**CHECK, "metrics": {"x": 1.0}, "duration_s": True})
    with pytest.raises(ValueError, match="per_device"):
        parse_line(line(per_device={"gemm_fp32_tflops": [1.0, True]}))


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_non_json_constants_make_the_line_unreadable(constant: str) -> None:
    text = line().replace('"gemm_fp32_tflops": 0.05', f'"gemm_fp32_tflops": {constant}')
    assert constant in text
    with pytest.raises(ValueError, match="not a JSON number"):
        parse_line(text)


def test_deep_nesting_is_an_unreadable_line_not_a_recursion_error() -> None:
    for text in ("[" * 100_000 + "]" * 100_000, '{"a":' * 100_000 + "1" + "}" * 100_000):
        with pytest.raises(ValueError, match="nested too deeply"):
            parse_line(text)


def test_a_newer_schema_is_refused_as_written_by_a_newer_fleetforge() -> None:
    with pytest.raises(NewerSchemaError, match="written by a newer fleetforge"):
        parse_line(line(schema="fleetforge.result/2"))
    with pytest.raises(ValueError, match="is not") as other:  # not a version: plainly unreadable
        parse_line(line(schema="something/else"))
    assert not isinstance(other.value, NewerSchemaError)


def test_a_newer_schema_line_refuses_its_file(tmp_path: Path) -> None:
    path = tmp_path / "n1.jsonl"
    path.write_text(line() + "\n" + line(schema="fleetforge.result/2") + "\n")
    got = read_results(path)
    assert len(got.checks) == 1
    assert [(b.line, b.refuses_file) for b in got.bad_lines] == [(2, True)]


def test_an_oversized_line_is_skipped_and_the_next_still_read(tmp_path: Path) -> None:
    path = tmp_path / "n1.jsonl"
    huge = '{"pad": "' + "x" * (MAX_LINE_BYTES * 3) + '"}'
    path.write_text(huge + "\n" + line() + "\n" + "y" * (MAX_LINE_BYTES + 5))
    got = read_results(path)
    assert len(got.checks) == 1
    assert [b.line for b in got.bad_lines] == [1, 3]
    assert all("longer than" in b.problem for b in got.bad_lines)


def test_invalid_utf8_is_an_unreadable_line(tmp_path: Path) -> None:
    path = tmp_path / "n1.jsonl"
    path.write_bytes(line().encode() + b"\n" + b'{"schema": "\xff\xfe"}\n')
    got = read_results(path)
    assert len(got.checks) == 1 and [b.line for b in got.bad_lines] == [2]


def test_a_fifo_is_reported_and_never_opened_for_blocking_reads(tmp_path: Path) -> None:
    fifo = tmp_path / "n1.jsonl"
    os.mkfifo(fifo)
    box: list[object] = []
    reader = threading.Thread(target=lambda: box.append(read_results(fifo)), daemon=True)
    reader.start()
    reader.join(timeout=5)
    if reader.is_alive():  # unblock the stuck reader so the test run can end, then fail
        with open(fifo, "w"):
            pass
        pytest.fail("read_results blocked on a FIFO")
    got = box[0]
    assert [(b.line, b.problem, b.refuses_file) for b in got.bad_lines] == [  # type: ignore[attr-defined]
        (0, "is a FIFO, not a results file", True)
    ]


def test_folders_and_dangling_symlinks_named_jsonl_are_listed_and_reported(tmp_path: Path) -> None:
    with ResultsWriter(tmp_path / "good.jsonl") as w:
        w.append(RunRecord.model_validate({**BASE, "checks": ["compute"]}))
    (tmp_path / "folder.jsonl").mkdir()
    (tmp_path / "dangling.jsonl").symlink_to(tmp_path / "nowhere")
    paths = list(iter_result_paths([tmp_path]))
    assert [p.name for p in paths] == ["dangling.jsonl", "folder.jsonl", "good.jsonl"]
    problems = {p.name: [b.problem for b in read_results(p).bad_lines] for p in paths}
    assert problems["good.jsonl"] == []
    assert problems["folder.jsonl"] == ["is a folder, not a results file"]
    assert problems["dangling.jsonl"][0].startswith("is a dangling symlink")
