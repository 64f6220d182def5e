"""Burn-in result records (docs/results.md): the typed shape, a durable writer, a tolerant reader.

The writer appends one JSON line per record and fsyncs before returning, so a crash of the runner
never loses a finished check. The reader keeps every line that parses and reports the rest; a
truncated tail is never guessed at, and the checks it would have held count as missing.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

SCHEMA = "fleetforge.result/1"
Status = Literal["pass", "fail", "error", "skip"]
Level = Literal["quick", "standard", "extended"]


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


class _Record(BaseModel):
    # Readers of this version ignore fields a later writer adds (docs/results.md).
    model_config = ConfigDict(extra="ignore", frozen=True)

    schema_: Literal["fleetforge.result/1"] = Field(default="fleetforge.result/1", alias="schema")
    run_id: str = Field(min_length=1)
    node: str = Field(min_length=1)
    sku: str = Field(min_length=1)
    level: Level
    started: str
    versions: dict[str, str] = {}

    def to_json(self) -> str:
        return json.dumps(self.model_dump(mode="json", by_alias=True), separators=(",", ":"), sort_keys=True)


class RunRecord(_Record):
    kind: Literal["run"] = "run"
    checks: tuple[str, ...]
    # A run narrowed by `--only` records only some checks; the gate must not read its short list as
    # the whole burn-in. Files written before this field existed read as full runs.
    partial: bool = False


class CheckRecord(_Record):
    kind: Literal["check"] = "check"
    check: str = Field(min_length=1)
    status: Status
    reason: str | None = None
    metrics: dict[str, float] = {}
    per_device: dict[str, list[float]] = {}
    findings: list[str] = []
    backend: str = ""
    duration_s: float = Field(ge=0)
    error: str | None = None

    @model_validator(mode="after")
    def _status_is_earned(self) -> CheckRecord:
        # A pass without measurements would let a broken check call a node healthy.
        if self.status == "pass" and not self.metrics:
            raise ValueError("a pass record must carry the metrics it measured")
        if self.status in {"fail", "error", "skip"} and not (self.reason or self.error):
            raise ValueError(f"a {self.status} record must say why (reason or error)")
        return self


Record = RunRecord | CheckRecord


class ResultsWriter:
    """Appends records to one JSONL file, flushed and fsynced per record."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fh: IO[str] = path.open("a", encoding="utf-8")

    def append(self, record: Record) -> None:
        self._fh.write(record.to_json() + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> ResultsWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True)
class BadLine:
    path: Path
    line: int
    problem: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.problem}"


@dataclass
class ResultFile:
    """Everything readable in one results file, plus what was not."""

    path: Path
    runs: list[RunRecord] = field(default_factory=list)
    checks: list[CheckRecord] = field(default_factory=list)
    bad_lines: list[BadLine] = field(default_factory=list)


def parse_line(text: str) -> Record:
    """One JSONL line to a record; raises ValueError with a short reason."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON ({exc.msg}); truncated write?") from None
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    schema = data.get("schema")
    if schema != SCHEMA:
        raise ValueError(f"schema {schema!r} is not {SCHEMA!r}; upgrade fleetforge to read it")
    kind = data.get("kind")
    model: type[RunRecord] | type[CheckRecord]
    if kind == "run":
        model = RunRecord
    elif kind == "check":
        model = CheckRecord
    else:
        raise ValueError(f"kind {kind!r} is not 'run' or 'check'")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"]) or kind
        raise ValueError(f"{where}: {first['msg']}") from None


def read_results(path: Path) -> ResultFile:
    """Read one JSONL file; unreadable lines are collected in `bad_lines`, never raised."""
    result = ResultFile(path)
    with path.open("r", encoding="utf-8", errors="replace") as fh:
        for number, raw in enumerate(fh, start=1):
            text = raw.strip()
            if not text:
                continue
            try:
                record = parse_line(text)
            except ValueError as exc:
                result.bad_lines.append(BadLine(path, number, str(exc)))
                continue
            if isinstance(record, RunRecord):
                result.runs.append(record)
            else:
                result.checks.append(record)
    return result


def iter_result_paths(inputs: Iterable[Path]) -> Iterator[Path]:
    """Expand files and folders (recursively, *.jsonl) in a stable order."""
    for item in inputs:
        if item.is_dir():
            yield from sorted(p for p in item.rglob("*.jsonl") if p.is_file())
        else:
            yield item
